// autograd.cpp - one boxed kernel at the Autograd key for every tk op.
//
// An op with backward ops ('backward a, b' in its spec): the call runs below
// autograd, then a TkBackward node is recorded; its apply() calls each needed
// backward op through the dispatcher with its arguments matched by name
// (tk_op_backward_source: forward parameters, saved forward outputs,
// grad_<output>) and returns grad_<param> for each forward tensor parameter.
// An op without backward ops refuses inputs that require grad, except as a
// backward op called by such a node with grad mode on, where it runs once
// differentiable (create_graph=True, torch.func). Being a C++
// kernel at the Autograd key, this works the same from Python, TorchScript,
// C++ libtorch, torch.compile (compiled autograd too: compiled_args,
// apply_with_saved) and torch.export. docs/autograd.md.

// GCC's -Warray-bounds misreads torch's unpacking of an InputMetadata
// (ivalue_inl.h: a tuple of 6 is held out of line, not in the 3 inline
// slots it names): off for torch's headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
// Compiled autograd (torch._dynamo.compiled_autograd) calls a node through
// compiled_args and apply_with_saved; their helpers' interface is the one of
// torch 2.13 (the version CI builds against). Older torch: the node has
// neither, and compiled autograd says so (docs/autograd.md).
#define TK_COMPILED_AUTOGRAD 1
#include <torch/csrc/dynamo/compiled_autograd.h>
#endif

#include <cctype>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#pragma GCC diagnostic pop

#include "shim.h"

