// kernels.cpp - the generic boxed kernels: torch stack <-> tk_arg[], tk_bind,
// output allocation, CPU execution through at::parallel_for. The core does
// the op-specific validation (dtypes, ranks, dims, devices); this file only
// adds what is torch's: scalar types, rank limit, one device per call.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "shim.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tk_shim {
namespace {

// Elements of the index space per parallel_for chunk: below this, a call
// runs on the calling thread.
constexpr int64_t kGrain = 2048;

// Most arguments an op can take: tensors plus int and float scalars.
constexpr size_t kMaxArgs = TK_MAX_TENSORS + TK_MAX_INTS + TK_MAX_FLOATS;

std::optional<tk_dtype> to_tk_dtype(at::ScalarType s) {
  switch (s) {
    case at::kBool: return TK_BOOL;
    case at::kByte: return TK_U8;
    case at::kChar: return TK_I8;
    case at::kShort: return TK_I16;
    case at::kInt: return TK_I32;
    case at::kLong: return TK_I64;
    case at::kHalf: return TK_F16;
    case at::kBFloat16: return TK_BF16;
    case at::kFloat: return TK_F32;
    case at::kDouble: return TK_F64;
    default: return std::nullopt;
  }
}

at::ScalarType to_scalar_type(tk_dtype d) {
  switch (d) {
    case TK_BOOL: return at::kBool;
    case TK_U8: return at::kByte;
    case TK_I8: return at::kChar;
    case TK_I16: return at::kShort;
    case TK_I32: return at::kInt;
    case TK_I64: return at::kLong;
    case TK_F16: return at::kHalf;
    case TK_BF16: return at::kBFloat16;
    case TK_F32: return at::kFloat;
    case TK_F64: return at::kDouble;
    default: break;
  }
  TORCH_INTERNAL_ASSERT(false, "tk: unknown tk_dtype ", static_cast<int>(d));
}

// The op and argument a message is about: "tk.<op>: argument '<name>': ".
struct Where {
  const char* op;
  const char* arg;
};
std::string prefix(const Where& w) {
  return std::string("tk.") + w.op + ": argument '" + w.arg + "': ";
}

tk_device to_tk_device(const c10::Device& d, const Where& w) {
  switch (d.type()) {
    case c10::DeviceType::CPU: return TK_CPU;
    case c10::DeviceType::CUDA: return TK_CUDA;
    case c10::DeviceType::Meta: return TK_META;
    default: break;
  }
  TORCH_CHECK(false, prefix(w), "device ", d, " is not supported (cpu, cuda, meta)");
}

// A view of t for the core. Inputs are read through const_data_ptr, so a
// copy-on-write tensor is not materialised; outputs are written.
tk_tensor_view to_view(const at::Tensor& t, bool writable, const Where& w) {
  TORCH_CHECK(t.defined(), prefix(w), "expected a tensor, got None");
  TORCH_CHECK(t.dim() <= TK_MAX_DIMS, prefix(w), "has ", t.dim(), " dims; at most ",
              TK_MAX_DIMS, " are supported");
  std::optional<tk_dtype> dtype = to_tk_dtype(t.scalar_type());
  TORCH_CHECK(dtype.has_value(), prefix(w), "dtype ", t.scalar_type(), " is not supported");
  tk_tensor_view v{};
  v.dtype = *dtype;
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  v.device = to_tk_device(t.device(), w);
  v.device_index = t.device().has_index() ? t.device().index() : 0;
  if (!t.is_meta())
    v.data = writable ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
  return v;
}

// The tk op behind a dispatcher operator "tk::<name>".
const tk_op* find_op(const c10::OperatorHandle& handle) {
  const c10::FunctionSchema& schema = handle.schema();
  const std::string& full = schema.name();
  const char* name = full.c_str();
  if (full.rfind("tk::", 0) == 0) name += 4;
  // Per thread, the last few ops found (a call looks its op up at each
  // dispatch key): keyed by the schema's address, confirmed by name. Ops
  // are never removed from the context, so a cached op stays valid.
  struct Entry {
    const c10::FunctionSchema* schema;
    const tk_op* op;
  };
  thread_local std::array<Entry, 8> cache{};
  thread_local size_t next = 0;
  for (const Entry& e : cache)
    if (e.schema == &schema && std::strcmp(tk_op_name(e.op), name) == 0) return e.op;
  const tk_op* op = tk_op_find(context(), name);
  TORCH_INTERNAL_ASSERT(op != nullptr, "tk: no spec for operator ", full);
  cache[next++ % cache.size()] = Entry{&schema, op};
  return op;
}

// One call in flight: the op, its bound arguments, its outputs.
struct Call {
  const tk_op* op = nullptr;
  tk_call call;  // tk_bind and tk_bind_types fill it in whole (4.8 KB: not zeroed twice)
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> staged;  // contiguous copies of small strided inputs
  std::array<tk_arg, kMaxArgs> args;  // the first nargs are bound (8 KB: not zeroed per call)
  size_t nargs = 0;
  bool stage = false;  // some input is worth staging (stage_inputs)
};

// A CPU kernel has two bodies: one for unit innermost strides, where the
// reads along a row vectorise, and a strided one (emit.c, stride_dispatch).
// An input read many times over, much smaller than the index space (a
// brick_pad tile, a transposed weight), is worth a contiguous copy first:
// the copy costs at most 1/kStageRatio of the kernel's element count and
// the whole call then takes the unit-stride body. The seed's tile is a
// transposed view: brick_pad at the seed configuration takes 18.4 ms on the
// strided body and 12.9 ms on the unit one (bench/README.md).
constexpr int64_t kStageRatio = 8;

bool worth_staging(const at::Tensor& t, int64_t numel) {
  return t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1 && t.numel() * kStageRatio <= numel;
}

// Whether argument i, tensor t, is an input worth staging: not a 'mut' one,
// which the kernel reads where it writes it (through its output's slot).
bool stageable(const tk_op* op, size_t i, const at::Tensor& t, int64_t numel) {
  return !tk_op_param_mut(op, static_cast<int>(i)) && worth_staging(t, numel);
}

// The elements a bound call computes, to weigh a copy against: its index
// space, or for a row loop (whose iterations each walk rows) its largest
// output, scratch tensors included (a count past int64 saturates). The
// selective scan's B and C, [N, L] a batch row against u's [E, L], passed as
// transposed views: 74 ms strided, 17 ms staged (B 1, E 1536, L 512, N 16;
// bench/LOG.md, 2026-12-07).
int64_t staging_work(const tk_call& call) {
  int64_t work = call.kargs.numel;
  for (int o = 0; o < call.noutputs; ++o) {
    int64_t n = 1;
    for (int d = 0; d < call.out_ndim[o]; ++d)
      if (__builtin_mul_overflow(n, call.out_sizes[o][d], &n)) n = INT64_MAX;
    work = std::max(work, n);
  }
  return work;
}

// The last few successful binds of this thread, with their arguments: a
// training loop calls an op with the same shapes again and again, and a
// bind depends only on the arguments' kinds, values, dtypes, sizes, strides
// and devices (tk_arg_same_binding). A call whose arguments bind alike with
// a remembered one copies its tk_call and points it at the new data
// (tk_rebind_data) instead of validating everything again in tk_bind.
// Calls that staged an input are not remembered (they are large anyway).
struct BindMemo {
  const tk_op* op = nullptr;
  std::vector<tk_arg> args;
  tk_call call;
};
constexpr size_t kBindMemos = 4;
thread_local std::array<BindMemo, kBindMemos> bind_memos;
thread_local size_t bind_memo_next = 0;

bool rebind(Call& c, const tk_arg* args, size_t n) {
  for (BindMemo& m : bind_memos) {
    if (m.op != c.op || m.args.size() != n) continue;
    size_t i = 0;
    while (i < n && tk_arg_same_binding(&m.args[i], &args[i])) ++i;
    if (i < n) continue;
    c.call = m.call;
    TORCH_CHECK(tk_rebind_data(&c.call, args, static_cast<int>(n)) == TK_OK, c.call.msg);
    return true;
  }
  return false;
}

void remember(const Call& c, const tk_arg* args, size_t n) {
  BindMemo& m = bind_memos[bind_memo_next++ % kBindMemos];
  m.op = c.op;
  m.args.assign(args, args + n);
  m.call = c.call;
}

// Converts the stack's arguments (the last ones) and binds them; fills in
// `device` with the device of the tensor arguments (unchanged if none).
void bind_args(const c10::OperatorHandle& handle, const torch::jit::Stack& stack, Call& c,
          c10::Device& device) {
  const auto& params = handle.schema().arguments();
  const size_t n = params.size();
  TORCH_INTERNAL_ASSERT(n <= kMaxArgs, "tk.", tk_op_name(c.op), ": too many arguments");
  std::array<tk_arg, kMaxArgs>& args = c.args;
  c.nargs = n;
  const char* device_arg = nullptr;
  auto values = torch::jit::last(stack, n);
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = values[i];
    const Where w{tk_op_name(c.op), params[i].name().c_str()};
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      TORCH_CHECK(t.defined(), prefix(w), "expected a tensor, got None");
      if (device_arg == nullptr) {
        device = t.device();
        device_arg = w.arg;
      }
      TORCH_CHECK(t.device() == device, prefix(w), "expected a tensor on ", device, " like '",
                  device_arg, "', got one on ", t.device());
      args[i] = tk_arg_tensor(to_view(t, tk_op_param_mut(c.op, static_cast<int>(i)) != 0, w));  // ('mut': written)
    } else if (v.isNone()) {
      args[i] = tk_arg_none();
    } else if (v.isBool()) {
      args[i] = tk_arg_bool(v.toBool() ? 1 : 0);
    } else if (v.isInt()) {
      args[i] = tk_arg_int(v.toInt());
    } else if (v.isDouble()) {
      args[i] = tk_arg_float(v.toDouble());
    } else {
      TORCH_CHECK(false, prefix(w), "unsupported value of type ", v.tagKind());
    }
  }
  if (rebind(c, args.data(), n)) return;
  TORCH_CHECK(tk_bind(c.op, args.data(), static_cast<int>(n), &c.call) == TK_OK, c.call.msg);
  const int64_t work = device.is_cpu() ? staging_work(c.call) : 0;
  for (size_t i = 0; device.is_cpu() && i < n; ++i)
    c.stage = c.stage || (values[i].isTensor() && stageable(c.op, i, values[i].toTensor(), work));
  if (!c.stage) remember(c, args.data(), n);
}

