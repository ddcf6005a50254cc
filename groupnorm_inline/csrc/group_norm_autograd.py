"""C++ source: autograd of `group_norm_forward`, registered at the Autograd dispatch key.

A `torch::autograd::Function` instead of `torch.library.register_autograd`: the Python route builds an
autograd.Function, runs `setup_context` and a Python backward for every call, which costs several times
the host time of `torch.nn.GroupNorm` at small shapes. Here:

  forward   the operator below the autograd layer; saves input, weight, mean, rstd. The graph node has
            one output, out; mean and rstd are handed back beside it and carry no gradient. With grad
            mode off, or no tensor argument requiring grad, no graph node is made at all.
  backward  grad mode off (a plain backward): `group_norm_backward` below the autograd layer, with the
            output_mask the graph asks for. A CPU input with sigmoid or tanh fused also saves out, and its
            backward forms dz = dy * act'(z) from it as PyTorch's own autograd does (sigmoid_backward:
            y (1 - y); tanh_backward: 1 - y^2), then runs the plain GroupNorm backward on dz: the fused
            backward's derivative evaluates exp or tanh per element, and on the CPU that arithmetic, not
            the extra pass over memory, set its time (derivative_from_output). The CUDA kernels are
            bound by memory, where recomputing z beats reading out: they keep the fused backward.
            Grad mode on (create_graph=True): the gradients must be
            differentiable in the input, whose statistics mean/rstd were saved as constants, so
            `group_norm_differentiable_backward` is called instead; its schema is defined here and its
            implementation (PyTorch ops, statistics recomputed differentiably) is registered from Python
            as CompositeImplicitAutograd (registration.py). A build loaded without the package's Python
            (an exported single file) has no such implementation: double backward then raises the
            dispatcher's "could not run" error, a plain backward works.
  grad_bias is cast to the bias's dtype when it differs from the weight's (a float32 bias beside a half
  weight, or the reverse): the kernels give both parameter gradients the weight's dtype.

Under torch.compile, AOTAutograd traces this kernel like any other: the forward graph records
group_norm_forward and the backward graph group_norm_backward (grad mode is off while it traces). Compiled
autograd, over a graph recorded eagerly, calls the node's backward as one opaque function.
Concatenated with the other C++ sources into one translation unit; the namespace is defined in
group_norm_cpu.py, so this source adds its schema with TORCH_LIBRARY_FRAGMENT.
"""

from .activation import ACTIVATION_HEADER
from .group_norm_cpu import GROUP_NORM_FORWARD_SHARED

# The double-backward formula: (grad_input, grad_weight, grad_bias) in the dtypes of input and weight (the
# input's when there is no weight), differentiable in grad_out, input and weight.
DIFFERENTIABLE_BACKWARD_SCHEMA = ("group_norm_differentiable_backward(Tensor grad_out, Tensor input, Tensor? weight,"
                                  " int num_groups, float eps, Tensor? bias=None, int activation=0,"
                                  " float act_alpha=0., float act_beta=0.) -> (Tensor, Tensor, Tensor)")