namespace tk_shim {
namespace {

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// How one backward op is called: where each argument comes from, and which
// forward tensor parameter each of its outputs is the gradient of.
struct BackwardCall {
  std::string name;                      // "rwkv_backward_w"
  c10::OperatorHandle handle;            // tk::rwkv_backward_w
  std::vector<std::pair<int, int>> args; // per parameter: (tk_grad_source, index)
  std::vector<int> targets;              // per output: forward parameter
};

// Everything the Autograd kernel needs to know about one forward op.
struct Plan {
  const tk_op* op = nullptr;
  std::string name;                    // "rwkv_forward"
  std::vector<BackwardCall> backward;  // empty: no backward
  std::vector<int> tensor_params;      // forward parameters that are tensors (edge order)
  std::vector<bool> save_param;        // per forward parameter
  std::vector<bool> shape_only;        // per forward parameter: no backward op reads its elements
  std::vector<bool> save_output;       // per forward output
  std::vector<bool> takes_grad;        // per forward output: some backward op takes grad_<output>
  std::vector<bool> has_grad;          // per forward parameter: some backward op computes grad_<param>
  std::vector<bool> read;              // per forward parameter: the op's body reads it (tk_op_param_read)
  bool in_place = false;               // updates 'mut' parameters (run_in_place)
};

Plan make_plan(const tk_op* op) {
  const tk_ctx* ctx = context();
  Plan p;
  p.op = op;
  p.name = tk_op_name(op);
  p.in_place = tk_op_in_place(op) != 0;
  p.save_param.assign(static_cast<size_t>(tk_op_nparams(op)), false);
  p.shape_only.assign(static_cast<size_t>(tk_op_nparams(op)), true);
  p.save_output.assign(static_cast<size_t>(tk_op_nreturns(op)), false);   // (what the op returns)
  p.takes_grad.assign(static_cast<size_t>(tk_op_nreturns(op)), false);
  p.has_grad.assign(static_cast<size_t>(tk_op_nparams(op)), false);
  for (int i = 0; i < tk_op_nparams(op); ++i) {
    if (tk_op_param_kind(op, i) == 0 /* TK_P_TENSOR */) p.tensor_params.push_back(i);
    p.read.push_back(tk_op_param_read(op, i) != 0);
  }
  for (int b = 0; b < tk_op_nbackward(op); ++b) {
    const tk_op* bw = tk_op_find(ctx, tk_op_backward_at(op, b));
    TORCH_INTERNAL_ASSERT(bw != nullptr, "tk: backward op ", tk_op_backward_at(op, b), " of ", p.name,
                          " is not loaded (tk_ctx_link should have said so)");
    const std::string full = std::string("tk::") + tk_op_name(bw);
    BackwardCall call{tk_op_name(bw), c10::Dispatcher::singleton().findSchemaOrThrow(full.c_str(), ""), {}, {}};
    for (int j = 0; j < tk_op_nparams(bw); ++j) {
      int index = -1;
      const int src = tk_op_backward_source(ctx, op, b, j, &index);
      TORCH_INTERNAL_ASSERT(src >= 0, "tk: ", full, " does not link to ", p.name);
      if (src == TK_GRAD_FROM_PARAM) {
        p.save_param[static_cast<size_t>(index)] = true;
        // (a backward op with backward ops of its own saves what it takes for them)
        if (tk_op_param_read(bw, j) || tk_op_nbackward(bw) > 0) p.shape_only[static_cast<size_t>(index)] = false;
      }
      if (src == TK_GRAD_FROM_OUTPUT) p.save_output[static_cast<size_t>(index)] = true;
      if (src == TK_GRAD_FROM_GRAD) p.takes_grad[static_cast<size_t>(index)] = true;
      call.args.emplace_back(src, index);
    }
    for (int j = 0; j < tk_op_nreturns(bw); ++j) {   // (what it returns; its scratch tensors are its own)
      call.targets.push_back(tk_op_backward_target(ctx, op, b, j));
      if (call.targets.back() >= 0) p.has_grad[static_cast<size_t>(call.targets.back())] = true;
    }
    p.backward.push_back(std::move(call));
  }
  return p;
}

// The plan of an op, made on its first call (after the registrations: it
// looks up the backward ops' handles). Ops registered at run time arrive
// later, so the table grows; map nodes stay put, so references stay valid.
}  // namespace

std::mutex& plan_mutex() {
  static std::mutex mutex;
  return mutex;
}

namespace {

const Plan& plan_of(const c10::OperatorHandle& handle) {
  std::mutex& mutex = plan_mutex();
  static std::map<const tk_op*, Plan> plans;
  const tk_op* op = op_of(handle);
  thread_local const tk_op* last_op = nullptr;   // the last plan this thread used (no lock)
  thread_local const Plan* last_plan = nullptr;
  if (op == last_op) return *last_plan;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(op);
  if (it == plans.end()) it = plans.emplace(op, make_plan(op)).first;
  last_op = op;
  last_plan = &it->second;
  return it->second;
}

// Runs the op below autograd (the CPU, CUDA or Meta kernel, or a tracer).
void redispatch(const c10::OperatorHandle& handle, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  at::AutoDispatchBelowADInplaceOrView guard;
  handle.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
}

// The forward parameter's edge (its place among the tensor parameters).
size_t edge_of(const Plan& plan, int param) {
  for (size_t e = 0; e < plan.tensor_params.size(); ++e)
    if (plan.tensor_params[e] == param) return e;
  TORCH_INTERNAL_ASSERT(false, "tk: parameter ", param, " is not a tensor");
}

// A new node, held the way this torch holds autograd nodes: c10::intrusive_ptr
// in recent versions, std::shared_ptr up to torch 2.11 (the lent GPU machine's).
template <class N, bool Intrusive = std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>>
struct NodeHolder {
  template <class... A>
  static auto make(A&&... args) { return c10::make_intrusive<N>(std::forward<A>(args)...); }
};
template <class N>
struct NodeHolder<N, false> {
  template <class... A>
  static auto make(A&&... args) { return std::make_shared<N>(std::forward<A>(args)...); }
};

// Whether any tensor argument requires grad (with grad mode on); the first such.
const char* first_requiring_grad(const c10::OperatorHandle& handle, c10::ArrayRef<c10::IValue> args) {
  if (!torch::autograd::GradMode::is_enabled()) return nullptr;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].isTensor() && args[i].toTensor().requires_grad())
      return handle.schema().arguments()[i].name().c_str();
  return nullptr;
}

