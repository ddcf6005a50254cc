"""C++ source: the `group_norm_backward` operator schema and its CPU kernel.

Gradients of y = (x - mean) * rstd * w[c] + b[c] over each (n, g) slice of D = (C / G) * HW elements,
with the statistics the forward saved (never recomputed). Per (n, c) row of HW elements, with m the
saved mean of the row's slice:

    ds[n, c] = sum_hw dy * (x - m),    db[n, c] = sum_hw dy,    dm[n, c] = sum_hw (x - m)

Sums about the saved mean do not cancel when |mean| >> std. The saved mean is rounded to float32 for
float32/half inputs, off by up to half an ulp of |mean|: at |mean| = 1e4 std that is 5e-4 std, and the
gradients would inherit it; delta = sum_c dm / D is that rounding, measured on the same pass, so the
exact slice mean m + delta is used at no extra traffic. Per (n, g), over the group's channels:

    S = sum_c w[c] (ds[n, c] - delta db[n, c]),   B = sum_c w[c] db[n, c]
    dx = rstd * w[c] * dy  +  coef_x * (x - m)  +  coef_1,
    coef_x = -rstd^3 * S / D,   coef_1 = -rstd * B / D - coef_x * delta
    dw[c]  = sum_n (ds[n, c] - delta db[n, c]) * rstd[n, g],      db_param[c] = sum_n db[n, c]

The CPU kernel favours exactness over speed: every sum in double, one `at::parallel_for` task per slice,
the slice mean refined in a separate first pass (same result as the formulas above).
Outputs not asked for by `output_mask` come back as empty tensors of shape (0,).

This source is concatenated with the forward's C++ source into one translation unit; the namespace
itself is defined there (TORCH_LIBRARY), so this one adds its schema with TORCH_LIBRARY_FRAGMENT.
"""

from .activation import ACTIVATION_HEADER
from .message import MESSAGE_HEADER

# With an activation (a gn_act::Kind code, see activations.py), grad_out is the gradient of act(z), z the
# normalised and affine-transformed input: the kernels recompute z from input, mean, rstd, weight and bias
# and use dz = grad_out * act'(z) in place of grad_out. input and grad_out are NCHW-contiguous or
# channels-last contiguous, both in the same layout; grad_input comes back in that layout.
BACKWARD_SCHEMA = ("group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, "
                   "int num_groups, bool[3] output_mask, Tensor? bias=None, int activation=0, float act_alpha=0., "
                   "float act_beta=0.) -> (Tensor, Tensor, Tensor)")

