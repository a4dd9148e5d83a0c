// meta.cpp - the Meta kernel for symbolic sizes. torch.compile(dynamic=True),
// torch.export and opcheck's test_aot_dispatch_dynamic run the Meta kernel
// on tensors whose sizes are c10::SymInt; the core cannot bind those, so
// here tk_bind_types checks what does not depend on sizes and the spec's
// shape programs (tk_op_shape_code) are evaluated over SymInt: input dims are
// checked with TORCH_SYM_CHECK (a guard, as torch's own meta functions do)
// and output shapes are computed symbolically.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/SymBool.h>
#include <c10/core/SymInt.h>

#include <array>
#include <string>
#include <vector>

#include "shim.h"

namespace tk_shim {
namespace {

constexpr size_t kMaxArgs = TK_MAX_TENSORS + TK_MAX_INTS + TK_MAX_FLOATS;
constexpr int kMaxDefaultDepth = 8;  // defaults may use earlier defaults

// The code of one shape entry (empty for '...' and for a dim that binds a name).
std::vector<tk_shape_instr> shape_code(const tk_op* op, tk_shape_of what, int i, int j) {
  std::vector<tk_shape_instr> code(16);
  int n = tk_op_shape_code(op, what, i, j, code.data(), static_cast<int>(code.size()));
  if (n > static_cast<int>(code.size())) {
    code.resize(static_cast<size_t>(n));
    n = tk_op_shape_code(op, what, i, j, code.data(), n);
  }
  TORCH_INTERNAL_ASSERT(n >= 0, "tk.", tk_op_name(op), ": no shape entry (", what, ", ", i, ", ", j, ")");
  code.resize(static_cast<size_t>(n));
  return code;
}

bool truthy(const c10::SymInt& x) { return x.sym_ne(0).guard_bool(__FILE__, __LINE__); }

c10::SymInt from_bool(const c10::SymBool& b) {
  return c10::SymInt(b.guard_bool(__FILE__, __LINE__) ? 1 : 0);
}

// Python's a // b and a % b over SymInt: exact for known ints (a known zero
// divisor is the op's error), FloorDiv/PythonMod for symbolic ones.
c10::SymInt floordiv(const tk_op* op, const c10::SymInt& a, const c10::SymInt& b, bool mod) {
  auto x = a.maybe_as_int(), y = b.maybe_as_int();
  // a symbolic divisor with a hint: guard on it being nonzero (the hint's
  // own division would raise a bare ZeroDivisionError); without one
  // (unbacked: t.item()) torch's FloorDiv stands
  const bool zero = y ? *y == 0 : b.has_hint() && !b.sym_ne(0).guard_bool(__FILE__, __LINE__);
  TORCH_CHECK(!zero, "tk.", tk_op_name(op), ": a shape expression divides by zero");
  if (!x || !y) return mod ? a % b : a / b;
  // INT64_MIN / -1 traps (SIGFPE): x // -1 is -x, x % -1 is 0.
  if (*y == -1) {
    TORCH_CHECK(mod || *x != INT64_MIN, "tk.", tk_op_name(op), ": a shape expression overflows");
    return c10::SymInt(mod ? 0 : -*x);
  }
  int64_t q = *x / *y, r = *x % *y;
  if (r != 0 && ((r < 0) != (*y < 0))) q -= 1, r += *y;
  return c10::SymInt(mod ? r : q);
}

// Evaluates shape code with the call's arguments; None ints use their default.
c10::SymInt eval(const tk_op* op, const std::vector<tk_shape_instr>& code,
                 c10::ArrayRef<c10::IValue> args, int depth) {
  TORCH_CHECK(depth < kMaxDefaultDepth, "tk.", tk_op_name(op), ": defaults nest too deeply");
  std::vector<c10::SymInt> st;
  auto pop = [&] {
    TORCH_INTERNAL_ASSERT(!st.empty(), "tk: malformed shape code");
    c10::SymInt v = st.back();
    st.pop_back();
    return v;
  };
  for (size_t pc = 0; pc < code.size();) {
    const tk_shape_instr& in = code[pc++];
    if (in.opc == TK_SH_CONST) {
      st.emplace_back(in.a);
    } else if (in.opc == TK_SH_DIM) {
      st.push_back(args[static_cast<size_t>(in.a)].toTensor().sym_size(in.b));
    } else if (in.opc == TK_SH_PARAM) {
      const c10::IValue& v = args[static_cast<size_t>(in.a)];
      if (v.isNone())
        st.push_back(eval(op, shape_code(op, TK_SHAPE_DEFAULT, static_cast<int>(in.a), 0), args, depth + 1));
      else if (v.isBool()) st.emplace_back(v.toBool() ? 1 : 0);
      else st.push_back(v.toSymInt());
    } else if (in.opc == TK_SH_JUMP) {
      pc = static_cast<size_t>(in.a);
    } else if (in.opc == TK_SH_JUMP_IF_ZERO) {
      if (!truthy(pop())) pc = static_cast<size_t>(in.a);
    } else if (in.opc == TK_SH_NEG || in.opc == TK_SH_NOT || in.opc == TK_SH_ABS) {
      c10::SymInt x = pop();
      if (in.opc == TK_SH_NEG) st.push_back(-x);
      else if (in.opc == TK_SH_NOT) st.emplace_back(truthy(x) ? 0 : 1);
      else st.push_back(x.max(-x));   // abs without a guard on the sign
    } else {
      c10::SymInt y = pop(), x = pop();
      switch (in.opc) {
        case TK_SH_ADD: st.push_back(x + y); break;
        case TK_SH_SUB: st.push_back(x - y); break;
        case TK_SH_MUL: st.push_back(x * y); break;
        case TK_SH_FLOORDIV: st.push_back(floordiv(op, x, y, false)); break;
        case TK_SH_MOD: st.push_back(floordiv(op, x, y, true)); break;
        case TK_SH_EQ: st.push_back(from_bool(x.sym_eq(y))); break;
        case TK_SH_NE: st.push_back(from_bool(x.sym_ne(y))); break;
        case TK_SH_LT: st.push_back(from_bool(x.sym_lt(y))); break;
        case TK_SH_LE: st.push_back(from_bool(x.sym_le(y))); break;
        case TK_SH_GT: st.push_back(from_bool(x.sym_gt(y))); break;
        case TK_SH_GE: st.push_back(from_bool(x.sym_ge(y))); break;
        case TK_SH_AND: st.emplace_back(truthy(x) && truthy(y) ? 1 : 0); break;
        case TK_SH_OR: st.emplace_back(truthy(x) || truthy(y) ? 1 : 0); break;
        case TK_SH_MIN: st.push_back(x.min(y)); break;
        case TK_SH_MAX: st.push_back(x.max(y)); break;
        default: TORCH_INTERNAL_ASSERT(false, "tk: unknown shape instruction ", in.opc);
      }
    }
  }
  TORCH_INTERNAL_ASSERT(st.size() == 1, "tk: malformed shape code");
  return st.back();
}

// A view for tk_bind_types: dtype, rank and device; sizes are not looked at.
tk_arg type_arg(const at::Tensor& t, const tk_op* op, const char* name) {
  TORCH_CHECK(t.defined(), "tk.", tk_op_name(op), ": argument '", name, "': expected a tensor, got None");
  std::optional<tk_dtype> dtype = tk_dtype_of(t.scalar_type());
  TORCH_CHECK(dtype.has_value(), "tk.", tk_op_name(op), ": argument '", name, "': dtype ",
              t.scalar_type(), " is not supported");
  tk_tensor_view v{};
  v.dtype = *dtype;
  v.ndim = static_cast<int>(t.dim());
  v.device = TK_META;
  return tk_arg_tensor(v);
}

// Checks tensor argument i's dims against the spec (symbolically).
void check_dims(const tk_op* op, c10::ArrayRef<c10::IValue> args, int i) {
  const at::Tensor& t = args[static_cast<size_t>(i)].toTensor();
  const int nd = tk_op_shape_ndims(op, TK_SHAPE_INPUT, i);
  const int batch = tk_op_shape_has_batch(op, TK_SHAPE_INPUT, i);
  const int64_t first = t.dim() - (nd - batch);  // the first explicit dim
  const char* name = tk_op_param_name(op, i);
  for (int j = batch; j < nd; ++j) {
    std::vector<tk_shape_instr> code = shape_code(op, TK_SHAPE_INPUT, i, j);
    if (code.empty()) continue;
    const int64_t d = first + (j - batch);
    c10::SymInt want = eval(op, code, args, 0), got = t.sym_size(d);
    TORCH_SYM_CHECK(got.sym_eq(want), "tk.", tk_op_name(op), ": argument '", name, "': dim ", d, " is ", got,
                    " but the spec needs ", want);
  }
  // (the batch dims broadcast across the '...' inputs: batch_shape checks them)
}

// The batch dims of the call: those of the '...' inputs broadcast as torch
// broadcasts (a guard where sizes are symbolic; an error naming the op when
// they cannot be); a 'mut' input must have them all itself.
std::vector<c10::SymInt> batch_shape(const tk_op* op, c10::ArrayRef<c10::IValue> args) {
  auto batch_rank = [op](const at::Tensor& t, size_t i) {   // its dims before the explicit ones
    return t.dim() - (tk_op_shape_ndims(op, TK_SHAPE_INPUT, static_cast<int>(i)) - 1);
  };
  c10::SymDimVector shape;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor() || !tk_op_shape_has_batch(op, TK_SHAPE_INPUT, static_cast<int>(i))) continue;
    const at::Tensor& t = args[i].toTensor();
    const int64_t nb = batch_rank(t, i);
    try {
      shape = at::infer_size_symdimvector(shape, t.sym_sizes().slice(0, static_cast<size_t>(nb)));
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "tk.", tk_op_name(op), ": argument '", tk_op_param_name(op, static_cast<int>(i)),
                  "': its batch dims (...) do not broadcast with the other inputs' (", e.what_without_backtrace(), ")");
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (!tk_op_param_mut(op, static_cast<int>(i)) || !tk_op_shape_has_batch(op, TK_SHAPE_INPUT, static_cast<int>(i)))
      continue;
    const at::Tensor& t = args[i].toTensor();
    const int64_t nb = batch_rank(t, i);
    const char* name = tk_op_param_name(op, static_cast<int>(i));
    TORCH_CHECK(nb == static_cast<int64_t>(shape.size()), "tk.", tk_op_name(op), ": argument '", name,
                "' is updated in place ('mut'), so its batch dims (...) must be the call's");
    for (int64_t d = 0; d < nb; ++d)
      TORCH_SYM_CHECK(t.sym_size(d).sym_eq(shape[static_cast<size_t>(d)]), "tk.", tk_op_name(op), ": argument '",
                      name, "' is updated in place ('mut'), so its batch dims (...) must be the call's");
  }
  return std::vector<c10::SymInt>(shape.begin(), shape.end());
}

