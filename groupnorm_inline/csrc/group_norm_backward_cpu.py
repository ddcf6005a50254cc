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

The CPU kernels (cpu_backward_kernels.py) are vectorised with at::vec: the per-channel sums in the compute
type, folded into double every few thousand elements, delta measured in the same pass as ds and db.
Outputs not asked for by `output_mask` come back as empty tensors of shape (0,).

This source is concatenated with the forward's C++ source into one translation unit; the namespace
itself is defined there (TORCH_LIBRARY), so this one adds its schema with TORCH_LIBRARY_FRAGMENT.
"""

from .activation import ACTIVATION_HEADER
from .cpu_backward_kernels import CPU_BACKWARD_KERNELS
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

GROUP_NORM_BACKWARD_CPU_TEMPLATE = GROUP_NORM_BACKWARD_CHECKS + CPU_BACKWARD_KERNELS + r"""
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>
#include <algorithm>
#include <array>
#include <memory>

namespace gn_inline_backward_cpu {

// The per-(n, c) sums of one backward call (ds, db: N * C doubles each) and its parameter gradients (2 C), one
// buffer, uninitialised: every kernel path writes each (n, c) entry, and the parameter sums start from sample 0's.
// The calling thread keeps it across calls while it is at most kKeptScratchBytes. As three zero-filled vectors
// allocated per call, (1, 262144) G1 float32 backward spent most of its ~3 ms in page faults under the zero
// fills (8 MB that glibc had returned to the system after the call before; perf, 2-core AVX-512 machine), where
// PyTorch's whole backward took 0.8 ms. Larger buffers (inputs of many short channels) are allocated per call
// with huge pages advised, like the outputs: their kernels' time grows in proportion.
constexpr size_t kKeptScratchBytes = size_t(32) << 20;
inline double* backward_scratch(size_t count, std::unique_ptr<double[]>& per_call) {
  thread_local std::unique_ptr<double[]> kept;
  thread_local size_t kept_count = 0;
  if (count * sizeof(double) > kKeptScratchBytes) {
    per_call.reset(new double[count]);
    gn_cpu::advise_huge_pages(per_call.get(), static_cast<int64_t>(count * sizeof(double)));
    return per_call.get();
  }
  if (kept_count < count) {
    kept.reset();  // the smaller one freed before the larger is allocated
    kept.reset(new double[count]);
    kept_count = count;
  }
  return kept.get();
}

// dw[c] = sum_n ds[n, c] (each already times its group's rstd) and db[c] = sum_n db[n, c] for channels [c0, c1)
// into sw / sb: sample by sample into every channel's sums, a vector of channels at a time (the same order of
// additions per channel as a loop over n per channel, whose dependent chain of N additions per channel cost ~5 us
// at (32,128,3,2); group by group, element by element, a tenth of the backward of (128,128,3,2)). Sample 0's sums
// are the start.
inline void sum_param_grads(const double* ds, const double* db, int64_t N, int64_t C, int64_t c0, int64_t c1,
                            double* sw, double* sb) {
  using VD = at::vec::Vectorized<double>;
  constexpr int64_t L = VD::size();
  std::copy(ds + c0, ds + c1, sw + c0);
  std::copy(db + c0, db + c1, sb + c0);
  for (int64_t n = 1; n < N; ++n) {
    const double* dsn = ds + n * C;
    const double* dbn = db + n * C;
    int64_t c = c0;
    for (; c + L <= c1; c += L) {
      (VD::loadu(sw + c) + VD::loadu(dsn + c)).store(sw + c);
      (VD::loadu(sb + c) + VD::loadu(dbn + c)).store(sb + c);
    }
    for (; c < c1; ++c) {
      sw[c] += dsn[c];
      sb[c] += dbn[c];
    }
  }
}

// The parameter gradients from the per-(n, c) sums (ds, db: (N, C); scratch: 2 C doubles, unused when N == 1, whose
// sums are the gradients) into dw / db (null: not asked for) in their dtype. Channels shared out over the threads
// from a number of (n, c) entries (below), each task at least kParamTaskEntries: (1, 262144) G1, 0.5 M doubles
// summed and converted serially, was a tenth of the backward. The rows of ds / db were written by the kernel's
// threads, so on a many-core host one thread reading them all waits on other cores' caches: (32,1280,2,2) G32
// channels-last at 16 threads (Xeon host of an H200), the backward took 83.7 us with the parameter gradients
// and 30.9 without (ATen 48.2 / 18.2) when 40960 entries were summed on one thread; shared out from 16 K entries,
// 1.27-1.31x -> 1.07-1.08x PyTorch's time through autograd. At 2 threads a fork saves at most half the sum and
// costs a second parallel region's wake-up, which on a 2-core VM is tens of microseconds: forked from 16 K entries
// there, (256, 64) G8 float32 backward 18.6-37.6 -> 28.6-82.6 us and (64,512,2,2) channels-last 32-78 -> 39-103
// (operator alone), and (8, 1024) G4 0.87 -> 1.02x PyTorch's time forked at 8 K. So: from 16 K entries at 4
// threads and more, from 64 K below, tasks of at least kParamTaskEntries.
constexpr int64_t kParallelParamEntries = int64_t(1) << 14;
constexpr int64_t kParallelParamEntriesFewThreads = int64_t(1) << 16;
constexpr int64_t kParamTaskEntries = 4096;
inline void write_param_grads(const double* ds, const double* db, int64_t N, int64_t C, double* scratch,
                              at::Tensor* dw, at::Tensor* dbias) {
  const double* sw = N == 1 ? ds : scratch;
  const double* sb = N == 1 ? db : scratch + C;
  const at::ScalarType type = (dw ? dw : dbias)->scalar_type();
  if (!gn_inline_backward::dispatched_type(type)) {  // any other floating dtype: converted by copy_
    if (N > 1) sum_param_grads(ds, db, N, C, 0, C, scratch, scratch + C);
    if (dw) dw->copy_(at::from_blob(const_cast<double*>(sw), {C}, at::kDouble));
    if (dbias) dbias->copy_(at::from_blob(const_cast<double*>(sb), {C}, at::kDouble));
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type, "group_norm_backward_cpu", [&] {
    scalar_t* dwp = dw ? dw->mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* dbp = dbias ? dbias->mutable_data_ptr<scalar_t>() : nullptr;
    const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
    const int64_t fork_from = threads >= 4 ? kParallelParamEntries : kParallelParamEntriesFewThreads;
    const int64_t grain =
        N * C < fork_from ? C : std::max((C + threads - 1) / threads, (kParamTaskEntries + N - 1) / N);
    at::parallel_for(0, C, std::max<int64_t>(1, grain), [&](int64_t c0, int64_t c1) {
      if (N > 1) sum_param_grads(ds, db, N, C, c0, c1, scratch, scratch + C);
      if (dwp) {
        for (int64_t c = c0; c < c1; ++c) dwp[c] = static_cast<scalar_t>(sw[c]);
      }
      if (dbp) {
        for (int64_t c = c0; c < c1; ++c) dbp[c] = static_cast<scalar_t>(sb[c]);
      }
    });
  });
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
  const int64_t N = input.size(0), C = input.size(1), G = num_groups;
  BackwardOutputs out = allocate_backward_outputs(input, weight, output_mask);
  at::Tensor &dx = out.dx, &dw = out.dw, &dbias = out.db;
  if (out.complete) return {dx, dw, dbias};
  const int64_t HW = input.numel() / (N * C);
  // Both read in the layout the kernels take (channels-last when the input is; grad_out copied into it if it has
  // another); dx was allocated in it.
  const bool channels_last = channels_last_input(input);
  const at::MemoryFormat layout = channels_last ? channels_last_format(input) : at::MemoryFormat::Contiguous;
  // (Each conversion is skipped when not needed: a dispatched no-op still costs ~1 us, and small backward calls
  // take tens of microseconds.)
  auto in_layout = [&](const at::Tensor& t) { return t.is_contiguous(layout) ? t : t.contiguous(layout); };
  const at::ScalarType acc = stats_type(input.scalar_type());
  auto as_acc = [&](const at::Tensor& t) {
    return t.scalar_type() == acc && t.is_contiguous() ? t : t.to(acc).contiguous();
  };
  const at::Tensor x = in_layout(input);
  const at::Tensor dy = in_layout(grad_out);
  const at::Tensor mean_c = as_acc(mean), rstd_c = as_acc(rstd);
  const bool affine = weight.has_value() && weight->defined();
  // (weight and bias are read through param_values: half ones widened without a dispatched call)
  const bool has_bias = act.kind != gn_act::kNone && bias.has_value() && bias->defined();
  // Per-(n, c) sums for the parameter gradients: ds about the exact slice mean, and db; (N, C) each; then the
  // parameter gradients, dw then db, in double.
  std::unique_ptr<double[]> per_call;
  double* const ds = backward_scratch(static_cast<size_t>(2 * N * C + 2 * C), per_call);
  double* const db = ds + N * C;
  double* const param_grads = db + N * C;
  // Groups of one element (C == G, HW == 1): x is its group's mean, so the normalised value is 0 and so is dx,
  // exactly; the kernels' a * dy + (c1 = -a * dy) would leave the rounding of a * dy, up to ~2.4e-4 at rstd
  // 1/sqrt(eps) (PyTorch's float32 too). dx is zero-filled after them and they skip it.
  const bool single_element_groups = C / G * HW == 1;
  if (output_mask[0]) gn_cpu::advise_huge_pages(dx.mutable_data_ptr(), static_cast<int64_t>(dx.nbytes()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_backward_cpu", [&] {
    using C_t = gn_cpu::compute_t<scalar_t>;
    gn_cpu::BackwardArgs<scalar_t> args;
    args.x = x.const_data_ptr<scalar_t>();
    args.dy = dy.const_data_ptr<scalar_t>();
    args.dx = output_mask[0] && !single_element_groups ? dx.mutable_data_ptr<scalar_t>() : nullptr;
    args.mean = mean_c.const_data_ptr<C_t>();
    args.rstd = rstd_c.const_data_ptr<C_t>();
    std::tie(args.w, args.bias) =
        gn_cpu::param_values<scalar_t>(affine ? *weight : at::Tensor(), has_bias ? *bias : at::Tensor());
    args.N = N;
    args.G = G;
    args.channels = C;
    args.HW = HW;
    args.act = act;
    args.ds = ds;
    args.db = db;
    // (N, C) inputs (one element a channel) of up to kMaxRowChannels channels whose samples share out over the
    // threads take the channels-last kernels too, a sample being one row of C: 2-core AVX-512 machine, 2 threads,
    // backward against PyTorch's, slice by slice -> as rows: (64,1024,1,1) float16 2.4x -> 1.1-1.3x, (256,64) G8
    // float32 1.0-1.15x -> 0.87x, (8,1024) G4 -> 0.86x. Longer rows keep the NCHW kernel (the per-channel constants
    // and sums of a row, ~11 times its bytes, would leave the caches), and so do few samples, cut into parts there.
    constexpr int64_t kMaxRowChannels = 8192;
    const bool as_rows = HW == 1 && C <= kMaxRowChannels &&
                         gn_cpu::split_parts(N, C, gn_cpu::kMinPartElements) == 1;
    auto run = [&](auto with_act) {
      constexpr bool kAct = decltype(with_act)::value;
      if (channels_last || as_rows) {
        gn_cpu::backward_channels_last<scalar_t, kAct>(args);
      } else {
        gn_cpu::backward_nchw<scalar_t, kAct>(args);
      }
    };
    if (act.kind == gn_act::kNone) {
      run(std::false_type{});
    } else {
      run(std::true_type{});
    }
  });
  if (output_mask[0] && single_element_groups) dx.zero_();
  if (output_mask[1] || output_mask[2]) {
    write_param_grads(ds, db, N, C, param_grads, output_mask[1] ? &dw : nullptr, output_mask[2] ? &dbias : nullptr);
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
