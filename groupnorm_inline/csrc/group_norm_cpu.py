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
# out = act(group_norm(input)). The input is NCHW-contiguous or channels-last contiguous (4-D NHWC, 5-D
# NDHWC); out has the input's layout.
ACTIVATION_ARGS = "int activation=0, float act_alpha=0., float act_beta=0."
FORWARD_SCHEMA = ("group_norm_forward(Tensor input, int num_groups, Tensor? weight, Tensor? bias, float eps, "
                  + ACTIVATION_ARGS + ") -> (Tensor, Tensor, Tensor)")
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
#include <c10/util/Exception.h>
#include <optional>

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

// weight and bias as the kernels read them: (C,) contiguous in compute_type, or both undefined (no affine).
// `op` names the operator in the messages.
struct AffineParams {
  at::Tensor w, b;
  bool affine() const { return w.defined(); }
};

inline AffineParams affine_params(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& bias, const char* op,
                                  bool keep_param_dtype = false) {
  AffineParams p;
  if (!(weight.has_value() && weight->defined())) return p;
  TORCH_CHECK(bias.has_value() && bias->defined(), gn_inline_msg::cat(op, ": weight and bias come together"));
  // keep_param_dtype: parameters of the input's own dtype stay in it (kernels that convert as they read);
  // anything else is converted to the compute type here.
  const bool keep = keep_param_dtype && weight->scalar_type() == input.scalar_type() &&
                    bias->scalar_type() == input.scalar_type();
  const at::ScalarType target = keep ? input.scalar_type() : compute_type(input);
  // (No dispatched call when the parameter is already what the kernels read: each costs ~1 us per call.)
  auto as_target = [&](const at::Tensor& t) {
    return t.scalar_type() == target && t.is_contiguous() ? t : t.to(target).contiguous();
  };
  p.w = as_target(*weight);
  p.b = as_target(*bias);
  TORCH_CHECK(p.w.numel() == input.size(1) && p.b.numel() == input.size(1),
              gn_inline_msg::cat(op, ": weight/bias must have C elements"));
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

// One forward call, checked and with its outputs allocated: input (N, C, *) NCHW- or channels-last contiguous
// with HW spatial elements per channel; y like the input (same layout), mean and rstd (N, num_groups) in
// compute_type. When `empty`, the outputs are final (and `params` not read). `op` names the operator;
// keep_param_dtype as in affine_params.
struct ForwardCall {
  at::Tensor y, mean, rstd;
  AffineParams params;
  gn_act::Params act;
  int64_t N = 0, C = 0, HW = 0;
  bool empty = false;
  bool channels_last = false;
};

inline ForwardCall prepare_forward(const at::Tensor& input, int64_t num_groups, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias, int64_t activation, double act_alpha,
                                   double act_beta, const char* op, bool keep_param_dtype = false) {
  TORCH_CHECK(input.dim() >= 2,
              gn_inline_msg::cat("Expected at least 2 dimensions for input tensor but received ", input.dim()));
  TORCH_CHECK(input.is_contiguous() || is_channels_last(input),
              gn_inline_msg::cat(op, ": expected a contiguous or channels-last contiguous input"));
  TORCH_CHECK(num_groups > 0 && input.size(1) % num_groups == 0,
              gn_inline_msg::cat("Expected number of channels in input to be divisible by num_groups, but got input "
                                 "of shape ", gn_inline_msg::shape(input.sizes()), " and num_groups=", num_groups));
  TORCH_CHECK_NOT_IMPLEMENTED(dispatched_type(input.scalar_type()),
                              gn_inline_msg::not_implemented_for(op, input.scalar_type()));
  ForwardCall call;
  call.act = activation_params(activation, act_alpha, act_beta, op);
  call.channels_last = is_channels_last(input);
  call.N = input.size(0);
  call.C = input.size(1);
  const at::ScalarType acc = compute_type(input);
  call.y = at::empty_like(input);
  call.mean = at::empty({call.N, num_groups}, input.options().dtype(acc));
  call.rstd = at::empty({call.N, num_groups}, input.options().dtype(acc));
  call.empty = input.numel() == 0;
  if (call.empty) return call;
  call.HW = input.numel() / (call.N * call.C);
  call.params = affine_params(input, weight, bias, op, keep_param_dtype);
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_forward_cpu(const at::Tensor& input, int64_t num_groups,
                                                                      const std::optional<at::Tensor>& weight,
                                                                      const std::optional<at::Tensor>& bias,
                                                                      double eps, int64_t activation,
                                                                      double act_alpha, double act_beta) {
  TORCH_CHECK(input.device().is_cpu(), "group_norm_forward_cpu: expected a CPU input");
  gn_inline_forward::ForwardCall call = gn_inline_forward::prepare_forward(
      input, num_groups, weight, bias, activation, act_alpha, act_beta, "group_norm_forward_cpu");
  at::Tensor &y = call.y, &mean = call.mean, &rstd = call.rstd;
  if (call.empty) return {y, mean, rstd};
  const int64_t N = call.N, C = call.C, HW = call.HW;
  const bool affine = call.params.affine();
  const at::Tensor &w = call.params.w, &b = call.params.b;
  // A channels-last input is read in place and y (empty_like) has its layout: no copies either way.
  gn_cpu::advise_huge_pages(y.mutable_data_ptr(), static_cast<int64_t>(y.nbytes()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_forward_cpu", [&] {
    using C_t = gn_cpu::compute_t<scalar_t>;
    const scalar_t* xp = input.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    const C_t* wp = affine ? w.const_data_ptr<C_t>() : nullptr;
    const C_t* bp = affine ? b.const_data_ptr<C_t>() : nullptr;
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

}  // namespace gn_inline_cpu

TORCH_LIBRARY(GN_NAMESPACE, m) {
  m.def("@FORWARD_SCHEMA@");
  m.def("@PLAN_SCHEMA@");
  m.def("@WITH_PLAN_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CPU, m) {
  m.impl("group_norm_forward", &gn_inline_cpu::group_norm_forward_cpu);
}
""".replace("@FORWARD_SCHEMA@", FORWARD_SCHEMA).replace("@PLAN_SCHEMA@", PLAN_SCHEMA)
                           .replace("@WITH_PLAN_SCHEMA@", WITH_PLAN_SCHEMA))