// The forward op whose backward ops run_backward is calling on this thread,
// nullptr outside: a backward op without backward ops of its own called
// there with arguments that require grad is once differentiable (below).
thread_local const Plan* backward_of = nullptr;

struct BackwardScope {
  const Plan* saved;
  explicit BackwardScope(const Plan* forward) : saved(backward_of) { backward_of = forward; }
  ~BackwardScope() { backward_of = saved; }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
};

// A call of backward op `plan` (no backward ops of its own) whose arguments
// require grad: grad mode was on in a backward (create_graph=True, or a
// torch.func grad / vjp / jacrev level, which always differentiate that
// way). It runs below autograd, and its gradients are marked the way torch
// marks a @once_differentiable Function's: an Error node leads from them to
// the arguments, so differentiating them again raises, and only then. Being
// the kernel at the Autograd key, this happens at every torch.func level
// that tracks the arguments, so an outer level of nested transforms raises
// too instead of seeing no gradient.
void once_differentiable(const Plan& plan, const c10::OperatorHandle& handle, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack) {
  std::vector<at::Tensor> args;
  for (const c10::IValue& v : torch::jit::last(*stack, handle.schema().arguments().size()))
    if (v.isTensor()) args.push_back(v.toTensor());
  const std::string msg = "tk." + backward_of->name + ": double backward is not supported: its backward op tk." +
                          plan.name + " has no backward (a 'backward' line in its spec would give one); these " +
                          "gradients of tk." + backward_of->name + " were computed with create_graph=True";
  redispatch(handle, keys, stack);
  auto node = NodeHolder<torch::autograd::Error>::make(msg, torch::autograd::collect_next_edges(args));
  for (const c10::IValue& v : torch::jit::last(*stack, handle.schema().returns().size()))
    if (v.isTensor() && at::isFloatingType(v.toTensor().scalar_type()))
      torch::autograd::set_history(v.toTensor(), node);
}

// The gradients of one call, per edge: each backward op that makes a wanted
// gradient (wanted(edge)), called with arg(tk_grad_source, index) for each
// of its parameters.
template <class Wanted, class Arg>
variable_list run_backward(const Plan& plan, const Wanted& wanted, const Arg& arg) {
  variable_list result(plan.tensor_params.size());
  for (const BackwardCall& bw : plan.backward) {
    bool needed = false;
    for (int p : bw.targets) needed = needed || wanted(edge_of(plan, p));
    if (!needed) continue;
    torch::jit::Stack stack;
    for (const auto& [src, index] : bw.args) stack.push_back(arg(src, static_cast<size_t>(index)));
    {
      BackwardScope scope(&plan);
      bw.handle.callBoxed(stack);
    }
    TORCH_INTERNAL_ASSERT(stack.size() == bw.targets.size(), "tk.", bw.name, ": unexpected outputs");
    for (size_t j = 0; j < stack.size(); ++j)   // (one nobody wants, as an optional tensor's passed as None, is dropped)
      if (wanted(edge_of(plan, bw.targets[j]))) result[edge_of(plan, bw.targets[j])] = stack[j].toTensor();
  }
  return result;
}

// The autograd node of one call of an op with backward ops. Its inputs are
// the gradients of the forward outputs; its edges are the forward tensor
// parameters, in order.
struct TkBackward : torch::autograd::Node {
  const Plan* plan;
  std::vector<c10::IValue> params;         // forward scalar arguments the backward ops take
  std::vector<SavedVariable> saved_params; // forward tensor arguments the backward ops take
  std::vector<bool> none_params;           // per forward parameter: an optional tensor passed as None
  std::vector<SavedVariable> saved_outputs;
  std::vector<bool> differentiable;        // per forward output

  explicit TkBackward(const Plan* p) : plan(p) {}