// Copies the inputs worth staging and binds again with the copies' strides
// (the same sizes and dtypes: the same outputs). Runs after
// allocate_outputs: an output too large to allocate fails before any copy
// (an expanded input of a few bytes of storage can span gigabytes).
void stage_inputs(const c10::OperatorHandle& handle, const torch::jit::Stack& stack, Call& c) {
  if (!c.stage) return;
  const auto& params = handle.schema().arguments();
  auto values = torch::jit::last(stack, c.nargs);
  const int64_t work = staging_work(c.call);
  for (size_t i = 0; i < c.nargs; ++i) {
    if (!values[i].isTensor() || !stageable(c.op, i, values[i].toTensor(), work)) continue;
    c.staged.push_back(values[i].toTensor().contiguous());
    c.args[i] = tk_arg_tensor(to_view(c.staged.back(), false, Where{tk_op_name(c.op), params[i].name().c_str()}));
  }
  TORCH_CHECK(tk_bind(c.op, c.args.data(), static_cast<int>(c.nargs), &c.call) == TK_OK, c.call.msg);
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const Where w{tk_op_name(c.op), tk_op_output_name(c.op, static_cast<int>(i))};
    TORCH_CHECK(tk_set_output(&c.call, static_cast<int>(i), to_view(c.outputs[i], true, w)) == TK_OK,
                c.call.msg);
  }
}

