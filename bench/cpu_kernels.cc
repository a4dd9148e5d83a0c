// cpu_kernels.cc - Google Benchmark of the built-in ops' generated CPU
// kernels through the C API, on preallocated buffers (no torch, no
// allocation in the timed region), with llm.c-style counters: bytes written
// per second for brick_pad, FLOP/s for rwkv_forward, and the memset of the
// same bytes as the bandwidth floor to compare against.
//
//   build/bench_cpu_kernels --benchmark_counters_tabular=true
//
// Single-threaded: the index space is run in one tk_run_cpu call.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "tk.h"
#include "tk_kernel.h"   // the kernels' own float conversions
extern const tk_builtin_spec tk_builtin_specs[];
extern const int tk_builtin_nspecs;
extern const tk_builtin_kernel tk_builtin_kernels[];
extern const int tk_builtin_nkernels;
}

namespace {

// The process-wide context with every built-in op and kernel.
const tk_ctx *context() {
    static tk_ctx *ctx = [] {
        tk_ctx *c = tk_ctx_new();
        if (tk_ctx_add_builtins(c, tk_builtin_specs, tk_builtin_nspecs, tk_builtin_kernels,
                                tk_builtin_nkernels) != TK_OK)
            std::abort();
        return c;
    }();
    return ctx;
}

constexpr int64_t kTH = 48, kTW = 32, kPW = 4096, kPH = 2048, kStagger = 10;
constexpr int64_t kH = kTH + 2 * kPH, kW = kTW + 2 * kPW;  // the seed configuration

// brick_pad at the seed configuration, float32: 136 MB written per call.
void BM_brick_pad_seed(benchmark::State &state) {
    std::vector<float> tile(kTH * kTW), out(kH * kW);
    for (size_t i = 0; i < tile.size(); i++) tile[i] = static_cast<float>(i);
    int64_t ts[2] = {kTH, kTW}, tst[2] = {kTW, 1}, os[2] = {kH, kW}, ost[2] = {kW, 1};
    tk_arg args[6] = {tk_arg_tensor(tk_view(tile.data(), TK_F32, 2, ts, tst)), tk_arg_int(kPW), tk_arg_int(kPH),
                      tk_arg_int(kStagger), tk_arg_none(), tk_arg_none()};
    tk_call call;
    if (tk_bind(tk_op_find(context(), "brick_pad"), args, 6, &call) != TK_OK ||
        tk_set_output(&call, 0, tk_view(out.data(), TK_F32, 2, os, ost)) != TK_OK) {
        state.SkipWithError(call.msg);
        return;
    }
    for (auto _ : state) {
        tk_run_cpu(&call, 0, call.kargs.numel);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * kH * kW * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_brick_pad_seed)->Unit(benchmark::kMillisecond)->UseRealTime();

// memset of the same 136 MB: the bandwidth brick_pad is measured against.
void BM_memset_seed_bytes(benchmark::State &state) {
    std::vector<float> out(kH * kW);
    for (auto _ : state) {
        std::memset(out.data(), static_cast<int>(state.iterations() & 0xff), out.size() * sizeof(float));
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * kH * kW * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_memset_seed_bytes)->Unit(benchmark::kMillisecond)->UseRealTime();

// rwkv_forward, B x 768 x 768: T(T+1)/2 multiply-adds per (b, c).
// B = 8 runs the 8-row batch groups (each w window load feeds 8 rows), B = 4
// the 4-row groups, B = 12 one group of each, B = 1 the single-row lane tiles.
// float32, and bfloat16 and float16 (tk_u16 elements, summed in float32).
template <typename Elem, tk_dtype DT>
void BM_rwkv(benchmark::State &state) {
    const int64_t B = state.range(0), C = 768, T = 768;
    std::vector<Elem> w(C * T), k(B * C * T), out(B * C * T);
    auto elem = [](float f) {
        if constexpr (DT == TK_F32) return f;
        else if constexpr (DT == TK_BF16) return tk_f32_to_bf16(f);
        else return tk_f32_to_f16_soft(f);
    };
    for (size_t i = 0; i < w.size(); i++) w[i] = elem(static_cast<float>(i % 97) / 97.0f);
    for (size_t i = 0; i < k.size(); i++) k[i] = elem(static_cast<float>(i % 89) / 89.0f);
    int64_t ws[2] = {C, T}, wst[2] = {T, 1}, ks[3] = {B, C, T}, kst[3] = {C * T, T, 1};
    tk_arg args[3] = {tk_arg_tensor(tk_view(w.data(), DT, 2, ws, wst)),
                      tk_arg_tensor(tk_view(k.data(), DT, 3, ks, kst)), tk_arg_float(0.1)};
    tk_call call;
    if (tk_bind(tk_op_find(context(), "rwkv_forward"), args, 3, &call) != TK_OK ||
        tk_set_output(&call, 0, tk_view(out.data(), DT, 3, ks, kst)) != TK_OK) {
        state.SkipWithError(call.msg);
        return;
    }
    for (auto _ : state) {
        tk_run_cpu(&call, 0, call.kargs.numel);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    const double flop = 2.0 * static_cast<double>(B * C) * static_cast<double>(T * (T + 1) / 2);
    state.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_rwkv_forward(benchmark::State &state) { BM_rwkv<float, TK_F32>(state); }
void BM_rwkv_forward_bf16(benchmark::State &state) { BM_rwkv<uint16_t, TK_BF16>(state); }
BENCHMARK(BM_rwkv_forward)->Arg(1)->Arg(4)->Arg(8)->Arg(12)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_rwkv_forward_f16(benchmark::State &state) { BM_rwkv<uint16_t, TK_F16>(state); }
BENCHMARK(BM_rwkv_forward_bf16)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_rwkv_forward_f16)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
