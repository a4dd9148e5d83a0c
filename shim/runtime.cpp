// runtime.cpp - specs registered while the process runs (torch_tk.kernel,
// torch_tk.load). A spec is checked in a scratch context first (its errors,
// backward links, name clashes), its CPU kernels are compiled by the system C
// compiler (runtime/tk_cc.h) outside any lock, and only then is it loaded
// into the process context and registered on a FRAGMENT library of its own
// with the generic kernels every op uses (register_op). docs/runtime.md.
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shim.h"
#include "tk_cc.h"

// The built-in spec table (gen/tk_builtin.c): its ops can never be replaced.
extern "C" {
extern const tk_builtin_spec tk_builtin_specs[];
extern const int tk_builtin_nspecs;
}

namespace tk_shim {
namespace {

// Why a registration failed: a tk_status and the message for the user.
struct Failure {
  tk_status status;
  std::string message;
};

struct Spec {
  std::string file, text;
  bool builtin;
};

// What is registered: every spec in the process context (built-in ones
// first), which spec owns each op name, the libraries (kept for the life of
// the process: destroying one would deregister its ops).
struct Runtime {
  std::mutex mutex;
  std::vector<Spec> specs;
  std::map<std::string, size_t> owner;
  std::vector<std::unique_ptr<torch::Library>> libraries;
  tk_cc* cc = nullptr;
};

Runtime& runtime() {
  static Runtime* const rt = [] {
    const tk_ctx* ctx = context();  // throws if the built-in ops did not load
    auto* r = new Runtime;
    for (int i = 0; i < tk_builtin_nspecs; ++i)
      r->specs.push_back({tk_builtin_specs[i].file, tk_builtin_specs[i].text, true});
    for (int i = 0; i < tk_op_count(ctx); ++i)
      for (size_t s = 0; s < r->specs.size(); ++s)
        if (r->specs[s].file == tk_op_file(tk_op_at(ctx, i))) r->owner[tk_op_name(tk_op_at(ctx, i))] = s;
    r->cc = tk_cc_new(nullptr);  // reads TK_CC, CC, TK_CACHE_DIR, TK_DEBUG
    TORCH_CHECK(r->cc != nullptr, "tk: out of memory");
    return r;
  }();
  return *rt;
}

using Scratch = std::unique_ptr<tk_ctx, void (*)(tk_ctx*)>;

std::vector<std::string> names_of(const tk_ctx* ctx, int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.emplace_back(tk_op_name(tk_op_at(ctx, i)));
  return names;
}

// Whether every op name is already registered by this very text (true), or
// none is (false). Throws for a built-in name or another spec's name.
bool already_registered(const Runtime& rt, const std::vector<std::string>& names, const std::string& text) {
  size_t same = 0;
  for (const std::string& name : names) {
    auto it = rt.owner.find(name);
    if (it == rt.owner.end()) continue;
    const Spec& spec = rt.specs[it->second];
    if (spec.builtin)
      throw Failure{TK_ERR_INVALID, "tk." + name + " is a built-in op (" + spec.file +
                                        ") and cannot be replaced: give your op another name"};
    if (spec.text != text)
      throw Failure{TK_ERR_INVALID, "tk." + name + " is already registered from a different spec (" + spec.file +
                                        "); an op cannot be redefined in a running process: give it a new name, "
                                        "or restart the process"};
    ++same;
  }
  return same == names.size();
}

// Checks that the new ops (the first n of scratch) link to their backward
// ops, which may be in an already registered spec: every registered spec is
// loaded next to them (none defines one of their names), then linked.
void check_links(const Runtime& rt, tk_ctx* scratch) {
  for (const Spec& spec : rt.specs)
    if (tk_load_spec(scratch, spec.file.c_str(), spec.text.c_str(), spec.text.size()) != TK_OK)
      throw Failure{TK_ERR_INVALID, std::string("tk: internal error: reloading ") + spec.file +
                                        " failed: " + tk_ctx_error(scratch)};
  tk_status st = tk_ctx_link(scratch);
  if (st != TK_OK) throw Failure{st, tk_ctx_error(scratch)};
}

// Loads the spec into the process context, gives its ops the kernels
// compiled for the scratch copies, and registers them with torch. Under rt.mutex.
void commit(Runtime& rt, const tk_ctx* scratch, const std::vector<std::string>& names, const std::string& file,
            const std::string& text) {
  tk_ctx* ctx = const_cast<tk_ctx*>(context());
  if (tk_load_spec(ctx, file.c_str(), text.c_str(), text.size()) != TK_OK || tk_ctx_link(ctx) != TK_OK)
    throw Failure{TK_ERR_INVALID, std::string("tk: internal error: ") + tk_ctx_error(ctx)};
  std::vector<const tk_op*> ops;
  for (const std::string& name : names) {
    tk_op* op = tk_op_find_mut(ctx, name.c_str());
    const tk_op* compiled = tk_op_find(scratch, name.c_str());
    for (int v = 0; v < tk_op_nvariants(op); ++v) tk_op_set_cpu_kernel(op, v, tk_op_cpu_kernel(compiled, v));
    ops.push_back(op);
  }
  rt.specs.push_back({file, text, false});
  for (const std::string& name : names) rt.owner[name] = rt.specs.size() - 1;
  auto lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "tk", std::nullopt, file.c_str(), 1);
  try {
    for (const tk_op* op : ops) register_op(*lib, op);
  } catch (const std::exception& e) {
    rt.libraries.push_back(std::move(lib));  // what did register stays consistent
    throw Failure{TK_ERR_INVALID, std::string("tk: registering ") + file + " with torch failed: " + e.what()};
  }
  rt.libraries.push_back(std::move(lib));
}

// Registers every op of the spec text; returns their names in spec order.
std::vector<std::string> register_spec(const std::string& file, const std::string& text) {
  Runtime& rt = runtime();
  Scratch scratch(tk_ctx_new(), tk_ctx_free);
  if (!scratch) throw Failure{TK_ERR_NOMEM, "tk: out of memory"};
  tk_status st = tk_load_spec(scratch.get(), file.c_str(), text.c_str(), text.size());
  if (st != TK_OK) throw Failure{st, tk_ctx_error(scratch.get())};
  const int n = tk_op_count(scratch.get());
  const std::vector<std::string> names = names_of(scratch.get(), n);
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (already_registered(rt, names, text)) return names;
    check_links(rt, scratch.get());
  }
  std::vector<tk_op*> ops;
  for (int i = 0; i < n; ++i) ops.push_back(const_cast<tk_op*>(tk_op_at(scratch.get(), i)));
  std::string msg(32768, '\0');
  st = tk_cc_compile(rt.cc, scratch.get(), ops.data(), n, &msg[0], msg.size());
  if (st != TK_OK) throw Failure{st, msg.c_str()};
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!already_registered(rt, names, text)) commit(rt, scratch.get(), names, file, text);
  return names;
}

}  // namespace
}  // namespace tk_shim