// A row of n elements of dtype, each value, on device. On the CPU the last
// few rows of at most kFillCacheBytes this thread made are reused (nothing
// writes them; a longer row is made for its call alone): a fresh row
// a call made layernorm(x) at (64, 128) about 6 us against 5 with tensors
// of ones and zeros; reused, 5.1 against 5.1 (bench/optional_tensors.py,
// bench/LOG.md). On CUDA a fresh one, filled on the current stream before
// the kernel reads it.
constexpr int64_t kFillCacheBytes = 65536;

at::Tensor fill_row(tk_dtype dtype, int64_t n, double value, const c10::Device& device) {
  const auto options = at::TensorOptions().dtype(to_scalar_type(dtype)).device(device);
  if (!device.is_cpu() || n > kFillCacheBytes / static_cast<int64_t>(tk_dtype_size(dtype)))
    return at::full({n}, value, options);
  struct Row {
    tk_dtype dtype;
    int64_t n;
    double value;
    at::Tensor t;
  };
  thread_local std::array<Row, 4> rows{};
  thread_local size_t next = 0;
  for (const Row& r : rows)
    if (r.t.defined() && r.dtype == dtype && r.n == n && std::memcmp(&r.value, &value, sizeof value) == 0) return r.t;
  Row& r = rows[next++ % rows.size()];
  r = Row{dtype, n, value, at::full({n}, value, options)};
  return r.t;
}

// Attaches the memory of each optional tensor passed as None (docs/spec.md,
// Optional tensors): one row of its default on the call's device, which the
// kernel reads with stride 0 along every other dim; kept until the call ends.
void attach_fills(Call& c, const c10::Device& device) {
  if (c.call.none == 0) return;
  for (size_t i = 0; i < c.nargs; ++i) {
    tk_dtype dtype = TK_F32;
    int64_t numel = 0;
    double value = 0.0;
    if (!tk_call_fill(&c.call, static_cast<int>(i), &dtype, &numel, &value)) continue;
    c.staged.push_back(fill_row(dtype, std::max<int64_t>(numel, 1), value, device));
    TORCH_CHECK(tk_set_fill(&c.call, static_cast<int>(i), c.staged.back().mutable_data_ptr()) == TK_OK, c.call.msg);
  }
}

// Transparent huge pages for a large CPU output (Linux), opt-in with
// TK_HUGEPAGES=1. A fresh output is memory the process has never touched:
// the kernel's first write to each 4 KiB page takes a page fault, and for a
// memory-bound op such as brick_pad those faults are half of the call.
// Where the system's THP mode is `madvise` (the common default),
// MADV_HUGEPAGE on the output's 2 MiB-aligned interior makes that one fault
// per 2 MiB: brick_pad at the seed configuration 25 -> 12 ms when called
// back to back. It is not the default because of where huge pages come
// from: on a VM whose host takes back free memory (free page reporting, as
// on the machine tk is developed on), a huge page freed for a few seconds
// is returned to the host, and faulting it in again took 170 ms for
// brick_pad's output against 25 ms with small pages (bench/README.md,
// "Huge pages", page_faults.py). torch's THP_MEM_ALLOC_ENABLE is opt-in too.
// The kernel writes every element of the output, so no memory is wasted.
// Advice only: when it fails (THP `never`, a custom allocator's memory)
// nothing changes.
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugeOutputMin = size_t{8} << 20;  // 4+ huge pages, 3+ always inside

