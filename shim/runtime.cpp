// runtime.cpp - specs registered while the process runs (torch_tk.kernel,
// torch_tk.load). A spec is checked in a scratch context first (its errors,
// backward links, name clashes), then loaded into the process context and
// registered on a FRAGMENT library of its own with the generic kernels every
// op uses (register_op). Its CPU kernels are compiled by the system C
// compiler (runtime/tk_cc.h) one (op, dtype variant) at a time, on the
// first CPU call that needs one (ensure_cpu_kernel), outside any lock but
// that variant's own. docs/runtime.md.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>

#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
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

// Why a registration failed: a tk_status and the message for the user;
// for an error of the spec itself, the core's error with its place.
struct Failure {
  tk_status status;
  std::string message;
  tk_error error{};  // status TK_OK: not an error of the core (the message says all)
};

// The Failure of ctx's last error (a spec that does not load or link).
Failure spec_failure(const tk_ctx* ctx) {
  const tk_error* e = tk_ctx_last_error(ctx);
  return Failure{static_cast<tk_status>(e->status), e->text, *e};
}

struct Spec {
  std::string file, text;
  bool builtin;
  bool checked = false;  // its ops' kernels are checked ones (tk_op_set_checked)
};

using Scratch = std::unique_ptr<tk_ctx, void (*)(tk_ctx*)>;

// A registered run-time spec's own context (source_context), kept to emit
// the C of its ops' variants on demand: emitting annotates an op's AST, and
// the process context's copies are CUDA's to emit (tk_cuda serialises those).
struct SourceSpec {
  explicit SourceSpec(Scratch c) : ctx(std::move(c)) {}
  Scratch ctx;
  std::mutex emit_mutex;  // one emit at a time in ctx
};

// One dtype variant of a run-time op: its compile is serialised, and counted.
struct Variant {
  std::mutex mutex;            // held while the variant compiles: concurrent first calls compile once
  std::atomic<int> loads{0};   // kernels compiled or loaded from the disk cache for it
};

// A run-time op whose CPU kernels are compiled on demand: the process
// context's op (that calls run), its copy in the spec's own context (that is
// emitted), a Variant per dtype variant.
struct LazyOp {
  tk_op* op;
  tk_op* source;
  std::shared_ptr<SourceSpec> spec;
  std::unique_ptr<Variant[]> variants;
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
  // run-time ops by process op, in registration order; entries are never
  // removed, so a LazyOp* stays valid (own lock: a first call never waits
  // for a registration's parsing)
  std::mutex lazy_mutex;
  std::map<const tk_op*, std::unique_ptr<LazyOp>> lazy;
  std::vector<const LazyOp*> lazy_order;
};

// The runtime, made on first use under init_mutex (not a function-local
// static: a fork while another thread was making it would leave the child's
// guard of that static pending for ever; the fork guard below takes
// init_mutex instead).
std::mutex init_mutex;
std::atomic<Runtime*> made{nullptr};

Runtime& runtime() {
  Runtime* rt = made.load(std::memory_order_acquire);
  if (rt != nullptr) return *rt;
  std::lock_guard<std::mutex> lock(init_mutex);
  rt = made.load(std::memory_order_relaxed);
  if (rt != nullptr) return *rt;
  const tk_ctx* ctx = context();  // throws if the built-in ops did not load
  auto r = std::make_unique<Runtime>();
  for (int i = 0; i < tk_builtin_nspecs; ++i)
    r->specs.push_back({tk_builtin_specs[i].file, tk_builtin_specs[i].text, true});
  for (int i = 0; i < tk_op_count(ctx); ++i)
    for (size_t s = 0; s < r->specs.size(); ++s)
      if (r->specs[s].file == tk_op_file(tk_op_at(ctx, i))) r->owner[tk_op_name(tk_op_at(ctx, i))] = s;
  r->cc = tk_cc_new(nullptr);  // reads TK_CC, CC, TK_CACHE_DIR, TK_DEBUG
  TORCH_CHECK(r->cc != nullptr, "tk: out of memory");
  made.store(r.get(), std::memory_order_release);
  return *r.release();
}

// Fork safety (DataLoader workers with the fork start method): a child
// starts with the forking thread alone, and a lock another thread of the
// parent held at that moment (a first call compiling, a spec registering, an
// op's first autograd call planning) would stay locked in the child for
// ever. So fork waits until no thread is inside one: prepare takes every
// lock, in the order the other threads take them (init_mutex, rt.mutex,
// lazy_mutex, each variant's, each spec's emit lock, the compiler's; the
// autograd plan table's, which no thread holds while it waits for another),
// and the parent and the child release them, the child holding state no
// thread was changing. A fork during a compile waits for it (seconds).
// Installed when libtk loads; nothing here allocates or throws.
void for_each_runtime_lock(Runtime& rt, void (*f)(std::mutex&)) {
  for (size_t k = 0; k < rt.lazy_order.size(); ++k) {
    const LazyOp* lazy = rt.lazy_order[k];
    for (int v = 0; v < tk_op_nvariants(lazy->op); ++v) f(lazy->variants[v].mutex);
    bool first = true;   // a spec's emit lock once, for its first op
    for (size_t j = 0; j < k && first; ++j) first = rt.lazy_order[j]->spec != lazy->spec;
    if (first) f(lazy->spec->emit_mutex);
  }
}