# Argument checks shared by the CPU and CUDA kernels (inline, so both translation units may hold a copy),
# then the CPU kernel. GN_NAMESPACE is replaced by `group_norm_cpu.with_namespace`.
GROUP_NORM_BACKWARD_CHECKS = MESSAGE_HEADER + ACTIVATION_HEADER + r"""
#ifndef GN_INLINE_BACKWARD_CHECKS
#define GN_INLINE_BACKWARD_CHECKS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <array>
#include <optional>

namespace gn_inline_backward {

// Dtype of the saved statistics and of the compute: double for double input, float otherwise.
inline at::ScalarType stats_type(at::ScalarType input) {
  return input == at::kDouble ? at::kDouble : at::kFloat;
}

// Dtype of grad_weight / grad_bias: the weight's, or the input's when there is no weight.
inline at::ScalarType param_grad_type(const at::Tensor& input, const std::optional<at::Tensor>& weight) {
  return (weight.has_value() && weight->defined()) ? weight->scalar_type() : input.scalar_type();
}

// The dtypes the kernels dispatch on. AT_DISPATCH's own error for others is formatted through a stream (see
// message.py), so the operators refuse them first with its words (gn_inline_msg::not_implemented_for).
inline bool dispatched_type(at::ScalarType type) {
  return type == at::kFloat || type == at::kDouble || type == at::kHalf || type == at::kBFloat16;
}

// Raises, naming the argument, for anything the backward kernels cannot take.
inline void check_backward_args(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                int64_t num_groups, const std::optional<at::Tensor>& bias = std::nullopt) {
  TORCH_CHECK(input.dim() >= 2,
              gn_inline_msg::cat("group_norm_backward: expected input with at least 2 dimensions, got ", input.dim()));
  TORCH_CHECK(num_groups > 0, gn_inline_msg::cat("group_norm_backward: expected num_groups > 0, got ", num_groups));
  const int64_t N = input.size(0), C = input.size(1);
  TORCH_CHECK(C % num_groups == 0, gn_inline_msg::cat("group_norm_backward: the number of channels ", C,
                                                      " is not divisible by num_groups=", num_groups));
  TORCH_CHECK(grad_out.sizes() == input.sizes(),
              gn_inline_msg::cat("group_norm_backward: expected grad_out of shape ",
                                 gn_inline_msg::shape(input.sizes()), " (the input's), but got ",
                                 gn_inline_msg::shape(grad_out.sizes())));
  TORCH_CHECK(grad_out.scalar_type() == input.scalar_type(),
              gn_inline_msg::cat("group_norm_backward: expected grad_out of dtype ",
                                 gn_inline_msg::dtype_name(input.scalar_type()), " (the input's), but got ",
                                 gn_inline_msg::dtype_name(grad_out.scalar_type())));
  TORCH_CHECK(grad_out.device() == input.device(),
              gn_inline_msg::cat("group_norm_backward: expected grad_out on ", input.device().str(),
                                 " (the input's device), but got ", grad_out.device().str()));
  const at::ScalarType acc = stats_type(input.scalar_type());
  for (const at::Tensor* stat : {&mean, &rstd}) {
    const char* name = stat == &mean ? "mean" : "rstd";
    TORCH_CHECK(stat->dim() == 2 && stat->size(0) == N && stat->size(1) == num_groups,
                gn_inline_msg::cat("group_norm_backward: expected ", name, " of shape [", N, ", ", num_groups,
                                   "], but got ", gn_inline_msg::shape(stat->sizes())));
    TORCH_CHECK(stat->scalar_type() == acc,
                gn_inline_msg::cat("group_norm_backward: expected ", name, " of dtype ", gn_inline_msg::dtype_name(acc),
                                   " for an input of dtype ", gn_inline_msg::dtype_name(input.scalar_type()),
                                   ", but got ", gn_inline_msg::dtype_name(stat->scalar_type())));
    TORCH_CHECK(stat->device() == input.device(),
                gn_inline_msg::cat("group_norm_backward: expected ", name, " on ", input.device().str(),
                                   ", but got ", stat->device().str()));
  }
  for (const std::optional<at::Tensor>* param : {&weight, &bias}) {
    if (!(param->has_value() && (*param)->defined())) continue;
    const char* name = param == &weight ? "weight" : "bias";
    const at::Tensor& t = **param;
    TORCH_CHECK(t.dim() == 1 && t.size(0) == C,
                gn_inline_msg::cat("group_norm_backward: expected ", name, " of shape [", C, "], but got ",
                                   gn_inline_msg::shape(t.sizes())));
    TORCH_CHECK(t.device() == input.device(),
                gn_inline_msg::cat("group_norm_backward: expected ", name, " on ", input.device().str(), ", but got ",
                                   t.device().str()));
    TORCH_CHECK(at::isFloatingType(t.scalar_type()),
                gn_inline_msg::cat("group_norm_backward: expected a floating-point ", name, ", but got ",
                                   gn_inline_msg::dtype_name(t.scalar_type())));
  }
}

// The channels-last format of a tensor of this rank (ChannelsLast / ChannelsLast3d), or Contiguous.
inline at::MemoryFormat channels_last_format(const at::Tensor& t) {
  return t.dim() == 4 ? at::MemoryFormat::ChannelsLast
                      : (t.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::Contiguous);
}

// Whether the backward works in channels-last (NHWC / NDHWC) order: the input is channels-last contiguous and
// not also NCHW-contiguous. Then grad_out is read in that layout too (copied into it if it has another) and
// grad_input is returned in it; otherwise all three are NCHW-contiguous.
inline bool channels_last_input(const at::Tensor& input) {
  const at::MemoryFormat cl = channels_last_format(input);
  return cl != at::MemoryFormat::Contiguous && !input.is_contiguous() && input.is_contiguous(cl);
}

// The activation arguments of the backward, checked.
inline gn_act::Params backward_activation(int64_t activation, double alpha, double beta) {
  TORCH_CHECK(activation >= 0 && activation < gn_act::kNumKinds,
              gn_inline_msg::cat("group_norm_backward: unknown activation code ", activation, " (expected 0 to ",
                                 gn_act::kNumKinds - 1, ")"));
  gn_act::Params p;
  p.kind = static_cast<int>(activation);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

// The backward's outputs: grad_input like the input, grad_weight and grad_bias (C,) in param_grad_type; an
// output that output_mask does not ask for is an empty (0,) tensor. `complete` is true when nothing is left to
// compute: no output asked for, or an input without elements (every sum zero, so the parameter gradients are
// zeroed here).
struct BackwardOutputs {
  at::Tensor dx, dw, db;
  bool complete = false;
};

inline BackwardOutputs allocate_backward_outputs(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                                 std::array<bool, 3> output_mask) {
  const int64_t C = input.size(1);
  const at::ScalarType pdt = param_grad_type(input, weight);
  BackwardOutputs out;
  const at::MemoryFormat layout = channels_last_input(input) ? channels_last_format(input) : at::MemoryFormat::Contiguous;
  out.dx = output_mask[0] ? at::empty(input.sizes(), input.options().memory_format(layout))
                          : at::empty({0}, input.options());
  out.dw = at::empty({output_mask[1] ? C : 0}, input.options().dtype(pdt));
  out.db = at::empty({output_mask[2] ? C : 0}, input.options().dtype(pdt));
  out.complete = !output_mask[0] && !output_mask[1] && !output_mask[2];
  if (!out.complete && input.numel() == 0) {
    out.dw.zero_();
    out.db.zero_();
    out.complete = true;
  }
  return out;
}

}  // namespace gn_inline_backward
#endif  // GN_INLINE_BACKWARD_CHECKS
"""