bool huge_pages_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TK_HUGEPAGES");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace

void advise_huge_pages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugeOutputMin || !huge_pages_enabled()) return;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = (begin + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  const uintptr_t hi = (begin + bytes) & ~uintptr_t{kHugePageBytes - 1};
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

namespace {

// The output that is 'mut' parameter p (docs/spec.md, In-place parameters):
// the argument itself, which the kernel updates in place. Its elements must
// be distinct (no expanded dims) and shared with no other argument, or
// iterations would race or read what others wrote.
at::Tensor mut_output(const Call& c, c10::ArrayRef<c10::IValue> args, int p) {
  const std::string name = tk_op_param_name(c.op, p);
  const at::Tensor& t = args[static_cast<size_t>(p)].toTensor();
  if (t.is_meta()) return t;
  TORCH_CHECK(!t.is_inference() || c10::InferenceMode::is_enabled(), "tk.", tk_op_name(c.op), ": argument '", name,
              "' is an inference tensor, which cannot be updated in place outside torch.inference_mode()");
  if (t.numel() == 0) return t;
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "tk.", tk_op_name(c.op), ": argument '", name,
              "' is updated in place but some of its elements share memory (an expanded or stride-0 view): "
              "pass a tensor with distinct elements (.clone())");
  for (size_t j = 0; j < args.size(); ++j) {
    if (j == static_cast<size_t>(p) || !args[j].isTensor() || args[j].toTensor().numel() == 0) continue;
    if (!t.storage().is_alias_of(args[j].toTensor().storage())) continue;
    const auto st = at::get_overlap_status(t, args[j].toTensor());   // (TooHard for views that are not dense)
    TORCH_CHECK(st == at::MemOverlapStatus::No, "tk.", tk_op_name(c.op), ": argument '", name,
                "' is updated in place and shares memory with argument '", tk_op_param_name(c.op, static_cast<int>(j)),
                st == at::MemOverlapStatus::TooHard ? "' (or may: views of one storage that tk cannot tell apart)"
                                                    : "'",
                ": pass a copy of one of them");
  }
  return t;
}

// Allocates every output on `device` with the shape and dtype tk_bind chose
// (a 'mut' parameter's output: the argument itself).
void allocate_outputs(Call& c, const c10::Device& device, c10::ArrayRef<c10::IValue> args) {
  for (int i = 0; i < c.call.noutputs; ++i) {
    if (tk_op_output_alias(c.op, i) >= 0) {
      at::Tensor t = mut_output(c, args, tk_op_output_alias(c.op, i));
      const Where w{tk_op_name(c.op), tk_op_output_name(c.op, i)};
      TORCH_CHECK(tk_set_output(&c.call, i, to_view(t, true, w)) == TK_OK, c.call.msg);
      c.outputs.push_back(std::move(t));
      continue;
    }
    const auto options =
        at::TensorOptions().dtype(to_scalar_type(c.call.out_dtype[i])).device(device);
    const at::IntArrayRef sizes(c.call.out_sizes[i], c.call.out_ndim[i]);
    at::Tensor out;
    try {
      out = device.is_cpu() ? empty_cpu_output(sizes, to_scalar_type(c.call.out_dtype[i]),
                                               tk_op_output_written(c.op, i) != 0)
                            : at::empty(sizes, options);
    } catch (const c10::Error& e) {  // the allocator's message names neither op nor output
      const std::string msg = std::string("tk.") + tk_op_name(c.op) + ": output '" +
                              tk_op_output_name(c.op, i) + "' of shape " + c10::str(sizes) + " (" +
                              c10::str(options.dtype()) + ") cannot be allocated: " +
                              e.what_without_backtrace();
      if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr)
        TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
      TORCH_CHECK(false, msg);
    }
    const Where w{tk_op_name(c.op), tk_op_output_name(c.op, i)};
    TORCH_CHECK(tk_set_output(&c.call, i, to_view(out, true, w)) == TK_OK, c.call.msg);
    c.outputs.push_back(std::move(out));
  }
}

// Streaming stores (x86). A kernel's plain stores read each cache line of
// the output before writing it (read for ownership); a streaming store
// writes whole lines without reading them, the way memset does for large
// blocks. Into memory that is already mapped, 136 MB took 6.1 ms with
// streaming stores against 15.1 with plain ones on one thread; into fresh
// pages 85 against 51 (bench/results/2026-12-03-cpu-store-kinds.txt). So a
// memory-bound op (tk_op_memory_bound: no `for` in its body, no function
// but min, max, abs and the like) whose outputs are all contiguous and in
// mapped blocks of the output cache (a cache hit) runs its chunks in pieces
// whose outputs go to a small buffer that stays in L1, each piece then
// streamed to the output; the pieces start at 64-byte boundaries of every
// output, and a chunk's unaligned ends run as before. Only where the
// outputs are too large to stay in the last-level cache anyway
// (stream_min_bytes): smaller ones written with plain stores stay there for
// the op that reads them next, and an op that computes (an erf, a random
// draw per element) overlaps plain stores with its arithmetic, where a
// piece's copy waits for it (bench/results/2026-12-07-cpu-stream-stores.txt:
// brick_pad into 65 MiB 1.83 ms plain against 2.16 streamed, into 130 MiB
// 8.01 against 4.30; bench/LOG.md: gelu at 64 MiB 8.0-8.9 against
// 10.2-11.8). TK_CPU_STREAM=0 turns streaming off (read once per process).
#if defined(__x86_64__)
constexpr bool kCanStream = true;
#else
constexpr bool kCanStream = false;
#endif
constexpr int64_t kStreamPieceBytes = 8192;  // per output, per piece

