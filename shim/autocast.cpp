// autocast.cpp - the AutocastCPU / AutocastCUDA kernel of every tk op.
//
// A tk op computes in its inputs' precision (half types accumulate in
// float32 inside the kernel), so autocast does not cast its inputs down.
// What autocast does break is a spec's dtype ties: under autocast a
// parameter (float32) and an activation (bfloat16) meet in one call, and
// 'k: w.dtype' would refuse them. So, as autocast does for its "promote"
// ops (cat, stack, index_put), float tensor arguments in one dtype group
// (tk_op_param_dtype_group) whose dtypes differ are cast to the widest of
// them; everything else is passed through. A group with a 'mut' argument
// (updated in place: a cast copy would take the update) is not cast; its
// dtypes must then agree. docs/autograd.md.
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <map>
#include <vector>

#include "shim.h"

namespace tk_shim {

void boxed_autocast(const c10::OperatorHandle& handle, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const tk_op* op = op_of(handle);
  const size_t n = handle.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  std::map<int, at::ScalarType> widest;  // dtype group -> promoted float dtype
  std::map<int, bool> mixed;
  for (size_t i = 0; i < n; ++i) {
    const int g = tk_op_param_dtype_group(op, static_cast<int>(i));
    if (g < 0 || !args[i].isTensor() || !at::isFloatingType(args[i].toTensor().scalar_type())) continue;
    const at::ScalarType t = args[i].toTensor().scalar_type();
    auto it = widest.find(g);
    if (it == widest.end()) {
      widest.emplace(g, t);
    } else if (it->second != t) {
      it->second = at::promote_types(it->second, t);
      mixed[g] = true;
    }
  }
  const size_t base = stack->size() - n;
  for (size_t i = 0; i < n; ++i)   // a 'mut' argument is updated, not a copy of it: its group keeps its dtypes
    if (tk_op_param_mut(op, static_cast<int>(i))) mixed[tk_op_param_dtype_group(op, static_cast<int>(i))] = false;
  for (size_t i = 0; i < n; ++i) {
    const int g = tk_op_param_dtype_group(op, static_cast<int>(i));
    if (g < 0 || !mixed[g]) continue;
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor() && at::isFloatingType(v.toTensor().scalar_type()))
      v = v.toTensor().to(widest[g]);
  }
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  handle.redispatchBoxed(keys - c10::autocast_dispatch_keyset, stack);
}

}  // namespace tk_shim