// The spec's 'assert' lines without floats, over SymInt: each must hold (a
// guard, as TORCH_SYM_CHECK makes; tk_bind checks them all on known sizes).
void check_asserts(const tk_op* op, c10::ArrayRef<c10::IValue> args) {
  for (int i = 0; i < tk_op_nasserts(op); ++i) {
    std::vector<tk_shape_instr> code = shape_code(op, TK_SHAPE_ASSERT, i, 0);
    if (code.empty()) continue;  // it reads a float: tk_bind checks it when the kernel runs
    c10::SymInt v = eval(op, code, args, 0);
    std::array<char, 256> text{};
    tk_op_assert_text(op, i, text.data(), text.size());
    TORCH_SYM_CHECK(v.sym_ne(0), "tk.", tk_op_name(op), ": assert ", text.data(), " failed");
  }
}

// Output o's shape: the call's batch dims (batch_shape), then its expressions.
std::vector<c10::SymInt> output_shape(const tk_op* op, c10::ArrayRef<c10::IValue> args, int o,
                                      const std::vector<c10::SymInt>& batch) {
  std::vector<c10::SymInt> sizes;
  for (int j = 0; j < tk_op_shape_ndims(op, TK_SHAPE_OUTPUT, o); ++j) {
    std::vector<tk_shape_instr> code = shape_code(op, TK_SHAPE_OUTPUT, o, j);
    if (code.empty()) {  // '...'
      for (const c10::SymInt& b : batch) sizes.push_back(b);
      continue;
    }
    c10::SymInt v = eval(op, code, args, 0);
    TORCH_SYM_CHECK(v.sym_ge(0), "tk.", tk_op_name(op), ": output '", tk_op_output_name(op, o), "': dim ",
                    sizes.size(), " would be ", v, "; it must be >= 0");
    sizes.push_back(std::move(v));
  }
  return sizes;
}

}  // namespace