bool stream_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TK_CPU_STREAM");
    return kCanStream && !(v != nullptr && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// The least bytes a call's outputs take for streaming: TK_CPU_STREAM_MB
// (MiB; read once per process, at the first call that could stream), else
// a sixth of the last-level cache as sysconf reports it (L3, else L2), at
// least 16 MiB (what the output cache keeps), 64 MiB when unknown. On the
// development VM (480 MiB of L3 reported, shared: plain stores lost from
// between 65 and 98 MiB on) that is 80 MiB.
int64_t stream_min_bytes() {
  static const int64_t bytes = [] {
    if (const char* v = std::getenv("TK_CPU_STREAM_MB")) {
      char* end = nullptr;
      const long long mb = std::strtoll(v, &end, 10);
      if (end != v && *end == 0 && mb >= 0) return static_cast<int64_t>(std::min<long long>(mb, 1LL << 30)) << 20;
    }
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (llc <= 0) return int64_t{64} << 20;
    return std::max<int64_t>(int64_t{16} << 20, static_cast<int64_t>(llc) / 6);
  }();
  return bytes;
}

// The outputs' views and element sizes, for run_streamed.
struct StreamPlan {
  int n = 0;
  tk_tensor_view view[TK_MAX_TENSORS];
  int64_t es[TK_MAX_TENSORS];
  int64_t align = 1, piece = 0;  // elements: pieces start at multiples of align
};

// Whether c's outputs can be streamed (see above); fills plan.
bool plan_stream(const Call& c, StreamPlan& plan) {
  const int64_t numel = c.call.kargs.numel;
  if (!stream_enabled() || numel <= kGrain || !tk_op_memory_bound(c.op)) return false;
  if (tk_op_in_place(c.op)) return false;   // 'mut': read where it is stored
  int64_t max_es = 1, min_es = 64, bytes = 0;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const at::Tensor& o = c.outputs[i];
    // a piece's buffer holds whatever the last piece left where the kernel
    // stores nothing: only outputs written in full (as the cache's are)
    if (!o.is_contiguous() || o.numel() != numel || !tk_op_output_written(c.op, static_cast<int>(i)) ||
        !in_mapped_block(o) ||
        reinterpret_cast<uintptr_t>(o.data_ptr()) % 64 != 0)
      return false;
    plan.es[i] = static_cast<int64_t>(o.element_size());
    bytes += numel * plan.es[i];
    max_es = std::max(max_es, plan.es[i]);
    min_es = std::min(min_es, plan.es[i]);
    plan.view[i] = to_view(o, true, Where{tk_op_name(c.op), tk_op_output_name(c.op, static_cast<int>(i))});
  }
  if (c.outputs.empty() || bytes < stream_min_bytes()) return false;
  plan.n = static_cast<int>(c.outputs.size());
  plan.align = 64 / min_es;  // element sizes are powers of two up to 8
  plan.piece = std::max(plan.align, kStreamPieceBytes / max_es / plan.align * plan.align);
  return plan.n > 0;
}

#if defined(__x86_64__)
// Copies bytes (a multiple of 64) from src to dst (64-byte aligned) with
// streaming stores.
void stream_copy(void* dst, const void* src, int64_t bytes) {
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (int64_t i = 0; i < bytes / 16; i += 4) {
    _mm_stream_si128(d + i, _mm_load_si128(s + i));
    _mm_stream_si128(d + i + 1, _mm_load_si128(s + i + 1));
    _mm_stream_si128(d + i + 2, _mm_load_si128(s + i + 2));
    _mm_stream_si128(d + i + 3, _mm_load_si128(s + i + 3));
  }
}
#endif