  // "TkRwkvForwardBackward" for rwkv_forward, in the style of torch's nodes.
  std::string name() const override {
    std::string s = "Tk";
    bool up = true;
    for (char ch : plan->name) {
      if (ch == '_') {
        up = true;
        continue;
      }
      s += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
      up = false;
    }
    return s + "Backward";
  }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (SavedVariable& v : saved_params) v.reset_data();
    for (SavedVariable& v : saved_outputs) v.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t o = 0; o < grads.size(); ++o)
      if (!grads[o].defined() && differentiable[o]) grads[o] = input_metadata(o).zeros_like();
    // each saved tensor is unpacked once, however many backward ops take it:
    // saved-tensor hooks and checkpoint(use_reentrant=False) expect that
    std::map<std::pair<int, size_t>, c10::IValue> unpacked;
    return run_backward(
        *plan, [&](size_t edge) { return task_should_compute_output(edge); },
        [&](int src, size_t index) {
          auto it = unpacked.find({src, index});
          if (it == unpacked.end()) it = unpacked.emplace(std::make_pair(src, index), argument(src, index, grads)).first;
          return it->second;
        });
  }

#ifdef TK_COMPILED_AUTOGRAD
  // What compiled autograd keys its cache on: the op, the scalar arguments
  // (numbers become inputs of the compiled graph), the saved tensors.
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(plan->name);
    args.collect(params);
    args.collect(saved_params, false);
    args.collect(saved_outputs, true);
    args.collect(differentiable);
    for (size_t o = 0; o < differentiable.size(); ++o)  // the shapes of zeros for undefined gradients
      if (differentiable[o]) args.collect(input_metadata(o));
  }

  // The backward as a function of (grads, packed arguments) that the
  // compiled graph calls (apply_functional below), with the saved values
  // swapped for the graph's.
  variable_list apply_with_saved(const variable_list& inputs, torch::dynamo::autograd::SwapSavedVariables& saved) override {
    using torch::dynamo::autograd::IValuePacker;
    using Metadata = std::vector<std::optional<torch::autograd::InputMetadata>>;  // per edge
    saved.before(params);
    saved.before(saved_params);
    saved.before(saved_outputs);
    for (size_t o = 0; o < differentiable.size(); ++o)
      if (differentiable[o]) saved.before(mutable_input_metadata(o));
    std::vector<c10::IValue> args{c10::IValue(plan->name)};
    for (size_t i = 0; i < params.size(); ++i)
      args.push_back(plan->save_param[i] ? argument(TK_GRAD_FROM_PARAM, i, {}) : c10::IValue());
    for (size_t o = 0; o < saved_outputs.size(); ++o)
      args.push_back(plan->save_output[o] ? argument(TK_GRAD_FROM_OUTPUT, o, {}) : c10::IValue());
    std::vector<bool> wanted;
    for (size_t e = 0; e < plan->tensor_params.size(); ++e) wanted.push_back(task_should_compute_output(e));
    args.push_back(IValuePacker<std::vector<bool>>::pack(wanted));
    for (size_t o = 0; o < differentiable.size(); ++o)  // per output: how to fill an undefined gradient
      args.push_back(differentiable[o] ? IValuePacker<torch::autograd::InputMetadata>::pack(input_metadata(o))
                                       : c10::IValue());
    std::vector<at::TypePtr> schema;
    for (const c10::IValue& v : args) schema.push_back(v.isTensor() ? at::TensorType::get() : v.type());
    const auto& py = torch::dynamo::autograd::getPyCompilerInterface();
    const std::string fn = py->bind_function(saved.get_py_compiler(), name(), apply_functional, schema,
                                             /*is_custom_function=*/true, /*is_traceable=*/true);
    variable_list result = py->call_function(saved.get_py_compiler(), "apply_functional", fn, inputs, args,
                                             IValuePacker<Metadata>::pack(torch::dynamo::autograd::get_input_metadata(next_edges())));
    saved.after(params);
    saved.after(saved_params);
    saved.after(saved_outputs);
    for (size_t o = 0; o < differentiable.size(); ++o)
      if (differentiable[o]) saved.after(mutable_input_metadata(o));
    return result;
  }

  // apply() from the arguments apply_with_saved packed: the op's name, its
  // parameters (None where no backward op takes them), its saved outputs,
  // the gradients wanted, how to fill undefined ones.
  static variable_list apply_functional(const variable_list& inputs, const std::vector<c10::IValue>& args) {
    using torch::dynamo::autograd::IValuePacker;
    const std::string full = "tk::" + args.at(0).toStringRef();
    const Plan& plan = plan_of(c10::Dispatcher::singleton().findSchemaOrThrow(full.c_str(), ""));
    const size_t np = plan.save_param.size(), nout = plan.save_output.size();
    TORCH_INTERNAL_ASSERT(args.size() == 2 + np + 2 * nout && inputs.size() == nout, "tk: ", full,
                          ": unexpected backward arguments");
    const std::vector<bool> wanted = IValuePacker<std::vector<bool>>::unpack(args[1 + np + nout]);
    variable_list grads(inputs);
    for (size_t o = 0; o < nout; ++o) {
      const c10::IValue& zeros = args[2 + np + nout + o];
      if (!grads[o].defined() && !zeros.isNone())
        grads[o] = IValuePacker<torch::autograd::InputMetadata>::unpack(zeros).zeros_like();
    }
    return run_backward(
        plan, [&](size_t edge) { return static_cast<bool>(wanted.at(edge)); },
        [&](int src, size_t index) {
          if (src == TK_GRAD_FROM_GRAD) return c10::IValue(grads[index]);
          return args[1 + index + (src == TK_GRAD_FROM_OUTPUT ? np : 0)];
        });
  }