bool has_symbolic_args(const c10::OperatorHandle& handle, const torch::jit::Stack& stack) {
  for (const c10::IValue& v : torch::jit::last(stack, handle.schema().arguments().size())) {
    if (v.isSymInt()) return true;   // a symbolic int argument (an IValue holds a known one as an int)
    if (!v.isTensor()) continue;
    for (const c10::SymInt& s : v.toTensor().sym_sizes())
      if (s.is_symbolic()) return true;
  }
  return false;
}

void boxed_meta_symbolic(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const tk_op* op = op_of(handle);
  const size_t n = handle.schema().arguments().size();
  TORCH_INTERNAL_ASSERT(n <= kMaxArgs, "tk.", tk_op_name(op), ": too many arguments");
  auto args = torch::jit::last(*stack, n);
  std::array<tk_arg, kMaxArgs> targs{};
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    const char* name = tk_op_param_name(op, static_cast<int>(i));
    if (v.isTensor()) targs[i] = type_arg(v.toTensor(), op, name);
    else if (v.isNone()) targs[i] = tk_arg_none();
    else if (v.isBool()) targs[i] = tk_arg_bool(v.toBool() ? 1 : 0);
    else if (v.isInt() || v.isSymInt()) targs[i] = tk_arg_int(v.isInt() ? v.toInt() : 0);
    else if (v.isDouble()) targs[i] = tk_arg_float(v.toDouble());
    else TORCH_CHECK(false, "tk.", tk_op_name(op), ": argument '", name, "': unsupported value of type ", v.tagKind());
  }
  tk_call call;
  TORCH_CHECK(tk_bind_types(op, targs.data(), static_cast<int>(n), &call) == TK_OK, call.msg);
  for (size_t i = 0; i < n; ++i)
    if (args[i].isTensor()) check_dims(op, args, static_cast<int>(i));
  check_asserts(op, args);
  const std::vector<c10::SymInt> batch = batch_shape(op, args);
  std::vector<at::Tensor> outs;
  for (int o = 0; o < tk_op_nreturns(op); ++o) {   // (a 'mut' parameter's output is the argument itself)
    const auto options =   // (the declared dtype: a float16 sum is added up in float32, returned as float16)
        at::TensorOptions().dtype(scalar_type_of(static_cast<tk_dtype>(tk_op_output_dtype(call.op, call.variant, o))))
            .device(c10::kMeta);
    outs.push_back(at::empty_symint(output_shape(op, args, o, batch), options));
  }
  torch::jit::drop(*stack, n);
  for (at::Tensor& t : outs) stack->emplace_back(std::move(t));
}

}  // namespace tk_shim