// Runs [begin, end) of chunk's index space with the outputs streamed.
void run_streamed(tk_call& chunk, const StreamPlan& plan, int64_t begin, int64_t end) {
#if defined(__x86_64__)
  const int64_t a0 = std::min(end, (begin + plan.align - 1) / plan.align * plan.align);
  const int64_t a1 = std::max(a0, end / plan.align * plan.align);
  if (begin < a0) TORCH_CHECK(tk_run_cpu(&chunk, begin, a0) == TK_OK, chunk.msg);
  if (a0 < a1) {
    int64_t stride = 0;  // bytes of one output's buffer
    for (int i = 0; i < plan.n; ++i) stride = std::max(stride, plan.piece * plan.es[i]);
    std::unique_ptr<void, void (*)(void*)> buf(std::aligned_alloc(64, static_cast<size_t>(stride * plan.n)),
                                               &std::free);
    TORCH_CHECK(buf != nullptr, "tk.", tk_op_name(chunk.op), ": out of memory for a 64 KiB buffer");
    auto* base = static_cast<unsigned char*>(buf.get());
    for (int64_t s = a0; s < a1; s += plan.piece) {
      const int64_t e = std::min(a1, s + plan.piece);
      for (int i = 0; i < plan.n; ++i) {  // output i's elements [s, e) land in its buffer
        tk_tensor_view v = plan.view[i];
        // lin = s lands on the buffer's first byte (the address in integer
        // arithmetic: the kernel only forms addresses of elements [s, e))
        v.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(base + i * stride) -
                                         static_cast<uintptr_t>(s * plan.es[i]));
        TORCH_CHECK(tk_set_output(&chunk, i, v) == TK_OK, chunk.msg);
      }
      TORCH_CHECK(tk_run_cpu(&chunk, s, e) == TK_OK, chunk.msg);
      for (int i = 0; i < plan.n; ++i)
        stream_copy(static_cast<unsigned char*>(plan.view[i].data) + s * plan.es[i], base + i * stride,
                    (e - s) * plan.es[i]);
    }
    for (int i = 0; i < plan.n; ++i) TORCH_CHECK(tk_set_output(&chunk, i, plan.view[i]) == TK_OK, chunk.msg);
    _mm_sfence();  // the streaming stores are visible before the chunk ends
  }
  if (a1 < end) TORCH_CHECK(tk_run_cpu(&chunk, a1, end) == TK_OK, chunk.msg);
#else
  (void)plan;
  TORCH_CHECK(tk_run_cpu(&chunk, begin, end) == TK_OK, chunk.msg);
#endif
}

// Runs the whole index space on the CPU, in chunks of at least kGrain
// elements (a row loop's index is a row of index_work elements: chunks of
// kGrain / index_work indices, at least one).
// Each chunk gets its own tk_call: tk_run_cpu may write its message.
void run_cpu(tk_call& call, const StreamPlan* plan) {
  const int64_t numel = call.kargs.numel;
  if (numel <= 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, call.index_work));
  if (numel <= grain) {  // one chunk, on this thread (what parallel_for would do), without a copy
    TORCH_CHECK(tk_run_cpu(&call, 0, numel) == TK_OK, call.msg);
    return;
  }
  at::parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
    tk_call chunk = call;
    if (plan != nullptr) run_streamed(chunk, *plan, begin, end);
    else TORCH_CHECK(tk_run_cpu(&chunk, begin, end) == TK_OK, chunk.msg);
  });
}

// Parts of a call, each adding into its own copy of some outputs: a row
// loop that runs in parts (plan_rows.c, plan_parts: one iteration, a
// weight's gradient summed over rows) cuts its last loop, an op with sum
// outputs (docs/spec.md, Sums) its index space. How many: one a kPartElems
// elements of the inputs, at most max_parts(), and no more than keep the
// copies under half the inputs' bytes. The shapes decide, never the thread
// count, so a call's sums are the same whatever threads it gets. 1: the
// whole call at once.
constexpr int64_t kPartElems = 65536;

// TK_CPU_PARTS=n (1 to 64; default 16), read once: 1 runs such calls whole.
int64_t max_parts() {
  static const int64_t n = [] {
    const char* v = std::getenv("TK_CPU_PARTS");
    const long k = v != nullptr ? std::strtol(v, nullptr, 10) : 16;
    return static_cast<int64_t>(k < 1 ? 1 : k > 64 ? 64 : k);
  }();
  return n;
}

// Whether the parts of c copy output i: every output for a parted row
// loop, the sums otherwise.
bool copied(const Call& c, size_t i) {
  return c.call.kargs.numel == 1 || tk_op_output_sum(c.op, static_cast<int>(i));
}

// The elements and bytes of a call's tensor arguments.
void input_size(c10::ArrayRef<c10::IValue> args, int64_t* elems, int64_t* bytes) {
  *elems = *bytes = 0;
  for (const c10::IValue& v : args)
    if (v.isTensor()) {
      *elems += v.toTensor().numel();
      *bytes += v.toTensor().numel() * static_cast<int64_t>(v.toTensor().element_size());
    }
}

// n copies of output o, [n, *o's shape], each holding the additive
// identity: -0.0 for floats (adding it keeps a -0.0), 0 for ints, false.
at::Tensor identity_copies(const at::Tensor& o, int64_t n) {
  std::vector<int64_t> shape{n};
  shape.insert(shape.end(), o.sizes().begin(), o.sizes().end());
  return at::isFloatingType(o.scalar_type()) ? at::full(shape, -0.0, o.options()) : at::zeros(shape, o.options());
}

