"""C++ source: the operator schemas of the `groupnorm_inline` namespace and their CPU kernels.

This translation unit is in every build (CUDA or not); it owns `TORCH_LIBRARY(groupnorm_inline, ...)`.
The CPU kernels (cpu_forward_kernels.py) are vectorised with at::vec and use every thread whatever the number
of (n, g) slices; statistics are shifted sums in the compute type folded into double and merged exactly.
"""

from .activation import ACTIVATION_HEADER
from .cpu_forward_kernels import CPU_FORWARD_KERNELS
from .message import MESSAGE_HEADER

# The torch.library namespace of the package's operators. Sources spell it GN_NAMESPACE, replaced by
# `with_namespace`, so an exported single-file submission can register the same kernels under another
# name in a process that has the package loaded too (a namespace can be defined only once).
OP_NAMESPACE = "groupnorm_inline"
NAMESPACE_TOKEN = "GN_NAMESPACE"


def with_namespace(source: str, namespace: str = OP_NAMESPACE) -> str:
    """`source` with its operators registered under `namespace`."""
    return source.replace(NAMESPACE_TOKEN, namespace)


# Operator schemas, kept in one place so the Python fake implementations can name them.
# `activation` is a gn_act::Kind code (0: none; see activations.py), act_alpha/act_beta its parameters:
# out = act(group_norm(input)). The forward checks its arguments as torch.nn.functional.group_norm does and
# takes any strides: NCHW-contiguous and channels-last contiguous (4-D NHWC, 5-D NDHWC) inputs are read in
# place and out has their layout; others are copied once into the layout ATen suggests (readable_input).
ACTIVATION_ARGS = "int activation=0, float act_alpha=0., float act_beta=0."
FORWARD_SCHEMA = ("group_norm_forward(Tensor input, int num_groups, Tensor? weight, Tensor? bias, float eps, "
                  + ACTIVATION_ARGS + ") -> (Tensor, Tensor, Tensor)")
# The forward's argument checks alone (check_forward_args below), on any device: for Python helpers that refuse
# what the forward would refuse, with the same words, without running it.
CHECK_ARGS_SCHEMA = "group_norm_check_args(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None) -> ()"
# Which launch plan the CUDA forward takes for an input (CUDA only; describes, launches nothing).
PLAN_SCHEMA = "group_norm_forward_plan(Tensor input, int num_groups, bool affine) -> str"
# The CUDA forward through a named plan (auto, small, resident, streamed[:key=value,...], fused, split):
# for tests that cover every plan on small inputs and for benchmarks that compare plans (CUDA only).
WITH_PLAN_SCHEMA = ("group_norm_forward_with_plan(Tensor input, int num_groups, Tensor? weight, Tensor? bias,"
                    " float eps, str plan, " + ACTIVATION_ARGS + ") -> (Tensor, Tensor, Tensor)")