#endif

 private:
  c10::IValue argument(int src, size_t index, const variable_list& grads) {
    if (src == TK_GRAD_FROM_GRAD) return grads[index];
    if (src == TK_GRAD_FROM_OUTPUT) return saved_outputs[index].unpack(getptr());
    if (tk_op_param_kind(plan->op, static_cast<int>(index)) == 0 /* TK_P_TENSOR */)
      return none_params[index] ? c10::IValue() : c10::IValue(saved_params[index].unpack());
    return params[index];
  }
};

// Records the node of this call (the outputs are on the stack).
void record(const Plan& plan, std::vector<c10::IValue>&& inputs, torch::jit::Stack* stack) {
  auto node = NodeHolder<TkBackward>::make(&plan);
  std::vector<at::Tensor> edges;
  for (int p : plan.tensor_params)   // (an optional one passed as None: no edge)
    edges.push_back(inputs[static_cast<size_t>(p)].isTensor() ? inputs[static_cast<size_t>(p)].toTensor() : at::Tensor());
  node->set_next_edges(torch::autograd::collect_next_edges(edges));
  node->params.resize(inputs.size());
  node->saved_params.resize(inputs.size());
  node->none_params.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->none_params[i] = inputs[i].isNone();
    if (!plan.save_param[i]) continue;
    if (!inputs[i].isTensor()) {
      node->params[i] = inputs[i];
      continue;
    }
    // a tensor the backward ops take for its shape alone is saved as a
    // stride-0 view of one zero of its dtype and device: its memory is not
    // kept, and changing it in place before the backward is fine
    const at::Tensor& t = inputs[i].toTensor();
    const at::Tensor kept = plan.shape_only[i] ? at::zeros({}, t.options()).expand_symint(t.sym_sizes()) : t;
    node->saved_params[i] = SavedVariable(kept, false);
  }
  const size_t nout = plan.save_output.size();
  auto outs = torch::jit::last(*stack, nout);
  node->saved_outputs.resize(nout);
  for (size_t o = 0; o < nout; ++o) {
    // an output whose gradient no backward op takes (a state saved for the
    // backward, a second result) is not differentiable, as an int output:
    // it does not require grad, so no gradient sent into it is lost unseen
    const at::Tensor& out = outs[o].toTensor();
    const bool diff = at::isFloatingType(out.scalar_type()) && plan.takes_grad[o];
    node->differentiable.push_back(diff);
    if (diff) torch::autograd::set_history(out, node);
    else node->add_input_metadata(torch::autograd::Node::undefined_input());
  }
  // an output with history is saved as this node's output; an int or bool
  // one has none and is saved as a plain tensor (a backward op may read it:
  // the indices of an argmax)
  for (size_t o = 0; o < nout; ++o)
    if (plan.save_output[o])
      node->saved_outputs[o] = SavedVariable(outs[o].toTensor(), static_cast<bool>(node->differentiable[o]));
}

}  // namespace