int64_t parts_for(const Call& c, c10::ArrayRef<c10::IValue> args) {
  const int64_t numel = c.call.kargs.numel;
  const bool parted = numel == 1 && tk_op_cpu_parts(c.op, c.call.variant);
  if (max_parts() == 1 || (!parted && !(numel > 1 && tk_op_has_sum(c.op)))) return 1;
  int64_t elems = 0, bytes = 0, out_bytes = 0;
  input_size(args, &elems, &bytes);
  for (size_t i = 0; i < c.outputs.size(); ++i)
    if (copied(c, i)) out_bytes += c.outputs[i].numel() * static_cast<int64_t>(c.outputs[i].element_size());
  int64_t n = std::min({max_parts(), elems / kPartElems, parted ? max_parts() : numel});
  if (out_bytes > 0) n = std::min(n, 1 + bytes / 2 / out_bytes);
  return std::max<int64_t>(1, n);
}

// Runs c as n parts on at::parallel_for: a parted row loop's part p of n
// (kargs.part), or an op with sums its p-th share of the index space.
// Part 0 stores into the outputs, part p > 0 into copies of those it
// copies (copied()) holding the additive identity (-0.0 for floats: adding
// it keeps a -0.0 the outputs hold; 0 for ints); then the copies are added
// to the outputs in part order. A part its kernel refuses (another kernel
// attached since parts_for asked) makes a parted loop run whole instead:
// its statements before the loop store again what part 0 may have added
// to (elements they do not store hold no defined value).
// A 'mut' parameter's output has a copy for part 0 too, starting from its
// values, so that a refused part reruns the loop on the tensor as it was.
void run_parts(Call& c, int64_t n) {
  const int64_t numel = c.call.kargs.numel;
  const bool parted = numel == 1;
  std::vector<at::Tensor> rest(c.outputs.size());  // per copied output: [n - 1, *its shape] (n: 'mut')
  std::vector<int64_t> first(c.outputs.size(), 1);  // the first part that adds into rest[i][0]
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (!copied(c, i)) continue;
    if (tk_op_output_alias(c.op, static_cast<int>(i)) >= 0) first[i] = 0;
    rest[i] = identity_copies(c.outputs[i], n - first[i]);
    if (first[i] == 0) rest[i][0].copy_(c.outputs[i]);
  }
  std::atomic<bool> refused{false};
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      tk_call part = c.call;
      if (parted) {
        part.kargs.part = p;
        part.kargs.nparts = n;
      }
      for (size_t i = 0; i < rest.size(); ++i) {
        if (!rest[i].defined() || p < first[i]) continue;
        const Where w{tk_op_name(c.op), tk_op_output_name(c.op, static_cast<int>(i))};
        TORCH_CHECK(tk_set_output(&part, static_cast<int>(i), to_view(rest[i][p - first[i]], true, w)) == TK_OK,
                    part.msg);
      }
      const int64_t lo = parted ? 0 : numel * p / n, hi = parted ? 1 : numel * (p + 1) / n;
      if (refused) continue;
      if (tk_run_cpu(&part, lo, hi) == TK_OK) continue;
      TORCH_CHECK(parted && !tk_op_cpu_parts(c.op, c.call.variant), part.msg);
      refused = true;
    }
  });
  if (refused) {
    TORCH_CHECK(tk_run_cpu(&c.call, 0, 1) == TK_OK, c.call.msg);
    return;
  }
  for (size_t i = 0; i < rest.size(); ++i) {
    if (!rest[i].defined()) continue;
    if (first[i] == 0) c.outputs[i].copy_(rest[i][0]);
    for (int64_t p = 1 - first[i]; p < rest[i].size(0); ++p) c.outputs[i].add_(rest[i][p]);
  }
}

// CUDA in parts (docs/gpu.md, Parts): a kernel compiled with schedule
// parts=N runs as n <= N threads, each adding into its own copy of the
// outputs it copies (the additive identity in each: -0.0, 0, false);
// torch's sum over the copies, one deterministic reduction, gives the
// outputs. How many: one a kGpuPartElems elements of the inputs, no more
// than keep the copies under half the inputs' bytes, and no more than the
// iterations unless the threads share one iteration's parted loop. Other
// kernels launch as they are.
constexpr int64_t kGpuPartElems = 256;

void run_on_cuda(Call& c, c10::ArrayRef<c10::IValue> args) {
  unsigned copied = 0;
  bool parted = false;
  const int64_t numel = c.call.kargs.numel;   // (only ops with sums or one iteration can run in parts)
  const int cap = numel > 0 && (numel == 1 || tk_op_has_sum(c.op)) ? cuda_parts(c.call, &copied, &parted) : 0;
  if (cap <= 1) {   // not in parts: as planned
    run_cuda(c.call);
    return;
  }
  int64_t elems = 0, bytes = 0, out_bytes = 0;
  input_size(args, &elems, &bytes);
  for (size_t i = 0; i < c.outputs.size(); ++i)
    if (copied >> i & 1u) out_bytes += c.outputs[i].numel() * static_cast<int64_t>(c.outputs[i].element_size());
  int64_t n = std::min<int64_t>(cap, elems / kGpuPartElems);
  if (!parted) n = std::min(n, numel);
  if (out_bytes > 0) n = std::min(n, 1 + bytes / 2 / out_bytes);
  if (n <= 1) {   // one thread: straight into the outputs
    run_cuda(c.call);
    return;
  }
  tk_call call = c.call;
  call.kargs.nparts = n;
  std::vector<at::Tensor> copies(c.outputs.size());  // per copied output: [n, *its shape]
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (!(copied >> i & 1u)) continue;
    const at::Tensor& o = c.outputs[i];
    copies[i] = identity_copies(o, n);
    if (tk_op_output_alias(c.op, static_cast<int>(i)) >= 0) copies[i][0].copy_(o);  // in place: from its values
    const Where w{tk_op_name(c.op), tk_op_output_name(c.op, static_cast<int>(i))};
    TORCH_CHECK(tk_set_output(&call, static_cast<int>(i), to_view(copies[i][0], true, w)) == TK_OK, call.msg);
    call.kargs.pstride[i] = o.numel();
  }
  run_cuda(call);
  for (size_t i = 0; i < copies.size(); ++i)
    if (copies[i].defined())
      c.outputs[i].copy_(c.outputs[i].scalar_type() == at::kBool ? copies[i].any(0) : copies[i].sum(0));
}