# Host-side steps shared by the CPU and CUDA forwards (inline, so both translation units may hold a copy).
GROUP_NORM_FORWARD_SHARED = MESSAGE_HEADER + ACTIVATION_HEADER + r"""
#ifndef GN_INLINE_FORWARD_SHARED
#define GN_INLINE_FORWARD_SHARED
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gn_inline_forward {

// Dtype of the statistics and of the compute: double for double input, float otherwise.
inline at::ScalarType compute_type(const at::Tensor& input) {
  return input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The floating dtypes the kernels dispatch on. AT_DISPATCH's own error for others is formatted through a
// stream (see message.py), so the operators refuse them first with its words.
inline bool dispatched_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// weight and bias as the kernels take them: both or neither. A missing one of the pair is filled in (ones for
// the weight, zeros for the bias, in the other's dtype), so y = x_hat * w[c] + b[c] holds either way.
inline std::pair<std::optional<at::Tensor>, std::optional<at::Tensor>> affine_pair(
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  const bool has_w = weight.has_value() && weight->defined(), has_b = bias.has_value() && bias->defined();
  if (has_w == has_b) return {weight, bias};
  if (has_b) return {at::ones_like(*bias), bias};
  return {weight, at::zeros_like(*weight)};
}

// weight and bias as the kernels read them: (C,) contiguous in compute_type, or both undefined (no affine).
struct AffineParams {
  at::Tensor w, b;
  bool affine() const { return w.defined(); }
};

// The parameters of a checked call (check_forward_args) as the kernels read them, a missing one of a pair filled
// in (affine_pair). keep_param_dtype: parameters of the input's own dtype stay in it (kernels that convert as
// they read); anything else is converted to the compute type here.
inline AffineParams affine_params(const at::Tensor& input, const std::optional<at::Tensor>& weight_arg,
                                  const std::optional<at::Tensor>& bias_arg, bool keep_param_dtype = false) {
  AffineParams p;
  const auto [weight, bias] = affine_pair(weight_arg, bias_arg);
  if (!(weight.has_value() && weight->defined())) return p;
  const bool keep = keep_param_dtype && weight->scalar_type() == input.scalar_type() &&
                    bias->scalar_type() == input.scalar_type();
  const at::ScalarType target = keep ? input.scalar_type() : compute_type(input);
  // (No dispatched call when the parameter is already what the kernels read: each costs ~1 us per call.)
  auto as_target = [&](const at::Tensor& t) {
    return t.scalar_type() == target && t.is_contiguous() ? t : t.to(target).contiguous();
  };
  p.w = as_target(*weight);
  p.b = as_target(*bias);
  return p;
}

// The channels-last format of an input of this rank (ChannelsLast / ChannelsLast3d), or Contiguous.
inline at::MemoryFormat channels_last_format(const at::Tensor& input) {
  return input.dim() == 4 ? at::MemoryFormat::ChannelsLast
                          : (input.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::Contiguous);
}

// Whether the kernels read `input` as channels-last (NHWC / NDHWC: the channel is the fastest dim). A tensor
// that is contiguous in both layouts (C == 1, or one spatial element) is read as NCHW.
inline bool is_channels_last(const at::Tensor& input) {
  const at::MemoryFormat cl = channels_last_format(input);
  return cl != at::MemoryFormat::Contiguous && !input.is_contiguous() && input.is_contiguous(cl);
}

// The activation arguments of an operator, checked.
inline gn_act::Params activation_params(int64_t activation, double alpha, double beta, const char* op) {
  TORCH_CHECK(activation >= 0 && activation < gn_act::kNumKinds,
              gn_inline_msg::cat(op, ": unknown activation code ", activation, " (expected 0 to ",
                                 gn_act::kNumKinds - 1, ")"));
  gn_act::Params p;
  p.kind = static_cast<int>(activation);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

// Python's name of a dtype ("torch.float32"), for the messages that repeat PyTorch's Python-side words.
inline std::string python_dtype(at::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

// A weight or bias of `name` beside `input` (C channels): torch.nn.functional.group_norm's and ATen's words for
// the shape and the device; the dtypes the kernels take (the input's, or float32 beside a half input).
inline void check_param(const at::Tensor& param, const char* name, const at::Tensor& input, int64_t C) {
  TORCH_CHECK(param.dim() == 1 && param.numel() == C,
              gn_inline_msg::cat("Expected ", name, " to be a vector of size equal to the number of channels in "
                                 "input, but got ", name, " of shape ", gn_inline_msg::shape(param.sizes()),
                                 " and input of shape ", gn_inline_msg::shape(input.sizes())));
  TORCH_CHECK(param.device() == input.device(),
              gn_inline_msg::cat("Expected all tensors to be on the same device, but found at least two devices, ",
                                 input.device().str(), " (input) and ", param.device().str(), " (", name, ")!"));
  const at::ScalarType dtype = input.scalar_type(), got = param.scalar_type();
  const bool half = dtype == at::kHalf || dtype == at::kBFloat16;
  TORCH_CHECK(got == dtype || (half && got == at::kFloat),
              gn_inline_msg::cat("group_norm: expected ", name, " to have dtype ", python_dtype(dtype),
                                 half ? " or torch.float32" : "", " for an input of dtype ", python_dtype(dtype),
                                 ", but got ", python_dtype(got)));
}

// Everything torch.nn.functional.group_norm (and the ATen kernels below it) refuses, with their words and
// exception types, in the order they check; then what only this package refuses: a non-floating input
// (TypeError; PyTorch fails inside its kernel dispatch), parameters of another dtype, devices other than the
// CPU and CUDA. Every forward entry runs it first (the autograd kernel, and the CPU and CUDA kernels for calls
// that skip autograd): a few tens of nanoseconds, against the ~1 us the same checks took in Python.
inline void check_forward_args(const at::Tensor& input, int64_t num_groups, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias) {
  const int64_t dim = input.dim();
  TORCH_CHECK(dim >= 2, gn_inline_msg::cat("Expected at least 2 dimensions for input tensor but received ", dim));
  TORCH_CHECK_TYPE(dispatched_type(input.scalar_type()),
                   gn_inline_msg::cat("group_norm: expected a floating-point input (float16, bfloat16, float32 or "
                                      "float64), but got ", python_dtype(input.scalar_type())));
  TORCH_CHECK(num_groups > 0, gn_inline_msg::cat("Expected num groups to be greater than 0, got ", num_groups));
  const int64_t N = input.size(0), C = input.size(1);
  TORCH_CHECK(C > 0, gn_inline_msg::cat("Expected number of channels to be greater than 0, got ", C));
  TORCH_CHECK(C % num_groups == 0,
              gn_inline_msg::cat("Expected number of channels in input to be divisible by num_groups, but got input "
                                 "of shape ", gn_inline_msg::shape(input.sizes()), " and num_groups=", num_groups));
  int64_t HW = 1;
  for (int64_t d = 2; d < dim; ++d) HW *= input.size(d);
  TORCH_CHECK(HW > 0, "Expected HxW to be greater than 0, got 0");
  if (N * (C / num_groups) * HW == 1) {
    // F.group_norm's own check (_verify_batch_size): one value per group cannot be normalised.
    std::vector<int64_t> size{N * C / num_groups, num_groups};
    for (int64_t d = 2; d < dim; ++d) size.push_back(input.size(d));
    TORCH_CHECK_VALUE(false, gn_inline_msg::cat("Expected more than 1 value per channel when training, got input "
                                                "size ", gn_inline_msg::shape(size)));
  }
  if (weight.has_value() && weight->defined()) check_param(*weight, "weight", input, C);
  if (bias.has_value() && bias->defined()) check_param(*bias, "bias", input, C);
  TORCH_CHECK(input.is_cpu() || input.is_cuda(),
              gn_inline_msg::cat("group_norm: inputs on ", c10::DeviceTypeName(input.device().type(), true),
                                 " are not supported (CPU and CUDA only)"));
}

// `input` as the kernels read it: NCHW-contiguous or channels-last contiguous (4-D NHWC, 5-D NDHWC) tensors
// as they are; any other strides copied once into the layout ATen suggests for them, the layout PyTorch's CPU
// GroupNorm gives its output (sliced channels-last views stay channels-last). The caller's tensor is never
// written.
inline at::Tensor readable_input(const at::Tensor& input) {
  if (input.is_contiguous() || is_channels_last(input)) return input;
  return input.contiguous(input.suggest_memory_format());
}

// One forward call with its outputs allocated (the caller has run check_forward_args): x, the input as the
// kernels read it (NCHW- or channels-last contiguous, see readable_input) with HW spatial elements per
// channel; y like x (same layout; contiguous when empty, as PyTorch's), mean and rstd (N, num_groups) in
// compute_type. When `empty`, the outputs are final (and `params` not read). `op` names the operator;
// keep_param_dtype as in affine_params.
struct ForwardCall {
  at::Tensor x, y, mean, rstd;
  AffineParams params;
  gn_act::Params act;
  int64_t N = 0, C = 0, HW = 0;
  bool empty = false;
  bool channels_last = false;
};

inline ForwardCall prepare_forward(const at::Tensor& input, int64_t num_groups, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias, int64_t activation, double act_alpha,
                                   double act_beta, const char* op, bool keep_param_dtype = false) {
  ForwardCall call;
  call.act = activation_params(activation, act_alpha, act_beta, op);
  call.x = readable_input(input);
  call.channels_last = is_channels_last(call.x);
  call.N = input.size(0);
  call.C = input.size(1);
  const at::ScalarType acc = compute_type(input);
  call.empty = input.numel() == 0;
  // An empty tensor counts as contiguous whatever its strides: its output gets PyTorch's (contiguous) ones.
  call.y = call.empty ? at::empty(input.sizes(), input.options()) : at::empty_like(call.x);
  call.mean = at::empty({call.N, num_groups}, input.options().dtype(acc));
  call.rstd = at::empty({call.N, num_groups}, input.options().dtype(acc));
  if (call.empty) return call;
  call.HW = input.numel() / (call.N * call.C);
  call.params = affine_params(call.x, weight, bias, keep_param_dtype);
  return call;
}

}  // namespace gn_inline_forward
#endif  // GN_INLINE_FORWARD_SHARED
"""