GROUP_NORM_BACKWARD_CPU_TEMPLATE = GROUP_NORM_BACKWARD_CHECKS + r"""
#include <ATen/Parallel.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include <array>
#include <vector>

namespace gn_inline_backward_cpu {

// One (n, g) slice: x, dy, dx: (cpg, HW) contiguous; w: the group's cpg weights (double) or null;
// ds, db: the group's cpg per-channel sums (written here, about the exact mean, read again for dw/db).
// bias: the group's cpg biases (double) or null; act: the forward's activation, whose derivative at
// z = (x - mean) * rstd * w + bias turns dy into dz (kNone: dz = dy).
template <typename T>
void backward_slice(const T* x, const T* dy, T* dx, const double* w, const double* bias, double mean, double rstd,
                    int64_t cpg, int64_t HW, double* ds, double* db, const gn_act::Params& act) {
  const double D = static_cast<double>(cpg * HW);
  double dm = 0;
  for (int64_t i = 0; i < cpg * HW; ++i) dm += static_cast<double>(x[i]) - mean;
  mean += dm / D;  // the exact slice mean (the saved one may be rounded to float)
  const bool with_act = act.kind != gn_act::kNone;
  auto dz = [&](int64_t cl, double x_i, double dy_i) {
    if (!with_act) return dy_i;
    const double z = (x_i - mean) * rstd * (w ? w[cl] : 1.0) + (bias ? bias[cl] : 0.0);
    return dy_i * gn_act::derivative(act, z);
  };
  double S = 0, B = 0;
  for (int64_t cl = 0; cl < cpg; ++cl) {
    const T* xr = x + cl * HW;
    const T* dyr = dy + cl * HW;
    double s = 0, b = 0;
    for (int64_t i = 0; i < HW; ++i) {
      const double g = dz(cl, static_cast<double>(xr[i]), static_cast<double>(dyr[i]));
      s += g * (static_cast<double>(xr[i]) - mean);
      b += g;
    }
    ds[cl] = s;
    db[cl] = b;
    const double wc = w ? w[cl] : 1.0;
    S += wc * s;
    B += wc * b;
  }
  if (dx == nullptr) return;
  const double coef_x = -rstd * rstd * rstd * S / D;
  const double coef_1 = -rstd * B / D;
  for (int64_t cl = 0; cl < cpg; ++cl) {
    const double a = rstd * (w ? w[cl] : 1.0);
    const T* xr = x + cl * HW;
    const T* dyr = dy + cl * HW;
    T* dxr = dx + cl * HW;
    for (int64_t i = 0; i < HW; ++i)
      dxr[i] = static_cast<T>(a * dz(cl, static_cast<double>(xr[i]), static_cast<double>(dyr[i])) +
                              coef_x * (static_cast<double>(xr[i]) - mean) + coef_1);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t num_groups, std::array<bool, 3> output_mask,
    const std::optional<at::Tensor>& bias, int64_t activation, double act_alpha, double act_beta) {
  using namespace gn_inline_backward;
  TORCH_CHECK(input.device().is_cpu(), "group_norm_backward_cpu: expected a CPU input");
  check_backward_args(grad_out, input, mean, rstd, weight, num_groups, bias);
  const gn_act::Params act = backward_activation(activation, act_alpha, act_beta);
  TORCH_CHECK_NOT_IMPLEMENTED(dispatched_type(input.scalar_type()),
                              gn_inline_msg::not_implemented_for("group_norm_backward_cpu", input.scalar_type()));
  const int64_t N = input.size(0), C = input.size(1), G = num_groups, cpg = C / G;
  BackwardOutputs out = allocate_backward_outputs(input, weight, output_mask);
  at::Tensor &dx = out.dx, &dw = out.dw, &dbias = out.db;
  if (out.complete) return {dx, dw, dbias};
  const int64_t HW = input.numel() / (N * C);
  const at::Tensor x = input.contiguous();
  const at::Tensor dy = grad_out.contiguous();
  // A channels-last input's grad_input is formed in NCHW order, then written back in the input's layout.
  const bool via_nchw = output_mask[0] && !dx.is_contiguous();
  at::Tensor dx_work = via_nchw ? at::empty(input.sizes(), input.options()) : dx;
  const at::Tensor mean64 = mean.to(at::kDouble).contiguous();
  const at::Tensor rstd64 = rstd.to(at::kDouble).contiguous();
  const bool affine = weight.has_value() && weight->defined();
  const at::Tensor w64 = affine ? weight->to(at::kDouble).contiguous() : at::Tensor();
  const bool has_bias = bias.has_value() && bias->defined();
  const at::Tensor b64 = has_bias ? bias->to(at::kDouble).contiguous() : at::Tensor();
  const double* bp = has_bias ? b64.data_ptr<double>() : nullptr;
  // Per-(n, c) sums, kept for dw / db: (N, C) each.
  std::vector<double> ds(static_cast<size_t>(N * C)), db(static_cast<size_t>(N * C));
  const double* mp = mean64.data_ptr<double>();
  const double* rp = rstd64.data_ptr<double>();
  const double* wp = affine ? w64.data_ptr<double>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_backward_cpu", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* dyp = dy.data_ptr<scalar_t>();
    scalar_t* dxp = output_mask[0] ? dx_work.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, N * G, 1, [&](int64_t first, int64_t last) {
      for (int64_t slice = first; slice < last; ++slice) {
        const int64_t offset = slice * cpg * HW;
        backward_slice<scalar_t>(xp + offset, dyp + offset, dxp ? dxp + offset : nullptr,
                                 wp ? wp + (slice % G) * cpg : nullptr, bp ? bp + (slice % G) * cpg : nullptr,
                                 mp[slice], rp[slice], cpg, HW, ds.data() + slice * cpg, db.data() + slice * cpg,
                                 act);
      }
    });
  });
  if (via_nchw) dx.copy_(dx_work);
  if (output_mask[1] || output_mask[2]) {
    at::Tensor dw64 = at::empty({C}, input.options().dtype(at::kDouble));
    at::Tensor db64 = at::empty({C}, input.options().dtype(at::kDouble));
    double* dwp = dw64.data_ptr<double>();
    double* dbp = db64.data_ptr<double>();
    for (int64_t c = 0; c < C; ++c) {
      double sw = 0, sb = 0;
      for (int64_t n = 0; n < N; ++n) {
        sw += ds[n * C + c] * rp[n * G + c / cpg];
        sb += db[n * C + c];
      }
      dwp[c] = sw;
      dbp[c] = sb;
    }
    if (output_mask[1]) dw.copy_(dw64);
    if (output_mask[2]) dbias.copy_(db64);
  }
  return {dx, dw, dbias};
}

}  // namespace gn_inline_backward_cpu

TORCH_LIBRARY_FRAGMENT(GN_NAMESPACE, m) {
  m.def("@BACKWARD_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CPU, m) {
  m.impl("group_norm_backward", &gn_inline_backward_cpu::group_norm_backward_cpu);
}
""".replace("@BACKWARD_SCHEMA@", BACKWARD_SCHEMA)
