// shim.h - the libtorch side of tk: one process-wide context holding the
// built-in specs (registry.cpp) and one generic boxed kernel per dispatch key
// (kernels.cpp). Nothing here is per-op: schemas and kernels come from the
// spec table compiled into libtk.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>

#include "tk.h"

namespace torch {
class Library;
}

namespace tk_shim {

// The process-wide context with every built-in op (and every spec registered
// at run time: runtime.cpp adds them while kernels may run, which the core's
// append-only op table allows); created on first use and never freed.
// Throws c10::Error with the core's message if loading failed.
const tk_ctx* context();

// The error of loading or registering the built-in ops, "" if none.
const char* load_error();

// Defines op's schema in lib and registers the generic kernels below at
// every dispatch key (CPU, Meta, CUDA, Autograd, AutocastCPU/CUDA): the one
// place an op becomes a torch operator, for built-in and run-time specs
// alike (registry.cpp; run-time specs: runtime.cpp, docs/runtime.md).
void register_op(torch::Library& lib, const tk_op* op);

// A CPU output: torch's CPU allocator through tk's cache of freed large
// outputs (output_cache.cpp), which spares a new output the page faults of
// fresh memory; at::empty when the op may leave elements unwritten
// (written: tk_op_output_written).
at::Tensor empty_cpu_output(at::IntArrayRef sizes, at::ScalarType dtype, bool written);

// Whether t's memory is a cached block that held a whole output before (a
// cache hit): its pages are mapped, and streaming stores into it pay off.
bool in_mapped_block(const at::Tensor& t);
// Counts a call whose outputs were streamed (kernels.cpp), for
// torch_tk.cpu_cache_info()["streamed"].
void count_streamed_call();

// MADV_HUGEPAGE on a large block's 2 MiB-aligned interior when TK_HUGEPAGES=1
// (kernels.cpp); nothing otherwise.
void advise_huge_pages(void* data, size_t bytes);

// Boxed kernels for every tk op: arguments are converted to tk_arg[], bound
// by tk_bind, outputs are allocated with torch's allocator and pushed on
// the stack in schema order. CPU runs the index space with at::parallel_for;
// Meta only computes the output shapes.
void boxed_cpu(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
               torch::jit::Stack* stack);
void boxed_meta(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                torch::jit::Stack* stack);
// CUDA: the same path; the index space runs as one kernel launch on torch's
// current stream of the tensors' device (run_cuda).
void boxed_cuda(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                torch::jit::Stack* stack);

// Meta with symbolic sizes (torch.compile(dynamic=True), torch.export,
// opcheck's test_aot_dispatch_dynamic): the spec's shape programs
// (tk_op_shape_code) evaluated over c10::SymInt (meta.cpp). boxed_meta
// takes this path when some tensor argument has symbolic sizes or some int
// argument is symbolic (a SymInt: torch.compile(dynamic=True), t.item()).
bool has_symbolic_args(const c10::OperatorHandle& op, const torch::jit::Stack& stack);
void boxed_meta_symbolic(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Autograd for every op (autograd.cpp): an op with backward ops records a
// node whose apply() calls them through the dispatcher; an op without one
// refuses inputs that require grad. Registered at the Autograd key, so
// gradients work from Python, TorchScript and C++ alike.
void boxed_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack);
// ADInplaceOrView of an op that updates 'mut' parameters (autograd.cpp): runs
// it, then bumps each updated tensor's version counter, as torch's in-place
// ops do (also under inference_mode, which skips the Autograd key but not
// this one for a normal tensor), so a backward that saved one raises.
void boxed_in_place_view(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack);
// Autocast (AutocastCPU, AutocastCUDA; autocast.cpp): float tensor arguments
// tied by 'x.dtype' whose dtypes differ are promoted to the widest of them;
// nothing is cast down (docs/autograd.md).
void boxed_autocast(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack);

// The tk op behind a dispatcher operator "tk::<name>"; dtype conversions
// (kernels.cpp).
const tk_op* op_of(const c10::OperatorHandle& op);
std::optional<tk_dtype> tk_dtype_of(at::ScalarType s);
at::ScalarType scalar_type_of(tk_dtype d);

// Makes sure a run-time op (runtime.cpp) has the CPU kernel of `variant`:
// on its first CPU call per variant, that variant's C is emitted and compiled
// by the system C compiler (or found in the disk cache) and attached. Called
// by the CPU kernel when tk_op_cpu_kernel(op, variant) is NULL; thread-safe
// (concurrent first calls compile once, under a lock of that variant only).
// Throws c10::Error naming the op when the compile fails; does nothing for
// an op that is not a run-time one.
void ensure_cpu_kernel(const tk_op* op, int variant);
// The lock of the Autograd kernel's plan table (autograd.cpp), which the
// run-time specs' fork guard also takes (runtime.cpp).
std::mutex& plan_mutex();

// Launches a bound call whose tensors are on cuda:<call.device_index>
// (cuda.cpp): compiled with NVRTC on first use, cached on disk.
void run_cuda(const tk_call& call);
// Whether the call's CUDA kernel runs in parts (runtime/tk_cuda.h,
// tk_cuda_parts): the most threads it may run as (0: not in parts), with
// the outputs it copies (bit i: output i) and whether the threads share
// one iteration's parted loop.
int cuda_parts(const tk_call& call, unsigned* copied, bool* parted);

}  // namespace tk_shim