# The CPU operator (kernels: cpu_forward_kernels.py) plus the TORCH_LIBRARY block that defines every schema of
# the namespace.
GROUP_NORM_CPU_TEMPLATE = GROUP_NORM_FORWARD_SHARED + CPU_FORWARD_KERNELS + (r"""
#include <ATen/Dispatch.h>
#include <torch/library.h>

namespace gn_inline_cpu {

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_forward_cpu(const at::Tensor& input_arg,
                                                                      int64_t num_groups,
                                                                      const std::optional<at::Tensor>& weight,
                                                                      const std::optional<at::Tensor>& bias,
                                                                      double eps, int64_t activation,
                                                                      double act_alpha, double act_beta) {
  gn_inline_forward::check_forward_args(input_arg, num_groups, weight, bias);
  TORCH_CHECK(input_arg.device().is_cpu(), "group_norm_forward_cpu: expected a CPU input");
  gn_inline_forward::ForwardCall call = gn_inline_forward::prepare_forward(
      input_arg, num_groups, weight, bias, activation, act_alpha, act_beta, "group_norm_forward_cpu",
      /*keep_param_dtype=*/true);  // half parameters are widened below, without a dispatched call
  const at::Tensor& input = call.x;
  at::Tensor &y = call.y, &mean = call.mean, &rstd = call.rstd;
  if (call.empty) return {y, mean, rstd};
  const int64_t N = call.N, C = call.C, HW = call.HW;
  const at::Tensor &w = call.params.w, &b = call.params.b;
  // A channels-last input is read in place and y (empty_like) has its layout: no copies either way.
  gn_cpu::advise_huge_pages(y.mutable_data_ptr(), static_cast<int64_t>(y.nbytes()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_forward_cpu", [&] {
    using C_t = gn_cpu::compute_t<scalar_t>;
    const scalar_t* xp = input.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    const C_t *wp, *bp;  // (null without affine)
    std::tie(wp, bp) = gn_cpu::param_values<scalar_t>(w, b);
    C_t* mp = mean.mutable_data_ptr<C_t>();
    C_t* rp = rstd.mutable_data_ptr<C_t>();
    gn_cpu::with_epilogue(call.act, [&](const auto& ep) {
      if (call.channels_last) {
        gn_cpu::forward_channels_last<scalar_t>(xp, yp, wp, bp, mp, rp, N, num_groups, C, HW, eps, ep);
      } else {
        gn_cpu::forward_nchw<scalar_t>(xp, yp, wp, bp, mp, rp, N, num_groups, C / num_groups, HW, eps, ep);
      }
    });
  });
  return {y, mean, rstd};
}

void group_norm_check_args(const at::Tensor& input, int64_t num_groups, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias) {
  gn_inline_forward::check_forward_args(input, num_groups, weight, bias);
}

}  // namespace gn_inline_cpu

TORCH_LIBRARY(GN_NAMESPACE, m) {
  m.def("@FORWARD_SCHEMA@");
  // Defined with its kernel: a CompositeImplicitAutograd one, which every device (meta and fake tensors
  // included) runs as it is.
  m.def("@CHECK_ARGS_SCHEMA@", &gn_inline_cpu::group_norm_check_args);
  m.def("@PLAN_SCHEMA@");
  m.def("@WITH_PLAN_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CPU, m) {
  m.impl("group_norm_forward", &gn_inline_cpu::group_norm_forward_cpu);
}
""".replace("@FORWARD_SCHEMA@", FORWARD_SCHEMA).replace("@PLAN_SCHEMA@", PLAN_SCHEMA)
                           .replace("@CHECK_ARGS_SCHEMA@", CHECK_ARGS_SCHEMA)
                           .replace("@WITH_PLAN_SCHEMA@", WITH_PLAN_SCHEMA))