// For torch_tk.kernel / torch_tk.load (ctypes): registers every op of the
// spec `text` (named `file` in messages) as torch.ops.tk.<name>. Returns
// TK_OK with the op names, one per line, in out; else the status (a spec
// error is TK_ERR_SYNTAX or TK_ERR_CHECK, "file:line:col: error: ...") with
// the message in out. The same text again is a no-op; thread-safe.
extern "C" __attribute__((visibility("default"))) int tk_shim_register(const char* file, const char* text,
                                                                       char* out, size_t outlen) {
  std::string result;
  int status = TK_OK;
  try {
    for (const std::string& name : tk_shim::register_spec(file ? file : "<string>", text ? text : ""))
      result += name + "\n";
  } catch (const tk_shim::Failure& f) {
    status = f.status;
    result = f.message;
  } catch (const std::exception& e) {
    status = TK_ERR_INVALID;
    result = e.what();
  }
  if (out != nullptr && outlen > 0) snprintf(out, outlen, "%s", result.c_str());
  return status;
}

// The CPU kernel cache folder of run-time specs ("" when off), for docs and info.
extern "C" __attribute__((visibility("default"))) const char* tk_shim_cc_cache_dir(void) {
  try {
    return tk_cc_cache_dir(tk_shim::runtime().cc);
  } catch (const std::exception&) {
    return "";
  }
}