// Replaces the arguments on the stack with the outputs, in schema order:
// a float16 or bfloat16 sum, which the kernel added into in float32 (or
// float64), rounded to its declared dtype once.
void push_outputs(const c10::OperatorHandle& handle, torch::jit::Stack* stack, Call& c) {
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const auto declared = static_cast<tk_dtype>(tk_op_output_dtype(c.op, c.call.variant, static_cast<int>(i)));
    if (declared != c.call.out_dtype[i]) c.outputs[i] = c.outputs[i].to(to_scalar_type(declared));
  }
  const size_t nreturns = static_cast<size_t>(tk_op_nreturns(c.op));   // (then the scratch tensors, the 'mut' parameters')
  TORCH_INTERNAL_ASSERT(handle.schema().returns().size() == nreturns,
                        "tk.", tk_op_name(c.op), ": schema and spec disagree on outputs");
  torch::jit::drop(*stack, handle.schema().arguments().size());
  for (size_t i = 0; i < nreturns; ++i) stack->emplace_back(std::move(c.outputs[i]));
}

// Zeroes c's sum outputs (docs/spec.md, Sums): every iteration adds into
// them. (On CUDA an op whose iterations add into one sum would race: the
// launcher refuses it unless its kernel runs in parts, run_on_cuda.)
void zero_sums(Call& c) {
  if (!tk_op_has_sum(c.op)) return;   // (no iteration: a sum over none, 0)
  for (size_t i = 0; i < c.outputs.size(); ++i)
    if (tk_op_output_sum(c.op, static_cast<int>(i))) c.outputs[i].zero_();
}

// The shared path of every key: bind, allocate, run when `execute`.
void boxed(const c10::OperatorHandle& handle, torch::jit::Stack* stack, c10::Device device,
           bool execute) {
  Call c;
  c.op = find_op(handle);
  bind_args(handle, *stack, c, device);
  if (execute && device.is_cpu() && c.call.kargs.numel > 0 && tk_op_cpu_kernel(c.op, c.call.variant) == nullptr)
    ensure_cpu_kernel(c.op, c.call.variant);  // a run-time op's first CPU call in this dtype: compile it
  allocate_outputs(c, device, torch::jit::last(*stack, handle.schema().arguments().size()));
  if (execute && device.is_cpu()) stage_inputs(handle, *stack, c);
  if (execute && c.call.kargs.numel > 0) attach_fills(c, device);   // (an empty call reads nothing)
  if (execute) zero_sums(c);
  if (execute && device.is_cuda()) {
    run_on_cuda(c, torch::jit::last(*stack, handle.schema().arguments().size()));
  } else if (execute) {
    StreamPlan plan;
    const int64_t parts = parts_for(c, torch::jit::last(*stack, handle.schema().arguments().size()));
    const bool stream = parts == 1 && plan_stream(c, plan);
    if (stream) count_streamed_call();
    if (parts > 1) {
      run_parts(c, parts);
    } else if (tk_op_has_sum(c.op)) {  // one thread: every iteration adds into the sums
      if (c.call.kargs.numel > 0) TORCH_CHECK(tk_run_cpu(&c.call, 0, c.call.kargs.numel) == TK_OK, c.call.msg);
    } else {
      run_cpu(c.call, stream ? &plan : nullptr);
    }
  }
  push_outputs(handle, stack, c);
}

}  // namespace

const tk_op* op_of(const c10::OperatorHandle& handle) { return find_op(handle); }
std::optional<tk_dtype> tk_dtype_of(at::ScalarType s) { return to_tk_dtype(s); }
at::ScalarType scalar_type_of(tk_dtype d) { return to_scalar_type(d); }

void boxed_cpu(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  boxed(op, stack, c10::Device(c10::DeviceType::CPU), true);
}

void boxed_meta(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  if (has_symbolic_args(op, *stack)) return boxed_meta_symbolic(op, stack);
  boxed(op, stack, c10::Device(c10::DeviceType::Meta), false);
}

void boxed_cuda(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  boxed(op, stack, c10::Device(c10::DeviceType::CUDA), true);
}

}  // namespace tk_shim