void fork_prepare() noexcept {
  init_mutex.lock();
  if (Runtime* rt = made.load(std::memory_order_acquire)) {
    rt->mutex.lock();
    rt->lazy_mutex.lock();
    for_each_runtime_lock(*rt, [](std::mutex& m) { m.lock(); });
    tk_cc_lock(rt->cc);
  }
  plan_mutex().lock();
}

void fork_release() noexcept {
  plan_mutex().unlock();
  if (Runtime* rt = made.load(std::memory_order_acquire)) {
    tk_cc_unlock(rt->cc);
    for_each_runtime_lock(*rt, [](std::mutex& m) { m.unlock(); });
    rt->lazy_mutex.unlock();
    rt->mutex.unlock();
  }
  init_mutex.unlock();
}

const int fork_guard = pthread_atfork(&fork_prepare, &fork_release, &fork_release);

std::vector<std::string> names_of(const tk_ctx* ctx, int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.emplace_back(tk_op_name(tk_op_at(ctx, i)));
  return names;
}

// The spec text without what cannot change its ops: comments, trailing
// spaces and blank lines (indentation stays: it is syntax). A notebook cell
// re-run after an edit to a comment registers nothing new.
std::string meaning_of(const std::string& text) {
  std::string out, line;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    line.assign(text, pos, end - pos);
    size_t hash = line.find('#');   // (the language has no strings: '#' always starts a comment)
    if (hash != std::string::npos) line.resize(hash);
    size_t last = line.find_last_not_of(" \t\r\f\v");
    if (last != std::string::npos) out.append(line, 0, last + 1).push_back('\n');
    pos = end + 1;
  }
  return out;
}

// Whether every op name is already registered by this very text (true), or
// none is (false). Throws for a built-in name or another spec's name.
// ctx: the new text's ops, in the order of names (a derived op's name says
// so: 'backward auto' of the op it differentiates takes it).
bool already_registered(const Runtime& rt, const tk_ctx* ctx, const std::vector<std::string>& names,
                        const std::string& text, bool checked) {
  size_t same = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    auto it = rt.owner.find(name);
    if (it == rt.owner.end()) continue;
    const Spec& spec = rt.specs[it->second];
    const char* from = tk_op_derived_from(tk_op_at(ctx, static_cast<int>(i)));
    const std::string derived = from != nullptr ? std::string(" ('backward auto' of ") + from +
                                                      " derives an op of that name: rename " + from + ")"
                                                : std::string();
    if (spec.builtin)
      throw Failure{TK_ERR_INVALID, "tk." + name + " is a built-in op (" + spec.file +
                                        ") and cannot be replaced: give your op another name" + derived};
    if (spec.text != text && meaning_of(spec.text) != meaning_of(text))
      throw Failure{TK_ERR_INVALID, "tk." + name + " is already registered from a different spec (" + spec.file +
                                        "); an op cannot be redefined in a running process: give it a new name, "
                                        "or restart the process" + derived};
    if (spec.checked != checked)
      throw Failure{TK_ERR_INVALID, "tk." + name + " is already registered " + (spec.checked ? "checked" : "unchecked") +
                                        " (" + spec.file + "); checked mode is fixed at an op's first registration: "
                                        "give the same checked= (and TK_CHECKED) every time, or restart the process"};
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
  if (st != TK_OK) throw spec_failure(scratch);
}

// Checks that torch takes every new op (the first n of scratch) before any
// is registered, so a refusal registers nothing and leaves the names free:
// its schema parses (the checker already refuses what it knows torch
// refuses) and no other library defined tk::<name> (torch.library).
void check_torch_takes(const tk_ctx* scratch, int n) {
  for (int i = 0; i < n; ++i) {
    const tk_op* op = tk_op_at(scratch, i);
    const std::string name = tk_op_name(op), schema = std::string("tk::") + tk_op_schema(op);
    try {
      (void)torch::jit::parseSchema(schema);
    } catch (const std::exception& e) {
      throw Failure{TK_ERR_INVALID, "tk." + name + ": torch refuses its schema " + schema + ": " + e.what()};
    }
    if (c10::Dispatcher::singleton().findSchema(c10::OperatorName("tk::" + name, "")).has_value())
      throw Failure{TK_ERR_INVALID, "tk::" + name + " is already defined in torch by another library (not by a tk "
                                    "spec): give your op another name"};
  }
}

