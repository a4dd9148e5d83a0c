// output_cache.cpp - reuse of the memory of large CPU outputs.
//
// A fresh output of tens of MiB is memory the process has never touched: the
// kernel's first write to each 4 KiB page takes a page fault, in which the OS
// maps and zeroes the page. glibc serves blocks of 32 MiB and more with
// mmap and returns them with munmap on free (its heap, which keeps freed
// memory, only takes smaller blocks), so every call of rwkv_forward at
// B = 32 (75 MiB) or brick_pad at the seed configuration (136 MiB) pays
// those faults again. They were a quarter of rwkv_forward's time and two
// thirds of brick_pad's on the 2-core development machine
// (bench/results/2026-12-04-cpu-output-cache.txt).
//
// The cache keeps the blocks of freed outputs (of kCacheMin bytes or more)
// and gives them to the next output that fits, the way torch's CUDA caching
// allocator does on the GPU. Blocks come from torch's CPU allocator and go
// back to it when evicted (least recently freed first, when the cache would
// exceed its capacity), on torch_tk.empty_cache(), or never when the process
// exits (they are still referenced then: no leak). A reused block holds the
// previous output's values, so only outputs the op writes in full use it
// (tk_op_output_written: a spec that stores an output under a condition only
// gets torch's at::empty for it), and none while torch fills uninitialised
// memory (torch.use_deterministic_algorithms with
// torch.utils.deterministic.fill_uninitialized_memory).
//
// Capacity: TK_CPU_CACHE_MB (0 turns the cache off); by default 1 GiB or an
// eighth of the memory (physical, or the cgroup's limit when lower), the
// smaller. An allocation that fails empties the cache and tries once more.
// After fork() the child does not use the parent's cache (its mutex may have
// been held by a thread that does not exist in the child): its outputs come
// straight from torch's allocator. torch.profiler's memory view sees the
// blocks as torch's allocator does: a cached block stays allocated, and an
// output that reuses one allocates nothing.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "shim.h"

namespace tk_shim {
namespace {

// Smaller outputs come from torch's allocator directly: glibc's heap already
// reuses blocks below 32 MiB once one has been freed.
constexpr size_t kCacheMin = size_t{16} << 20;

// The block of one output: torch's allocation, kept alive while cached.
struct Block {
  c10::DataPtr data;
  size_t bytes = 0;
  bool mapped = false;  // held a whole output before: its pages are in memory
};

// The memory limit of this process's cgroup (v2), 0 if none or unknown.
size_t cgroup_limit() {
  std::FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r");
  if (f == nullptr) return 0;
  unsigned long long v = 0;
  const int n = std::fscanf(f, "%llu", &v);  // "max" (no limit) reads nothing
  std::fclose(f);
  return n == 1 ? static_cast<size_t>(v) : 0;
}

size_t default_capacity() {
  size_t cap = size_t{1} << 30;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t mem = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  const size_t limit = cgroup_limit();
  if (limit > 0 && (mem == 0 || limit < mem)) mem = limit;
  if (mem > 0 && mem / 8 < cap) cap = mem / 8;
  return cap;
}

size_t capacity_from_env() {
  const char* v = std::getenv("TK_CPU_CACHE_MB");
  if (v == nullptr || *v == '\0') return default_capacity();
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v, &end, 10);
  if (v[0] < '0' || v[0] > '9' || *end != '\0') return default_capacity();  // not a count of MiB
  constexpr unsigned long long kMaxMb = 1ull << 30;                          // 1 PiB
  return static_cast<size_t>(mb < kMaxMb ? mb : kMaxMb) << 20;
}

class OutputCache final : public c10::Allocator {
 public:
  static void release(void* ctx);  // the deleter of the blocks' DataPtrs

  OutputCache() : capacity_(capacity_from_env()), pid_(getpid()) {}