// An op that updates 'mut' parameters in place (no backward ops: the
// checker refuses them): refused, with grad mode on, when an argument
// requires grad, which autograd could not follow; otherwise it goes on to
// its ADInplaceOrView kernel (boxed_in_place_view).
void run_in_place(const Plan& plan, const c10::OperatorHandle& handle, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, handle.schema().arguments().size());
  const char* needs_grad = first_requiring_grad(handle, args);
  TORCH_CHECK(needs_grad == nullptr, "tk.", plan.name, ": argument '", needs_grad, "' requires grad, and tk.",
              plan.name, " updates tensors in place, which autograd cannot follow (call it under torch.no_grad(), "
              "as an optimizer step runs)");
  at::AutoDispatchBelowAutograd guard;
  handle.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

void boxed_autograd(const c10::OperatorHandle& handle, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const Plan& plan = plan_of(handle);
  if (plan.in_place) return run_in_place(plan, handle, keys, stack);
  auto args = torch::jit::last(*stack, handle.schema().arguments().size());
  const char* needs_grad = first_requiring_grad(handle, args);
  for (const c10::IValue& v : args)
    TORCH_CHECK(!v.isTensor() || !torch::autograd::isFwGradDefined(v.toTensor()), "tk.", plan.name,
                ": forward-mode AD is not supported ",
                plan.backward.empty() ? "(and tk." + plan.name + " has no backward ops, so no reverse mode either)"
                                      : std::string("(its backward ops give reverse mode only)"));
  if (needs_grad == nullptr) return redispatch(handle, keys, stack);
  if (plan.backward.empty() && backward_of != nullptr) return once_differentiable(plan, handle, keys, stack);
  TORCH_CHECK(!plan.backward.empty(), "tk.", plan.name, ": argument '", needs_grad, "' requires grad but tk.",
              plan.name, " has no backward");
  // a float parameter no backward op computes the gradient of (a constant
  // table) is not differentiable: an input there that requires grad is an
  // error, not a gradient silently missing. One the op never reads (a
  // derived op's bias: its derivative is constant) has gradient zero: none
  TORCH_INTERNAL_ASSERT(args.size() == plan.has_grad.size());   // (schema arguments are the spec's parameters)
  for (size_t i = 0; i < args.size(); ++i)
    TORCH_CHECK(!args[i].isTensor() || !args[i].toTensor().requires_grad() || plan.has_grad[i] || !plan.read[i],
                "tk.", plan.name,
                ": argument '", handle.schema().arguments()[i].name(), "' requires grad but no backward op of tk.",
                plan.name, " computes grad_", handle.schema().arguments()[i].name(),
                " (pass it detached, or add a backward op that computes it)");
  std::vector<c10::IValue> inputs(args.begin(), args.end());
  redispatch(handle, keys, stack);
  record(plan, std::move(inputs), stack);
}

void boxed_in_place_view(const c10::OperatorHandle& handle, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const tk_op* op = op_of(handle);
  auto args = torch::jit::last(*stack, handle.schema().arguments().size());
  std::vector<at::Tensor> updated;
  for (size_t i = 0; i < args.size(); ++i)
    if (tk_op_param_mut(op, static_cast<int>(i))) updated.push_back(args[i].toTensor());
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    handle.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const at::Tensor& t : updated)   // (an inference tensor has no version counter)
    if (!t.is_inference()) torch::autograd::impl::bump_version(t);
}

}  // namespace tk_shim