// A context holding the spec alone, to emit its ops' C from: the scratch
// context also holds every spec registered before (loaded to link), which
// kept per spec would grow with the square of their number. Linking only
// checks, so the C is the same. The scratch itself if the copy fails.
Scratch source_context(Scratch scratch, const std::string& file, const std::string& text) {
  Scratch alone(tk_ctx_new(), tk_ctx_free);
  if (alone && tk_load_spec(alone.get(), file.c_str(), text.c_str(), text.size()) == TK_OK) return alone;
  return scratch;
}

// Loads the spec into the process context, makes its ops lazy (their CPU
// kernels come from the C of a copy of the spec on first use), and
// registers them with torch. Under rt.mutex.
void commit(Runtime& rt, Scratch scratch, const std::vector<std::string>& names, const std::string& file,
            const std::string& text, bool checked) {
  tk_ctx* ctx = const_cast<tk_ctx*>(context());
  if (tk_load_spec(ctx, file.c_str(), text.c_str(), text.size()) != TK_OK || tk_ctx_link(ctx) != TK_OK)
    throw Failure{TK_ERR_INVALID, std::string("tk: internal error: ") + tk_ctx_error(ctx)};
  auto spec = std::make_shared<SourceSpec>(source_context(std::move(scratch), file, text));
  std::vector<const tk_op*> ops;
  for (const std::string& name : names) {
    tk_op* op = tk_op_find_mut(ctx, name.c_str());
    auto lazy = std::make_unique<LazyOp>();
    lazy->op = op;
    lazy->source = tk_op_find_mut(spec->ctx.get(), name.c_str());
    tk_op_set_checked(op, checked);  // CUDA emits the process context's op, the CPU compile the source copy
    tk_op_set_checked(lazy->source, checked);
    lazy->spec = spec;
    lazy->variants = std::make_unique<Variant[]>(static_cast<size_t>(tk_op_nvariants(op)));
    {
      std::lock_guard<std::mutex> lock(rt.lazy_mutex);  // before register_op: no call can come first
      rt.lazy_order.push_back(lazy.get());
      rt.lazy[op] = std::move(lazy);
    }
    ops.push_back(op);
  }
  rt.specs.push_back({file, text, false, checked});
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

// Whether run-time specs get checked kernels when the caller does not say:
// TK_CHECKED=1 in the environment (read once per process).
bool env_checked() {
  static const bool on = [] {
    const char* v = std::getenv("TK_CHECKED");
    return v != nullptr && v[0] != 0 && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Registers every op of the spec text, with checked kernels when `checked`;
// returns their names in spec order.
std::vector<std::string> register_spec(const std::string& file, const std::string& text, bool checked) {
  Runtime& rt = runtime();
  Scratch scratch(tk_ctx_new(), tk_ctx_free);
  if (!scratch) throw Failure{TK_ERR_NOMEM, "tk: out of memory"};
  tk_status st = tk_load_spec(scratch.get(), file.c_str(), text.c_str(), text.size());
  if (st != TK_OK) throw spec_failure(scratch.get());
  const int n = tk_op_count(scratch.get());
  const std::vector<std::string> names = names_of(scratch.get(), n);
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (already_registered(rt, scratch.get(), names, text, checked)) return names;
    check_links(rt, scratch.get());
  }
  // Nothing is compiled here (ensure_cpu_kernel does, per variant, at its
  // first CPU call), but a missing C compiler is reported now: `cc
  // --version`, run once per process, a few milliseconds.
  std::string msg(4096, '\0');
  st = tk_cc_check(rt.cc, &msg[0], msg.size());
  if (st != TK_OK) throw Failure{st, msg.c_str()};
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (already_registered(rt, scratch.get(), names, text, checked)) return names;
  check_torch_takes(scratch.get(), n);
  commit(rt, std::move(scratch), names, file, text, checked);
  return names;
}

// The lazy entry of op, nullptr for an op that is not a run-time one.
LazyOp* lazy_op(Runtime& rt, const tk_op* op) {
  std::lock_guard<std::mutex> lock(rt.lazy_mutex);
  auto it = rt.lazy.find(op);
  return it == rt.lazy.end() ? nullptr : it->second.get();
}

// The C of one variant of lazy's op, malloc'd; throws with the emitter's
// message (a bug in tk: the spec was checked when it was registered).
char* emit_variant(LazyOp& lazy, int variant, const tk_cc* cc) {
  std::lock_guard<std::mutex> lock(lazy.spec->emit_mutex);
  tk_ctx* ctx = lazy.spec->ctx.get();
  char* src = nullptr;
  TORCH_CHECK(tk_emit_scheduled(ctx, lazy.source, variant, variant + 1, TK_TARGET_C, tk_cc_emit_flags(cc), nullptr, &src,
                                nullptr) == TK_OK,
              "tk: generating C for ",
              tk_op_name(lazy.op), " (", tk_op_variant_code(lazy.op, variant), ") failed: ", tk_ctx_error(ctx));
  return src;
}

}  // namespace

void ensure_cpu_kernel(const tk_op* op, int variant) {
  Runtime& rt = runtime();
  LazyOp* lazy = lazy_op(rt, op);
  if (lazy == nullptr || variant < 0 || variant >= tk_op_nvariants(op)) return;  // tk_run_cpu says what is missing
  Variant& v = lazy->variants[variant];
  std::lock_guard<std::mutex> lock(v.mutex);
  if (tk_op_cpu_kernel(op, variant) != nullptr) return;  // another thread's first call compiled it meanwhile
  std::unique_ptr<char, void (*)(void*)> src(emit_variant(*lazy, variant, rt.cc), &std::free);
  std::string buf(32768, '\0');
  const tk_status st = tk_cc_compile_variant_source(rt.cc, lazy->op, variant, src.get(), &buf[0], buf.size());
  if (st != TK_OK) {
    // a failed compile names the op ("tk: compiling the CPU kernels of <op>
    // (<variant>) failed ..."); a compiler gone missing since registration
    // or a file that does not load gets the op and the variant in front
    const std::string msg = buf.c_str();
    if (msg.find(std::string(" ") + tk_op_name(op) + " (") != std::string::npos) TORCH_CHECK(false, msg);
    TORCH_CHECK(false, "tk.", tk_op_name(op), " (", tk_op_variant_code(op, variant), "): ", msg);
  }
  v.loads.fetch_add(1);
}

}  // namespace tk_shim