GROUP_NORM_AUTOGRAD_TEMPLATE = ACTIVATION_HEADER + GROUP_NORM_FORWARD_SHARED + r"""
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/tanh_backward.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <array>
#include <optional>
#include <tuple>

namespace gn_inline_autograd {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using TensorTriple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// C++ signatures of the three operators (their schemas: group_norm_cpu.py, group_norm_backward_cpu.py, above).
using ForwardSignature = TensorTriple(const at::Tensor& input, int64_t num_groups,
                                      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                                      double eps, int64_t activation, double act_alpha, double act_beta);
using BackwardSignature = TensorTriple(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                       const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                       int64_t num_groups, std::array<bool, 3> output_mask,
                                       const std::optional<at::Tensor>& bias, int64_t activation, double act_alpha,
                                       double act_beta);
using DifferentiableBackwardSignature = TensorTriple(const at::Tensor& grad_out, const at::Tensor& input,
                                                     const std::optional<at::Tensor>& weight, int64_t num_groups,
                                                     double eps, const std::optional<at::Tensor>& bias,
                                                     int64_t activation, double act_alpha, double act_beta);

// Operator handles, looked up once (the first call), then called through the dispatcher.
const c10::TypedOperatorHandle<ForwardSignature>& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("GN_NAMESPACE::group_norm_forward", "")
                             .typed<ForwardSignature>();
  return op;
}

const c10::TypedOperatorHandle<BackwardSignature>& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("GN_NAMESPACE::group_norm_backward", "")
                             .typed<BackwardSignature>();
  return op;
}

const c10::TypedOperatorHandle<DifferentiableBackwardSignature>& differentiable_backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("GN_NAMESPACE::group_norm_differentiable_backward", "")
                             .typed<DifferentiableBackwardSignature>();
  return op;
}

inline bool present(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// The forward's statistics, handed back beside the graph node's one output (see forward).
struct Statistics {
  at::Tensor mean, rstd;  // (N, G) each, float32 (float64 for float64 input)
};

// Whether the backward takes the activation's derivative from the saved output (see the header): CPU input,
// sigmoid or tanh. Their derivatives from z cost an exp or a rational tanh per element, which on the CPU set the
// fused backward's time: 2-core AVX-512 machine, 2 threads, autograd.grad of (x, w, b) against PyTorch's
// GroupNorm then the activation, fused -> from the output: (8,64,32,32) G32 float32 sigmoid 1.21x -> 0.79x, tanh
// 1.02-1.05x -> 0.77-0.85x, (2,320,32,32) sigmoid 1.23x -> 0.86x, (1,128,128,128) bfloat16 sigmoid 1.21x -> 0.76x,
// (64,64,4,4) tanh 1.09-1.12x -> 0.92-0.94x. The other activations' derivatives are a compare or cheaper than
// the extra pass (ReLU, hardtanh, leaky ReLU), or need z itself (SiLU, GELU, Mish, hardswish).
inline bool derivative_from_output(const at::Tensor& input, int64_t activation) {
  return input.device().is_cpu() && (activation == gn_act::kSigmoid || activation == gn_act::kTanh);
}

struct GroupNormForward : public torch::autograd::Function<GroupNormForward> {
  // input: (N, C, *) as the kernels read it (readable_input); weight, bias: (C,) both or neither. Returns
  // out (N, C, *), the node's only output; mean and rstd go to *stats. Made with grad mode off, they carry no
  // gradient, as non-differentiable outputs would; but a C++ Function that marks outputs non-differentiable
  // cannot run under compiled autograd (torch._dynamo.compiled_autograd asserts the context holds no such
  // marks), so they are not outputs.
  // activation, act_alpha, act_beta: the fused activation (0: none). With one, the bias is saved as well: the
  // backward recomputes the activation's input from input, statistics, weight and bias.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t num_groups,
                            const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                            double eps, int64_t activation, double act_alpha, double act_beta, Statistics* stats) {
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(out, stats->mean, stats->rstd) =
          forward_op().call(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta);
    }
    ctx->saved_data.reserve(6);
    ctx->saved_data["num_groups"] = num_groups;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["act_alpha"] = act_alpha;
    ctx->saved_data["act_beta"] = act_beta;
    // Undefined when there is no bias. A bias whose dtype differs from the weight's gets its gradient cast.
    ctx->saved_data["bias_dtype"] =
        static_cast<int64_t>(present(bias) ? bias->scalar_type() : at::ScalarType::Undefined);
    ctx->save_for_backward({input, present(weight) ? *weight : at::Tensor(), stats->mean, stats->rstd,
                            activation != 0 && present(bias) ? *bias : at::Tensor(),
                            derivative_from_output(input, activation) ? out : at::Tensor()});
    // An undefined incoming gradient stays undefined (no zeros made for it unless a gradient is asked for).
    ctx->set_materialize_grads(false);
    return out;
  }

  // grads: {grad_out}; returns one entry per forward argument (input, num_groups, weight, bias, eps, activation,
  // act_alpha, act_beta, stats),
  // undefined where no gradient is asked for or the argument is not a tensor.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const std::optional<at::Tensor> weight =
        saved[1].defined() ? std::optional<at::Tensor>(saved[1]) : std::nullopt;
    const at::Tensor& mean = saved[2];
    const at::Tensor& rstd = saved[3];
    const int64_t num_groups = ctx->saved_data["num_groups"].toInt();
    const auto bias_dtype = static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    const bool has_bias = bias_dtype != at::ScalarType::Undefined;
    const std::optional<at::Tensor> saved_bias =
        saved[4].defined() ? std::optional<at::Tensor>(saved[4]) : std::nullopt;
    const int64_t activation = ctx->saved_data["activation"].toInt();
    const double act_alpha = ctx->saved_data["act_alpha"].toDouble();
    const double act_beta = ctx->saved_data["act_beta"].toDouble();

    // The graph's input edges hold only the tensor arguments that were present: input, weight?, bias?.
    size_t edge = 0;
    const bool need_input = ctx->needs_input_grad(edge++);
    const bool need_weight = weight.has_value() && ctx->needs_input_grad(edge++);
    const bool need_bias = has_bias && ctx->needs_input_grad(edge);
    variable_list result(9);
    if (!need_input && !need_weight && !need_bias) return result;

    // An output gradient autograd left undefined counts as zeros (as materialised gradients would).
    const at::Tensor grad_out = grads[0].defined() ? grads[0] : at::zeros_like(input);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (at::GradMode::is_enabled()) {
      std::tie(grad_input, grad_weight, grad_bias) = differentiable_backward_op().call(
          grad_out, input, weight, num_groups, ctx->saved_data["eps"].toDouble(), saved_bias, activation, act_alpha,
          act_beta);
    } else if (saved[5].defined()) {
      // dz from the saved output (derivative_from_output), then the plain GroupNorm backward of dz.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      const at::Tensor grad_z = activation == gn_act::kSigmoid ? at::sigmoid_backward(grad_out, saved[5])
                                                               : at::tanh_backward(grad_out, saved[5]);
      std::tie(grad_input, grad_weight, grad_bias) =
          backward_op().call(grad_z, input, mean, rstd, weight, num_groups, {need_input, need_weight, need_bias},
                             std::nullopt, gn_act::kNone, 0.0, 0.0);
    } else {
      // Nothing to record: skip the operator's own autograd kernel (its double backward).
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(grad_input, grad_weight, grad_bias) =
          backward_op().call(grad_out, input, mean, rstd, weight, num_groups, {need_input, need_weight, need_bias},
                             saved_bias, activation, act_alpha, act_beta);
    }
    if (need_bias && grad_bias.scalar_type() != bias_dtype) grad_bias = grad_bias.to(bias_dtype);
    if (need_input) result[0] = grad_input;
    if (need_weight) result[2] = grad_weight;
    if (need_bias) result[3] = grad_bias;
    return result;
  }
};

inline bool requires_grad(const std::optional<at::Tensor>& t) { return present(t) && t->requires_grad(); }

// The Autograd kernel of group_norm_forward. Without anything to record (inference, no_grad, no tensor
// requiring grad) the operator is called straight below the autograd layer: no graph node, no saved tensors.
// The arguments are checked here, ahead of any graph node (the kernels check them again, for the calls that
// skip this layer: inference mode). An input of other strides is copied here into the layout the kernels
// read (readable_input), so the node saves that copy and the copy's own graph node takes the gradient back
// to the caller's tensor; a missing weight or bias beside a present one is filled in (affine_pair), so the
// parameter gradients keep the present one's dtype.
TensorTriple group_norm_forward_autograd(const at::Tensor& input_arg, int64_t num_groups,
                                         const std::optional<at::Tensor>& weight_arg,
                                         const std::optional<at::Tensor>& bias_arg, double eps, int64_t activation,
                                         double act_alpha, double act_beta) {
  // Traced with symbolic shapes (torch.compile, dynamic=True): the sizes cannot be read, and the fake kernel
  // (registration.py) gives the output the same layout; the compiled graph's call checks them at run time.
  const bool symbolic = input_arg.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
  if (!symbolic) gn_inline_forward::check_forward_args(input_arg, num_groups, weight_arg, bias_arg);
  const at::Tensor input = symbolic ? input_arg : gn_inline_forward::readable_input(input_arg);
  if (!at::GradMode::is_enabled() ||
      !(input.requires_grad() || requires_grad(weight_arg) || requires_grad(bias_arg))) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_op().call(input, num_groups, weight_arg, bias_arg, eps, activation, act_alpha, act_beta);
  }
  const auto [weight, bias] = gn_inline_forward::affine_pair(weight_arg, bias_arg);
  Statistics stats;
  at::Tensor out =
      GroupNormForward::apply(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta, &stats);
  return {out, stats.mean, stats.rstd};
}

}  // namespace gn_inline_autograd

TORCH_LIBRARY_FRAGMENT(GN_NAMESPACE, m) {
  m.def("@DIFFERENTIABLE_BACKWARD_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, Autograd, m) {
  m.impl("group_norm_forward", &gn_inline_autograd::group_norm_forward_autograd);
}
""".replace("@DIFFERENTIABLE_BACKWARD_SCHEMA@", DIFFERENTIABLE_BACKWARD_SCHEMA)
