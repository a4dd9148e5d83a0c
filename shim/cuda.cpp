// cuda.cpp - running tk ops on CUDA tensors, with no CUDA header or library
// at build time: one libtk.so serves CPU-only and CUDA builds of torch.
//   - the core's launcher (runtime/tk_cuda.h) opens the driver and NVRTC
//     at run time, compiles each op's variant once per device and launches it;
//   - torch's current stream comes from torch's C shim function
//     aoti_torch_get_current_cuda_stream (libtorch_cuda.so of CUDA builds;
//     docs/gpu.md lists the torch versions checked), looked up on first use.
// Also the C entry points `python -m torch_tk info` and `precompile` use.
#include <dlfcn.h>

#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shim.h"
#include "tk_cuda.h"

namespace tk_shim {
namespace {

// int32_t aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream)
using GetStreamFn = int32_t (*)(int32_t, void**);
constexpr const char* kGetStream = "aoti_torch_get_current_cuda_stream";

// Folders where pip's NVRTC wheels sit next to the installed torch:
// site-packages/nvidia/cu13/lib (CUDA 13), nvidia/cuda_nvrtc/lib (CUDA 12),
// and torch/lib. Found from where libc10.so was loaded.
std::vector<std::string> nvrtc_dirs() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || !info.dli_fname)
    return {};
  std::string lib = info.dli_fname;                    // .../site-packages/torch/lib/libc10.so
  std::string torch_lib = lib.substr(0, lib.rfind('/'));
  std::string torch_dir = torch_lib.substr(0, torch_lib.rfind('/'));
  std::string site = torch_dir.substr(0, torch_dir.rfind('/'));
  return {site + "/nvidia/cu13/lib", site + "/nvidia/cuda_nvrtc/lib", torch_lib};
}

// The process's GPU state, created on first use and never freed (kernels
// may still be launched while the process exits).
tk_cuda* state() {
  static tk_cuda* const cu = [] {
    std::vector<std::string> dirs = nvrtc_dirs();
    std::vector<const char*> ptrs;
    for (const std::string& d : dirs) ptrs.push_back(d.c_str());
    tk_cuda_options opt{ptrs.data(), static_cast<int>(ptrs.size()), nullptr, nullptr, -1};
    return tk_cuda_new(&opt);   // copies the folder names
  }();
  TORCH_CHECK(cu != nullptr, "tk: out of memory creating the CUDA state");
  return cu;
}

// The built-in context, writable: emitting CUDA C annotates an op's AST.
// tk_cuda serialises its emits, and nothing else emits the built-in ops.
tk_ctx* mutable_context() { return const_cast<tk_ctx*>(context()); }

// torch's C shim function for the current stream, or null (CPU-only torch).
// libtk is loaded RTLD_LOCAL and does not link libtorch_cuda, so after the
// default scope the already-loaded libtorch_cuda.so is asked directly.
GetStreamFn stream_getter() {
  static const GetStreamFn fn = [] {
    void* p = dlsym(RTLD_DEFAULT, kGetStream);
    if (p == nullptr) {
      void* lib = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
      if (lib != nullptr) p = dlsym(lib, kGetStream);  // the handle is kept: torch stays loaded
    }
    return reinterpret_cast<GetStreamFn>(p);
  }();
  return fn;
}

// torch's current stream on cuda:<device> (a cudaStream_t).
void* current_stream(const tk_call& call) {
  GetStreamFn get = stream_getter();
  TORCH_CHECK(get != nullptr, "tk.", tk_op_name(call.op), ": cannot run on cuda:", call.device_index,
              ": ", kGetStream, " was not found in the loaded torch (a CUDA build of torch 2.6 or "
              "newer provides it)");
  void* stream = nullptr;
  TORCH_CHECK(get(call.device_index, &stream) == 0, "tk.", tk_op_name(call.op), ": cannot run on cuda:",
              call.device_index, ": torch could not give its current stream");
  return stream;
}

}  // namespace

void run_cuda(const tk_call& call) {
  if (call.kargs.numel <= 0) return;
  void* stream = current_stream(call);
  char msg[16384];
  TORCH_CHECK(tk_cuda_launch(state(), mutable_context(), &call, stream, msg, sizeof msg) == TK_OK, msg);
}

int cuda_parts(const tk_call& call, unsigned* copied, bool* parted) {
  int parts = 0, shared = 0;
  char msg[16384];
  TORCH_CHECK(tk_cuda_parts(state(), mutable_context(), &call, &parts, copied, &shared, msg, sizeof msg) == TK_OK, msg);
  *parted = shared != 0;
  return parts;
}

}  // namespace tk_shim

// ---- for the Python side (ctypes): python -m torch_tk info / precompile ------

#define TK_SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The i-th (op, variant) of the built-in ops, in spec order.
bool kernel_at(int i, const tk_op** op, int* variant) {
  const tk_ctx* ctx = tk_shim::context();
  for (int k = 0; k < tk_op_count(ctx); ++k) {
    const tk_op* o = tk_op_at(ctx, k);
    if (i < tk_op_nvariants(o)) {
      *op = o;
      *variant = i;
      return i >= 0;
    }
    i -= tk_op_nvariants(o);
  }
  return false;
}

}  // namespace

// What `python -m torch_tk info` prints: NVRTC, driver and devices, cache.
TK_SHIM_EXPORT const char* tk_shim_cuda_info(void) {
  static thread_local std::string text;
  try {
    text.assign(64 * 1024, '\0');
    tk_cuda_describe(tk_shim::state(), &text[0], text.size());
    text.resize(std::char_traits<char>::length(text.c_str()));
  } catch (const std::exception& e) {
    text = std::string("error: ") + e.what() + "\n";
  }
  return text.c_str();
}

// Number of (op, variant) kernels of the built-in ops.
TK_SHIM_EXPORT int tk_shim_cuda_nkernels(void) {
  try {
    const tk_ctx* ctx = tk_shim::context();
    int n = 0;
    for (int k = 0; k < tk_op_count(ctx); ++k) n += tk_op_nvariants(tk_op_at(ctx, k));
    return n;
  } catch (const std::exception&) {
    return 0;
  }
}

// Kernel i's name ("tk_brick_pad__f32"), NULL if out of range.
TK_SHIM_EXPORT const char* tk_shim_cuda_kernel_name(int i) {
  const tk_op* op = nullptr;
  int v = 0;
  try {
    return kernel_at(i, &op, &v) ? tk_op_kernel_name(op, v) : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// Compiles kernel i for sm (90 = sm_90) into the disk cache; 0 on success,
// *cached = 1 when it was there already. msg gets the error otherwise.
TK_SHIM_EXPORT int tk_shim_cuda_precompile(int i, int sm, int* cached, char* msg, size_t msglen) {
  const tk_op* op = nullptr;
  int v = 0;
  try {
    if (!kernel_at(i, &op, &v)) {
      snprintf(msg, msglen, "no kernel %d", i);
      return TK_ERR_INVALID;
    }
    return tk_cuda_precompile(tk_shim::state(), tk_shim::mutable_context(), op, v, sm, cached, msg, msglen);
  } catch (const std::exception& e) {
    snprintf(msg, msglen, "%s", e.what());
    return TK_ERR_INVALID;
  }
}

// The cache folder in use ("" when off).
TK_SHIM_EXPORT const char* tk_shim_cuda_cache_dir(void) {
  try {
    return tk_cuda_cache_dir(tk_shim::state());
  } catch (const std::exception&) {
    return "";
  }
}