// For torch_tk.kernel / torch_tk.load (ctypes, python/torch_tk/_capi.py):
// registers every op of the spec `text` (named `file` in messages) as
// torch.ops.tk.<name>. checked: 1 checked kernels (docs/spec.md, Bounds),
// 0 not, -1 as TK_CHECKED says. Returns TK_OK with the op names, one per
// line, in out; else the status with the error in *err: for an error of the
// spec (TK_ERR_SYNTAX, TK_ERR_CHECK) its file, line, col and message, else
// the message alone (line 0). The same text again is a no-op; thread-safe.
extern "C" __attribute__((visibility("default"))) int tk_shim_register(const char* file, const char* text,
                                                                       int checked, char* out, size_t outlen,
                                                                       tk_error* err) {
  std::string names;
  tk_error error{};
  try {
    const bool on = checked < 0 ? tk_shim::env_checked() : checked != 0;
    for (const std::string& name : tk_shim::register_spec(file ? file : "<string>", text ? text : "", on))
      names += name + "\n";
  } catch (const tk_shim::Failure& f) {
    if (f.error.status != TK_OK)
      error = f.error;
    else
      tk_error_from_message(&error, f.status, f.message.c_str());
  } catch (const std::exception& e) {
    tk_error_from_message(&error, TK_ERR_INVALID, e.what());
  }
  if (out != nullptr && outlen > 0) snprintf(out, outlen, "%s", error.status == TK_OK ? names.c_str() : "");
  if (err != nullptr) *err = error;
  return error.status;
}

// For torch_tk.runtime_kernels(): one line "<op> <variant> <loads>" per
// dtype variant of every run-time op, in registration order, loads being
// how many times its CPU kernel was compiled or loaded from the disk cache
// in this process (0: not yet called on the CPU; 1 afterwards). Writes at
// most outlen bytes (NUL-terminated) and returns the length of the whole text.
extern "C" __attribute__((visibility("default"))) size_t tk_shim_runtime_kernels(char* out, size_t outlen) {
  std::string text;
  try {
    tk_shim::Runtime& rt = tk_shim::runtime();
    std::lock_guard<std::mutex> lock(rt.lazy_mutex);
    for (const tk_shim::LazyOp* lazy : rt.lazy_order)
      for (int v = 0; v < tk_op_nvariants(lazy->op); ++v)
        text += std::string(tk_op_name(lazy->op)) + " " + tk_op_variant_code(lazy->op, v) + " " +
                std::to_string(lazy->variants[v].loads.load()) + "\n";
  } catch (const std::exception&) {
    text.clear();
  }
  if (out != nullptr && outlen > 0) snprintf(out, outlen, "%s", text.c_str());
  return text.size();
}

// The CPU kernel cache folder of run-time specs ("" when off), for docs and info.
extern "C" __attribute__((visibility("default"))) const char* tk_shim_cc_cache_dir(void) {
  try {
    return tk_cc_cache_dir(tk_shim::runtime().cc);
  } catch (const std::exception&) {
    return "";
  }
}