  c10::DataPtr allocate(size_t n) override {
    c10::Allocator* cpu = c10::GetCPUAllocator();
    if (n < kCacheMin || capacity_ == 0 || n > capacity_ || getpid() != pid_) {
      c10::DataPtr d = cpu->allocate(n);
      advise_huge_pages(d.get(), n);
      return d;
    }
    Block* b = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // the smallest cached block that holds n and wastes at most an eighth
      size_t best = blocks_.size();
      for (size_t i = 0; i < blocks_.size(); ++i)
        if (blocks_[i]->bytes >= n && blocks_[i]->bytes - n <= n / 8 &&
            (best == blocks_.size() || blocks_[i]->bytes < blocks_[best]->bytes))
          best = i;
      if (best < blocks_.size()) {
        b = blocks_[best];
        blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(best));
        cached_ -= b->bytes;
        ++hits_;
      } else {
        ++misses_;
      }
    }
    if (b == nullptr) {
      auto fresh = std::make_unique<Block>();
      try {
        fresh->data = cpu->allocate(n);
      } catch (const c10::Error&) {  // the cached blocks may be what is missing
        empty();
        fresh->data = cpu->allocate(n);  // throws torch's out-of-memory error
      }
      fresh->bytes = n;
      advise_huge_pages(fresh->data.get(), n);
      b = fresh.release();
    }
    void* p = b->data.get();
    return {p, b, &OutputCache::release, c10::Device(c10::DeviceType::CPU)};
  }

  // Ours are as simple as torch's own: the deleter takes the context, which
  // is all a copy-on-write clone (torch._lazy_clone) needs.
  bool is_simple_data_ptr(const c10::DataPtr& dp) const override {
    return dp.get_deleter() == &OutputCache::release || c10::Allocator::is_simple_data_ptr(dp);
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }

  void info(int64_t* out) {
    if (getpid() != pid_) {  // a fork child: the cache is not its own
      for (int i = 0; i < 6; ++i) out[i] = 0;
      out[4] = static_cast<int64_t>(capacity_);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    out[0] = static_cast<int64_t>(cached_);
    out[1] = static_cast<int64_t>(blocks_.size());
    out[2] = static_cast<int64_t>(hits_);
    out[3] = static_cast<int64_t>(misses_);
    out[4] = static_cast<int64_t>(capacity_);
    out[5] = streamed_calls.load(std::memory_order_relaxed);
  }

  void empty() {
    if (getpid() != pid_) return;  // before the lock: see put()
    std::vector<Block*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(blocks_);
      cached_ = 0;
    }
    for (Block* b : drop) delete b;  // torch's deleter, outside the lock
  }

 private:
  // Runs in a deleter: must not throw.
  void put(Block* b) noexcept {
    std::vector<Block*> drop;
    if (getpid() == pid_) {  // a fork child never locks the parent's mutex
      std::lock_guard<std::mutex> lock(mu_);
      bool keep = b->bytes <= capacity_;
      try {
        blocks_.reserve(blocks_.size() + 1);
        drop.reserve(blocks_.size());
      } catch (const std::bad_alloc&) {
        keep = false;  // freed below
      }
      if (keep) {
        b->mapped = true;
        while (cached_ + b->bytes > capacity_) {  // the least recently freed go first
          drop.push_back(blocks_.front());
          cached_ -= blocks_.front()->bytes;
          blocks_.erase(blocks_.begin());
        }
        blocks_.push_back(b);
        cached_ += b->bytes;
        b = nullptr;
      }
    }
    delete b;
    for (Block* d : drop) delete d;
  }

  const size_t capacity_;
  const pid_t pid_;
  std::mutex mu_;
  std::vector<Block*> blocks_;  // least recently freed first
  size_t cached_ = 0;
  uint64_t hits_ = 0, misses_ = 0;

 public:
  std::atomic<int64_t> streamed_calls{0};
};

// Never destroyed: outputs may be freed while the process exits.
OutputCache& cache() {
  static OutputCache* c = new OutputCache;
  return *c;
}

void OutputCache::release(void* ctx) { cache().put(static_cast<Block*>(ctx)); }

}  // namespace

void count_streamed_call() { cache().streamed_calls.fetch_add(1, std::memory_order_relaxed); }

bool in_mapped_block(const at::Tensor& t) {
  const c10::DataPtr& dp = t.storage().data_ptr();
  return dp.get_deleter() == &OutputCache::release && static_cast<const Block*>(dp.get_context())->mapped;
}

at::Tensor empty_cpu_output(at::IntArrayRef sizes, at::ScalarType dtype, bool written) {
  const at::Context& ctx = at::globalContext();
  if (!written || (ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory()))
    return at::empty(sizes, at::TensorOptions().dtype(dtype));
  return at::detail::empty_generic(sizes, &cache(), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                   std::nullopt);
}

}  // namespace tk_shim

// For torch_tk (ctypes): the cache's cached bytes, blocks, hits, misses,
// capacity and the calls whose outputs were streamed in out[0..5]; and
// emptying it.
extern "C" __attribute__((visibility("default"))) void tk_shim_cpu_cache_info(int64_t* out) {
  tk_shim::cache().info(out);
}

extern "C" __attribute__((visibility("default"))) void tk_shim_cpu_cache_empty(void) {
  tk_shim::cache().empty();
}
