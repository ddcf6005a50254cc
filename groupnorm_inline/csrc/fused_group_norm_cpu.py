"""C++ sources of the GroupNorm family kernel (the KernelBench level 2 problems with a GroupNorm): the operator
schema, the Prologue/Epilogue functors and the chain table shared by the CPU and CUDA kernels, and the CPU kernels.

One operator, registered under FAMILY_NAMESPACE (spelled GN_NAMESPACE in the sources, see `with_namespace`):

  fused_group_norm(x (N, C, *), G, weight (C,), bias (C,), eps, prologue, epilogue, vectors, scalars,
                   input_pool, output, output_pool, stats_mode=0) -> out

      u   = x[n, c, s] + input_bias[c]                      when input_bias is given (rounded to x's dtype)
      v   = Prologue(u, c)                                  elementwise, before the statistics
      v'  = max over a k x k window of v                    when input_pool = k > 1 (x 4-D, stride k, floor)
      z   = (v' - mean[n, g]) * rstd[n, g] * weight[c] + bias[c]      GroupNorm of v' (biased variance)
      e   = Epilogue(z, c)                                  elementwise, after the affine
      out = e (N, C, *)                        output 0, "store"
            mean of e over (C, *), (N,)        output 1, "mean_all"
            mean of e over *, (N, C)           output 2, "mean_spatial"
            max of e over k x k windows        output 3, "max_pool" (x 4-D, k = output_pool, stride k, floor)
            min of e over C, (N, 1)            output 4, "min_channels" (x 2-D)

  `stats_mode` (bits kStatsRound, kFusedAffine, kEpsRound below) says how the reference GroupNorm uses its
  statistics for float16/bfloat16 data on the device at hand: mean and rstd rounded to the data type or not, the
  fused affine a * v + b of PyTorch's CUDA kernel, eps rounded to the data type; problems/family.py sets it.
  `input_bias` (C,) is the bias of the convolution before the operator, which the problem modules run without
  its bias on CUDA: PyTorch's cuDNN convolutions add their bias in an elementwise kernel of its own, a full read
  and write of the convolution's output that the operator's read makes free (the sum rounded as that add rounds).
  `vectors` are the functors' per-channel float32 vectors (C,) (the prologue's first, then the epilogue's), `scalars`
  their constants. Prologue and Epilogue are compile-time functors (`Pro*`, `Epi*` below); the pairs the package
  uses are instantiated once each, listed in GN_FAMILY_CHAINS with the paths (kernels) they are built for. x is
  float32, float16 or bfloat16, contiguous or channels_last (4-D/5-D dense; the CUDA kernels read it in place for
  the store output of the chains built with kChannelsLastPath, and write the output in that layout; otherwise, and
  on the CPU, it is read through a contiguous copy, the store output given back channels_last); everything is computed in float32 (statistics accumulated in
  float64 on the CPU, shifted float32 partial sums combined in float64 on CUDA), out has x's dtype. For float16
  and bfloat16 the functors round to that dtype where each op of the reference rounds (`rnd<T>`), and so does the
  GroupNorm's output before the epilogue: KernelBench's precision option compares against eager PyTorch in that
  dtype, whose GroupNorm amplifies the roundings of its input.

  to_channels_last(x (N, C, *) 4-D or 5-D) -> the same values in channels_last memory format, the input of a
      channels_last convolution (CUDA: one tiled transpose through shared memory).
  conv3d_direct(x, weight) -> the family's few-channel convolutions (Conv3d, and Conv2d as its depth-1 case;
      stride 1, no padding, no bias), see conv3d_direct.py.

The CPU kernel is the exact reference of the family: one task per sample, each (n, g) slice's values v' gathered
in float32, two passes in float64 for the mean and the variance, then the same functors and the same affine
formula as the CUDA kernels.
"""

from .activation import ACTIVATION_HEADER
from .conv3d_direct import CONV3D_DIRECT_CHECKS, CONV3D_DIRECT_CPU, CONV3D_DIRECT_SCHEMA
from .message import MESSAGE_HEADER

FAMILY_NAMESPACE = "groupnorm_inline_family"

FAMILY_SCHEMA = ("fused_group_norm(Tensor x, int num_groups, Tensor weight, Tensor bias, float eps, int prologue, "
                 "int epilogue, Tensor[] vectors, float[] scalars, int input_pool, int output, int output_pool, "
                 "int stats_mode=0, Tensor? input_bias=None) -> Tensor")
# x (N, C, *) in contiguous format -> the same values in channels_last (4-D) / channels_last_3d (5-D) memory format:
# the input of a channels_last convolution (on CUDA one tiled transpose, faster than PyTorch's copy for C >= 32).
TO_CHANNELS_LAST_SCHEMA = "to_channels_last(Tensor x) -> Tensor"
# x (N, C, *) -> (2, C) float32: each channel's mean and biased variance over the other dimensions (a BatchNorm's
# batch statistics; on CUDA one read of a channels_last x).
CHANNEL_MOMENTS_SCHEMA = "channel_moments(Tensor x) -> Tensor"

# The functor codes (ProOf/EpiOf below) and output codes are named in groupnorm_inline/problems/family.py.

FAMILY_COMMON_TEMPLATE = MESSAGE_HEADER + ACTIVATION_HEADER + r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/conv3d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/var_mean.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace gn_family {

constexpr int kMaxVectors = 6;
constexpr int kMaxScalars = 4;

// The functors' operands: per-channel float32 vectors and float constants (kernel parameter space on CUDA).
struct Args {
  const float* vec[kMaxVectors];
  float scal[kMaxScalars];
  const float* in_bias;  // (C,) added to x before the prologue, or nullptr
};

// torch.sigmoid in float32: 1 / (1 + exp(-z)) with the accurate exp and IEEE division, rounded once to the data
// type by the caller. PyTorch's CUDA kernel computes exactly this for float16/bfloat16 too: its std::exp of a
// reduced-precision value resolves to the float overload and the arithmetic with scalar_t{1} stays in float, so only
// the result is rounded (the family's sources are compiled without fast-math, as PyTorch's).
GN_HD float sigmoid_exact(float z) { return 1.0f / (1.0f + expf(-z)); }
// a * b rounded on its own: keeps nvcc from contracting it with a following addition into an FMA where the reference
// runs the product and the sum as two ops (two kernels: two roundings, even in float32).
GN_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
// torch.nn.functional.hardswish in float: x * min(max(x + 3, 0), 6) times 1/6 on CUDA (PyTorch's CUDA kernel
// multiplies by the float constant 1/6), divided by 6 on the CPU (PyTorch's CPU kernel divides); the two differ in
// the last bit of some results, which a float16/bfloat16 rounding can turn into one unit of the data type.
GN_HD float hardswish_torch(float x) {
  const float r = x + 3.0f;
  const float t = r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r);
#if defined(__CUDA_ARCH__)
  return x * t * (1.0f / 6.0f);
#else
  return x * t / 6.0f;
#endif
}
// torch.clamp(v, lo, hi) = min(max(v, lo), hi); NaN stays NaN, lo > hi gives hi.
GN_HD float clamp_torch(float v, float lo, float hi) {
  const float t = v < lo ? lo : v;
  return t > hi ? hi : t;
}
// torch.minimum / torch.min(a, b): NaN if either is NaN.
GN_HD float minimum_nan(float a, float b) { return (a != a || a < b) ? a : b; }
GN_HD float maximum_nan(float a, float b) { return (a != a || a > b) ? a : b; }

// v rounded to the data type T and back: eager PyTorch computes each elementwise op of float16/bfloat16 tensors in
// float32 and rounds its result to the tensor's dtype, so the functors round where an op of the reference ends
// (identity for float32). A GroupNorm divides by the group's spread, so matching these roundings keeps a float16 or
// bfloat16 result next to the reference's rather than to the exact value.
template <typename T>
GN_HD float rnd(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return static_cast<float>(static_cast<T>(v));
  }
}

// Functors: `Functor<T>(args, vector offset, scalar offset)`, then f(value, channel) in float32, rounding as
// the reference's ops on T tensors round.

// ------------------------------------------------------------------ prologues: v = P(x, c), before the statistics

template <typename T>
struct ProIdentity {
  static constexpr int kVectors = 0, kScalars = 0;
  GN_HD ProIdentity(const Args&, int, int) {}
  GN_HD float operator()(float x, int64_t) const { return x; }
};

// One gn_act activation as one PyTorch op: relu, gelu (erf: x * 0.5 * (1 + erf(x * M_SQRT1_2)) in float, PyTorch's
// CUDA and CPU formula; 0.5 * x is the same product).
template <typename T, int KIND>
struct ProAct {
  static constexpr int kVectors = 0, kScalars = 0;
  gn_act::Params p;
  GN_HD ProAct(const Args&, int, int) {}
  GN_HD float operator()(float x, int64_t) const { return rnd<T>(gn_act::forward_as<KIND>(p, x)); }
};
template <typename T> using ProRelu = ProAct<T, gn_act::kRelu>;
template <typename T> using ProGelu = ProAct<T, gn_act::kGelu>;

// F.hardswish as the device's PyTorch kernel computes it (hardswish_torch), rounded once (#27).
template <typename T>
struct ProHardswish {
  static constexpr int kVectors = 0, kScalars = 0;
  GN_HD ProHardswish(const Args&, int, int) {}
  GN_HD float operator()(float x, int64_t) const { return rnd<T>(hardswish_torch(x)); }
};

// torch.sigmoid(x) * x ("Swish", #60).
template <typename T>
struct ProSilu {
  static constexpr int kVectors = 0, kScalars = 0;
  GN_HD ProSilu(const Args&, int, int) {}
  GN_HD float operator()(float x, int64_t) const { return rnd<T>(mul_rn(rnd<T>(sigmoid_exact(x)), x)); }
};

// sigmoid((x + bias[c]) * scale[c])  (#21: x + self.bias, * self.scale, torch.sigmoid).
template <typename T>
struct ProAddScaleSigmoid {
  static constexpr int kVectors = 2, kScalars = 0;
  const float* bias;
  const float* scale;
  GN_HD ProAddScaleSigmoid(const Args& a, int vo, int) : bias(a.vec[vo]), scale(a.vec[vo + 1]) {}
  GN_HD float operator()(float x, int64_t c) const {
    return rnd<T>(sigmoid_exact(rnd<T>(rnd<T>(x + bias[c]) * scale[c])));
  }
};

// tanh(weight[c] * (x - mean[c]) * invstd[c] + bias[c]): BatchNorm with given statistics, then Tanh (#11). The
// BatchNorm is one op rounded once, in the product order of PyTorch's CUDA transform kernel for contiguous input,
// (weight * (x - mean)) * invstd + bias with the last product and sum contracted into one FMA (nvcc's default).
template <typename T>
struct ProBatchNormTanh {
  static constexpr int kVectors = 4, kScalars = 0;
  const float* mean;
  const float* invstd;
  const float* weight;
  const float* bias;
  GN_HD ProBatchNormTanh(const Args& a, int vo, int)
      : mean(a.vec[vo]), invstd(a.vec[vo + 1]), weight(a.vec[vo + 2]), bias(a.vec[vo + 3]) {}
  GN_HD float operator()(float x, int64_t c) const {
    return rnd<T>(gn_act::e_tanh(rnd<T>(fmaf(weight[c] * (x - mean[c]), invstd[c], bias[c]))));
  }
  // +1 where the prologue is non-decreasing in x on channel c, -1 where non-increasing, 0 where neither holds for
  // every x (a pooled kernel then maxes the raw values and applies the prologue once per window). Every step but
  // tanh is a correctly rounded monotone op; CUDA's tanhf decreases by one unit at a few points (|x| = 0.6 with
  // CUDA 13; the family's GPU test walks every float and bounds them), so the pooled value can be one float32
  // unit below the max of the tanh values where a window holds two such neighbours. For a finite nonzero weight
  // and a finite positive invstd the sign of the weight decides; a zero weight maps infinities to NaN and finite
  // values to one value: 0.
  GN_HD int direction(int64_t c) const {
    const float w = weight[c], s = invstd[c];
    if (!(s > 0.0f) || !(s < INFINITY) || !(w < INFINITY && w > -INFINITY) || w == 0.0f) return 0;
    return w > 0.0f ? 1 : -1;
  }
};

// torch.sigmoid(x) * x + bias[c]  (#37: Swish, then + self.bias).
template <typename T>
struct ProSiluAdd {
  static constexpr int kVectors = 1, kScalars = 0;
  const float* bias;
  GN_HD ProSiluAdd(const Args& a, int vo, int) : bias(a.vec[vo]) {}
  GN_HD float operator()(float x, int64_t c) const {
    return rnd<T>(rnd<T>(mul_rn(rnd<T>(sigmoid_exact(x)), x)) + bias[c]);
  }
};

// mish(hardtanh(x + bias[c], -1, 1))  (#94 after its Linear: + self.bias, Hardtanh, Mish).
template <typename T>
struct ProAddHardtanhMish {
  static constexpr int kVectors = 1, kScalars = 0;
  const float* bias;
  GN_HD ProAddHardtanhMish(const Args& a, int vo, int) : bias(a.vec[vo]) {}
  GN_HD float operator()(float x, int64_t c) const {
    const float h = clamp_torch(rnd<T>(x + bias[c]), -1.0f, 1.0f);
    return rnd<T>(h * gn_act::e_tanh(gn_act::e_log1p(gn_act::e_exp(h))));
  }
};

// ------------------------------------------------------------------ epilogues: e = E(z, c), after the affine
// z arrives rounded to T (the reference's GroupNorm output).

template <typename T>
struct EpiIdentity {
  static constexpr int kVectors = 0, kScalars = 0;
  GN_HD EpiIdentity(const Args&, int, int) {}
  GN_HD float operator()(float z, int64_t) const { return z; }
};

template <typename T>
struct EpiHardswish {
  static constexpr int kVectors = 0, kScalars = 0;
  GN_HD EpiHardswish(const Args&, int, int) {}
  GN_HD float operator()(float z, int64_t) const { return rnd<T>(hardswish_torch(z)); }
};

// Hardtanh(min_val = scalars[0], max_val = scalars[1]).
template <typename T>
struct EpiHardtanh {
  static constexpr int kVectors = 0, kScalars = 2;
  float lo, hi;
  GN_HD EpiHardtanh(const Args& a, int, int so) : lo(rnd<T>(a.scal[so])), hi(rnd<T>(a.scal[so + 1])) {}
  GN_HD float operator()(float z, int64_t) const { return clamp_torch(z, lo, hi); }
};

// clamp(minimum(z, s0), s1, s2)  (#83: torch.min(x, min_value), torch.clamp(min_value, max_value)).
template <typename T>
struct EpiMinClamp {
  static constexpr int kVectors = 0, kScalars = 3;
  float cap, lo, hi;
  GN_HD EpiMinClamp(const Args& a, int, int so)
      : cap(rnd<T>(a.scal[so])), lo(rnd<T>(a.scal[so + 1])), hi(rnd<T>(a.scal[so + 2])) {}
  GN_HD float operator()(float z, int64_t) const { return clamp_torch(minimum_nan(z, cap), lo, hi); }
};

// clamp(z * scale[c], s0, s1)  (#85: * self.scale, then the clamp, which commutes exactly with a max-pool:
// both only select values and the clamp never reverses an order).
template <typename T>
struct EpiScaleClamp {
  static constexpr int kVectors = 1, kScalars = 2;
  const float* scale;
  float lo, hi;
  GN_HD EpiScaleClamp(const Args& a, int vo, int so)
      : scale(a.vec[vo]), lo(rnd<T>(a.scal[so])), hi(rnd<T>(a.scal[so + 1])) {}
  GN_HD float operator()(float z, int64_t c) const { return clamp_torch(rnd<T>(z * scale[c]), lo, hi); }
};

// t = leaky_relu(z, s0); t + t  (#62).
template <typename T>
struct EpiLeakyReluDouble {
  static constexpr int kVectors = 0, kScalars = 1;
  float slope;
  GN_HD EpiLeakyReluDouble(const Args& a, int, int so) : slope(a.scal[so]) {}
  GN_HD float operator()(float z, int64_t) const {
    const float t = z > 0.0f ? z : rnd<T>(z * slope);
    return rnd<T>(t + t);
  }
};

// t = z * sigmoid(z) * w[c]; t * sigmoid(t)  (#88: x * torch.sigmoid(x), * multiply_weight, again Swish).
template <typename T>
struct EpiSiluMulSilu {
  static constexpr int kVectors = 1, kScalars = 0;
  const float* w;
  GN_HD EpiSiluMulSilu(const Args& a, int vo, int) : w(a.vec[vo]) {}
  GN_HD float operator()(float z, int64_t c) const {
    const float t = rnd<T>(mul_rn(rnd<T>(mul_rn(z, rnd<T>(sigmoid_exact(z)))), w[c]));
    return rnd<T>(mul_rn(t, rnd<T>(sigmoid_exact(t))));
  }
};

// Codes (problems/family.py names them) -> functor templates.
template <int CODE, typename T> struct ProOf;
template <typename T> struct ProOf<0, T> { using type = ProIdentity<T>; };
template <typename T> struct ProOf<1, T> { using type = ProRelu<T>; };
template <typename T> struct ProOf<2, T> { using type = ProGelu<T>; };
template <typename T> struct ProOf<3, T> { using type = ProHardswish<T>; };
template <typename T> struct ProOf<4, T> { using type = ProSilu<T>; };
template <typename T> struct ProOf<5, T> { using type = ProAddScaleSigmoid<T>; };
template <typename T> struct ProOf<6, T> { using type = ProBatchNormTanh<T>; };
template <typename T> struct ProOf<7, T> { using type = ProSiluAdd<T>; };
template <typename T> struct ProOf<8, T> { using type = ProAddHardtanhMish<T>; };

// Whether a prologue says where it is monotone in x (`direction(c)`).
template <class Pro, class = void>
struct HasDirection : std::false_type {};
template <class Pro>
struct HasDirection<Pro, std::void_t<decltype(std::declval<const Pro&>().direction(int64_t{0}))>> : std::true_type {};

// A chain's prologue with the input bias folded in: Inner(x + in_bias[c], c), the sum rounded to T as PyTorch's
// separate bias add rounds it; Inner(x, c) without an input bias (a uniform branch: the pointer is per launch).
template <class Inner, typename T>
struct WithInputBias {
  static constexpr int kVectors = Inner::kVectors, kScalars = Inner::kScalars;
  Inner inner;
  const float* in_bias;
  GN_HD WithInputBias(const Args& a, int vo, int so) : inner(a, vo, so), in_bias(a.in_bias) {}
  GN_HD float operator()(float x, int64_t c) const { return inner(in_bias ? rnd<T>(x + in_bias[c]) : x, c); }
  // The inner prologue's direction (0 where it has none); adding a finite bias keeps it.
  GN_HD int direction(int64_t c) const {
    if constexpr (HasDirection<Inner>::value) {
      if (in_bias && !(in_bias[c] < INFINITY && in_bias[c] > -INFINITY)) return 0;
      return inner.direction(c);
    } else {
      return 0;
    }
  }
};

template <int CODE, typename T> struct EpiOf;
template <typename T> struct EpiOf<0, T> { using type = EpiIdentity<T>; };
template <typename T> struct EpiOf<1, T> { using type = EpiHardswish<T>; };
template <typename T> struct EpiOf<2, T> { using type = EpiHardtanh<T>; };
template <typename T> struct EpiOf<3, T> { using type = EpiMinClamp<T>; };
template <typename T> struct EpiOf<4, T> { using type = EpiScaleClamp<T>; };
template <typename T> struct EpiOf<5, T> { using type = EpiLeakyReluDouble<T>; };
template <typename T> struct EpiOf<6, T> { using type = EpiSiluMulSilu<T>; };

enum Output : int { kStore = 0, kMeanAll = 1, kMeanSpatial = 2, kMaxPool = 3, kMinChannels = 4 };

// Bits of `stats_mode`: how the reference GroupNorm turns its statistics into the output (problems/family.py picks
// them for the device and dtype of x; every bit is a no-op for float32 data but kFusedAffine).
//   kStatsRound   mean and rstd rounded to the data type before they are used: PyTorch's CUDA kernel up to 2.11
//                 stores them in tensors of x's dtype and normalises with the stored values; later versions keep
//                 float32 copies for the output.
//   kFusedAffine  z = a * v + b with a = rstd * weight[c], b = -a * mean + bias[c] (one FMA each, float32):
//                 PyTorch's CUDA kernel when H * W > 1. Otherwise z = ((v - mean) * rstd) * weight[c] + bias[c], the
//                 last product and sum one FMA (PyTorch's CUDA kernel for H * W = 1, and the accurate form).
//   kEpsRound     eps rounded to the data type (PyTorch's CUDA kernel takes eps as a value of x's dtype).
constexpr int kStatsRound = 1, kFusedAffine = 2, kEpsRound = 4;

// The GroupNorm affine of one (n, c): z = affine(v), float32 (see kFusedAffine); mean and rstd as the reference
// normalises with them (already rounded under kStatsRound).
struct ChannelAffine {
  float mean, rstd, w, b;  // the unfused form
  float a, c;              // the fused form
  bool fused;
  ChannelAffine() = default;
  GN_HD ChannelAffine(float mean_, float rstd_, float w_, float b_, bool fused_)
      : mean(mean_), rstd(rstd_), w(w_), b(b_), a(rstd_ * w_), c(fmaf(-(rstd_ * w_), mean_, b_)), fused(fused_) {}
  GN_HD float operator()(float v) const { return fused ? fmaf(a, v, c) : fmaf((v - mean) * rstd, w, b); }
};

// (mean, rstd) rounded to T under kStatsRound (identity for float32).
template <typename T>
GN_HD void round_stats(int mode, float& mean, float& rstd) {
  if (mode & kStatsRound) {
    mean = rnd<T>(mean);
    rstd = rnd<T>(rstd);
  }
}
enum Path : int { kSlicePath = 1, kRowsPath = 2, kChannelsLastPath = 4, kPooledChannelsLastPath = 8 };

// The chains built, X(prologue, epilogue, paths): the slice path (statistics over (n, g) slices of any size,
// every output but min_channels) for the convolution problems, the rows path (2-D x, a warp per (row, group),
// outputs store and min_channels) for the GEMM problems. Plain GroupNorm (0, 0) takes both.
#define GN_FAMILY_CHAINS(X) \
  X(0, 0, 7) X(6, 0, 9) X(2, 0, 5) X(5, 0, 1) X(3, 0, 1) X(4, 1, 5) X(1, 0, 5) X(0, 3, 1) X(0, 4, 1) \
  X(0, 2, 2) X(7, 0, 2) X(0, 5, 2) X(0, 6, 2) X(8, 0, 2)

inline int chain_paths(int64_t pro, int64_t epi) {
#define GN_FAMILY_PATHS(P, E, PATHS) if (pro == P && epi == E) return PATHS;
  GN_FAMILY_CHAINS(GN_FAMILY_PATHS)
#undef GN_FAMILY_PATHS
  return 0;
}

inline int chain_vector_count(int64_t pro, int64_t epi, int* scalars) {
#define GN_FAMILY_COUNTS(P, E, PATHS)                                                        \
  if (pro == P && epi == E) {                                                                \
    *scalars = ProOf<P, float>::type::kScalars + EpiOf<E, float>::type::kScalars;                          \
    return ProOf<P, float>::type::kVectors + EpiOf<E, float>::type::kVectors;                              \
  }
  GN_FAMILY_CHAINS(GN_FAMILY_COUNTS)
#undef GN_FAMILY_COUNTS
  *scalars = 0;
  return -1;
}

// What one call computes, checked and resolved by `prepare` (host only).
struct Problem {
  int64_t N = 0, C = 0, G = 0, cpg = 0;
  int64_t H = 1, W = 1;        // the last two dims of x when a pool needs them
  int64_t S_in = 1;            // spatial elements of x per (n, c)
  int64_t S = 1;               // spatial elements of the GroupNorm input per (n, c) (after input_pool)
  int64_t in_pool = 1, out_pool = 1;
  int64_t OH = 1, OW = 1;      // max_pool output
  int output = kStore;
  int stats_mode = 0;          // kStatsRound | kFusedAffine | kEpsRound
  bool channels_last = false;  // x is (N, *, C) in memory: the CUDA channels-last path (set by its launcher)
  float eps = 1e-5f;           // rounded to the data type under kEpsRound
  Args args{};
};

inline std::vector<int64_t> output_shape(const at::Tensor& x, const Problem& p) {
  switch (p.output) {
    case kMeanAll: return {p.N};
    case kMeanSpatial: return {p.N, p.C};
    case kMinChannels: return {p.N, 1};
    case kMaxPool: return {p.N, p.C, p.OH, p.OW};
    default: break;
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  if (p.in_pool > 1) {
    shape[2] = p.H / p.in_pool;
    shape[3] = p.W / p.in_pool;
  }
  return shape;
}

inline bool is_channels_last_dense(const at::Tensor& x) {
  return (x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
         (x.dim() == 5 && x.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}

// channel_moments by PyTorch's var_mean in float32 (the CPU op; on CUDA the inputs its kernels do not take):
// (2, C), each channel's mean and biased variance over the other dimensions of x (N, C, *).
inline at::Tensor channel_moments_var_mean(const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 2, gn_inline_msg::cat("channel_moments: expected an input of at least 2 dimensions (N, C, *), "
                                               "got shape ", gn_inline_msg::shape(x.sizes())));
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const auto [var, mean] = at::var_mean(x.to(at::kFloat), dims, /*correction=*/0, /*keepdim=*/false);
  return at::stack({mean, var});
}

// The layouts the operator reads: contiguous, or channels_last (4-D) / channels_last_3d (5-D) dense.
inline bool dense_layout(const at::Tensor& x) { return x.is_contiguous() || is_channels_last_dense(x); }

inline at::MemoryFormat channels_last_format_of(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 || x.dim() == 5,
              gn_inline_msg::cat("to_channels_last: expected a 4-D or 5-D input (N, C, *), got shape ",
                                 gn_inline_msg::shape(x.sizes())));
  return x.dim() == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
}

// Checks every argument, fills a Problem (vectors as float32 contiguous copies kept alive in `keep`).
inline Problem prepare(const at::Tensor& x, int64_t num_groups, const at::Tensor& weight, const at::Tensor& bias,
                       double eps, int64_t prologue, int64_t epilogue, at::TensorList vectors, at::ArrayRef<double> scalars,
                       int64_t input_pool, int64_t output, int64_t output_pool, int64_t stats_mode,
                       const std::optional<at::Tensor>& input_bias, std::vector<at::Tensor>& keep) {
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
              gn_inline_msg::not_implemented_for("fused_group_norm", t));
  TORCH_CHECK(x.dim() >= 2, gn_inline_msg::cat("fused_group_norm: expected an input of at least 2 dimensions "
                                               "(N, C, *), got shape ", gn_inline_msg::shape(x.sizes())));
  TORCH_CHECK(dense_layout(x), "fused_group_norm: expected a contiguous or channels_last input");
  Problem p;
  p.N = x.size(0);
  p.C = x.size(1);
  p.G = num_groups;
  TORCH_CHECK(stats_mode >= 0 && stats_mode <= (kStatsRound | kFusedAffine | kEpsRound),
              gn_inline_msg::cat("fused_group_norm: unknown stats_mode ", stats_mode));
  p.stats_mode = static_cast<int>(stats_mode);
  p.eps = static_cast<float>(eps);
  if (stats_mode & kEpsRound) {
    if (t == at::kHalf) p.eps = static_cast<float>(static_cast<c10::Half>(p.eps));
    if (t == at::kBFloat16) p.eps = static_cast<float>(static_cast<c10::BFloat16>(p.eps));
  }
  TORCH_CHECK(num_groups > 0, gn_inline_msg::cat("Expected num groups to be greater than 0, got ", num_groups));
  TORCH_CHECK(p.C % num_groups == 0,
              gn_inline_msg::cat("Expected number of channels in input to be divisible by num_groups, but got "
                                 "input of shape ", gn_inline_msg::shape(x.sizes()), " and num_groups=", num_groups));
  p.cpg = p.C / p.G;
  for (int64_t d = 2; d < x.dim(); ++d) p.S_in *= x.size(d);
  const int paths = chain_paths(prologue, epilogue);
  TORCH_CHECK(paths != 0, gn_inline_msg::cat("fused_group_norm: the chain (prologue ", prologue, ", epilogue ",
                                             epilogue, ") is not built; see GN_FAMILY_CHAINS"));
  TORCH_CHECK(output >= kStore && output <= kMinChannels,
              gn_inline_msg::cat("fused_group_norm: unknown output code ", output));
  p.output = static_cast<int>(output);
  p.in_pool = input_pool < 1 ? 1 : input_pool;
  p.out_pool = output_pool < 1 ? 1 : output_pool;
  if (p.in_pool > 1 || output == kMaxPool) {
    TORCH_CHECK(x.dim() == 4, gn_inline_msg::cat("fused_group_norm: a max-pool needs a 4-D input (N, C, H, W), "
                                                 "got shape ", gn_inline_msg::shape(x.sizes())));
    p.H = x.size(2);
    p.W = x.size(3);
  }
  TORCH_CHECK(!(p.in_pool > 1 && output == kMaxPool), "fused_group_norm: input_pool and a max_pool output together");
  p.S = p.S_in;
  if (p.in_pool > 1) {
    TORCH_CHECK(p.H >= p.in_pool && p.W >= p.in_pool,
                gn_inline_msg::cat("fused_group_norm: input_pool ", p.in_pool, " larger than the input ",
                                   gn_inline_msg::shape(x.sizes())));
    p.S = (p.H / p.in_pool) * (p.W / p.in_pool);
  }
  if (output == kMaxPool) {
    TORCH_CHECK(p.out_pool > 1 && p.H >= p.out_pool && p.W >= p.out_pool,
                gn_inline_msg::cat("fused_group_norm: max_pool window ", p.out_pool, " does not fit the input ",
                                   gn_inline_msg::shape(x.sizes())));
    p.OH = p.H / p.out_pool;
    p.OW = p.W / p.out_pool;
  }
  if (output == kMinChannels) {
    TORCH_CHECK(x.dim() == 2, "fused_group_norm: the min_channels output takes a 2-D input (N, C)");
  }
  TORCH_CHECK((paths & kRowsPath) || output != kMinChannels,
              "fused_group_norm: this chain is not built for the min_channels output");
  if (!(paths & kSlicePath)) {
    TORCH_CHECK(x.dim() == 2 && (output == kStore || output == kMinChannels),
                gn_inline_msg::cat("fused_group_norm: the chain (prologue ", prologue, ", epilogue ", epilogue,
                                   ") is built for 2-D inputs (N, C) and the store/min_channels outputs only"));
  }
  TORCH_CHECK(p.N * p.cpg * p.S > 1 || p.N == 0,
              gn_inline_msg::cat("Expected more than 1 value per channel when training, got input size ",
                                 gn_inline_msg::shape(x.sizes())));
  int n_scalars = 0;
  const int n_vectors = chain_vector_count(prologue, epilogue, &n_scalars);
  TORCH_CHECK(static_cast<int64_t>(vectors.size()) == n_vectors && static_cast<int64_t>(scalars.size()) == n_scalars,
              gn_inline_msg::cat("fused_group_norm: the chain takes ", n_vectors, " vectors and ", n_scalars,
                                 " scalars, got ", vectors.size(), " and ", scalars.size()));
  auto as_vector = [&](const at::Tensor& v, const char* what) -> const float* {
    TORCH_CHECK(v.numel() == p.C, gn_inline_msg::cat("fused_group_norm: expected ", what, " of ", p.C,
                                                     " elements, got shape ", gn_inline_msg::shape(v.sizes())));
    TORCH_CHECK(v.device() == x.device(),
                gn_inline_msg::cat("Expected all tensors to be on the same device, but found at least two devices, ",
                                   x.device().str(), " and ", v.device().str(), "!"));
    keep.push_back(v.reshape({p.C}).to(at::kFloat).contiguous());
    return keep.back().data_ptr<float>();
  };
  for (int i = 0; i < n_vectors; ++i) p.args.vec[i] = as_vector(vectors[i], "a chain vector");
  for (int i = 0; i < n_scalars; ++i) p.args.scal[i] = static_cast<float>(scalars[i]);
  p.args.vec[kMaxVectors - 2] = as_vector(weight, "weight");
  p.args.vec[kMaxVectors - 1] = as_vector(bias, "bias");
  p.args.in_bias = input_bias.has_value() && input_bias->defined() ? as_vector(*input_bias, "input_bias") : nullptr;
  return p;
}

// v' at (channel row `xr` of length S_in, GroupNorm position s): the prologue, max-pooled when in_pool > 1.
template <typename T, class Pro>
GN_HD float load_value(const T* xr, int64_t s, int64_t c, const Pro& pro, const Problem& p) {
  if (p.in_pool <= 1) return pro(static_cast<float>(xr[s]), c);
  const int64_t ow = p.W / p.in_pool;
  const int64_t h0 = (s / ow) * p.in_pool, w0 = (s % ow) * p.in_pool;
  float m = -INFINITY;
  for (int64_t i = 0; i < p.in_pool; ++i)
    for (int64_t j = 0; j < p.in_pool; ++j) m = maximum_nan(m, pro(static_cast<float>(xr[(h0 + i) * p.W + w0 + j]), c));
  return m;
}

}  // namespace gn_family
""" + CONV3D_DIRECT_CHECKS

FAMILY_CPU_TEMPLATE = FAMILY_COMMON_TEMPLATE + CONV3D_DIRECT_CPU + r"""
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>

namespace gn_family {

template <typename T, int P, int E>
void run_cpu(const at::Tensor& x, const Problem& p, at::Tensor& out) {
  using Pro = WithInputBias<typename ProOf<P, T>::type, T>;
  using Epi = typename EpiOf<E, T>::type;
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  const float* gw = p.args.vec[kMaxVectors - 2];
  const float* gb = p.args.vec[kMaxVectors - 1];
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t slice = p.cpg * p.S;
  at::parallel_for(0, p.N, 1, [&](int64_t first, int64_t last) {
    std::vector<float> v(static_cast<size_t>(slice));
    for (int64_t n = first; n < last; ++n) {
      double total = 0.0;                                       // mean_all
      float row_min = std::numeric_limits<float>::infinity();   // min_channels
      for (int64_t g = 0; g < p.G; ++g) {
        double sum = 0.0;
        for (int64_t j = 0; j < p.cpg; ++j) {
          const int64_t c = g * p.cpg + j;
          const T* xr = xp + (n * p.C + c) * p.S_in;
          for (int64_t s = 0; s < p.S; ++s) {
            const float val = load_value<T, Pro>(xr, s, c, pro, p);
            v[j * p.S + s] = val;
            sum += val;
          }
        }
        const double mean = sum / static_cast<double>(slice);
        double m2 = 0.0;
        for (int64_t i = 0; i < slice; ++i) m2 += (v[i] - mean) * (v[i] - mean);
        float meanf = static_cast<float>(mean);
        float rstd = static_cast<float>(1.0 / std::sqrt(m2 / static_cast<double>(slice) + p.eps));
        round_stats<T>(p.stats_mode, meanf, rstd);
        for (int64_t j = 0; j < p.cpg; ++j) {
          const int64_t c = g * p.cpg + j;
          const float* vr = v.data() + j * p.S;
          const ChannelAffine aff(meanf, rstd, gw[c], gb[c], (p.stats_mode & kFusedAffine) != 0);
          auto e_at = [&](int64_t s) { return epi(rnd<T>(aff(vr[s])), c); };
          if (p.output == kStore) {
            T* o = op + (n * p.C + c) * p.S;
            for (int64_t s = 0; s < p.S; ++s) o[s] = static_cast<T>(e_at(s));
          } else if (p.output == kMeanAll || p.output == kMeanSpatial) {
            double channel = 0.0;
            for (int64_t s = 0; s < p.S; ++s) channel += e_at(s);
            total += channel;
            if (p.output == kMeanSpatial) op[n * p.C + c] = static_cast<T>(channel / static_cast<double>(p.S));
          } else if (p.output == kMinChannels) {
            for (int64_t s = 0; s < p.S; ++s) row_min = minimum_nan(row_min, e_at(s));
          } else {  // kMaxPool, window out_pool, stride out_pool
            T* o = op + (n * p.C + c) * p.OH * p.OW;
            for (int64_t oh = 0; oh < p.OH; ++oh)
              for (int64_t ow = 0; ow < p.OW; ++ow) {
                float m = -std::numeric_limits<float>::infinity();
                for (int64_t i = 0; i < p.out_pool; ++i)
                  for (int64_t k = 0; k < p.out_pool; ++k)
                    m = maximum_nan(m, e_at((oh * p.out_pool + i) * p.W + ow * p.out_pool + k));
                o[oh * p.OW + ow] = static_cast<T>(m);
              }
          }
        }
      }
      if (p.output == kMeanAll) op[n] = static_cast<T>(total / static_cast<double>(p.C * p.S));
      if (p.output == kMinChannels) op[n] = static_cast<T>(row_min);
    }
  });
}

template <typename T>
void dispatch_cpu(const at::Tensor& x, int64_t pro, int64_t epi, const Problem& p, at::Tensor& out) {
#define GN_FAMILY_CPU_CASE(P, E, PATHS) \
  if (pro == P && epi == E) return run_cpu<T, P, E>(x, p, out);
  GN_FAMILY_CHAINS(GN_FAMILY_CPU_CASE)
#undef GN_FAMILY_CPU_CASE
}

at::Tensor fused_group_norm_cpu(const at::Tensor& x_in, int64_t num_groups, const at::Tensor& weight,
                                const at::Tensor& bias, double eps, int64_t prologue, int64_t epilogue,
                                at::TensorList vectors, at::ArrayRef<double> scalars, int64_t input_pool,
                                int64_t output, int64_t output_pool, int64_t stats_mode,
                                const std::optional<at::Tensor>& input_bias) {
  TORCH_CHECK(x_in.device().is_cpu(), "fused_group_norm_cpu: expected a CPU tensor");
  TORCH_CHECK(dense_layout(x_in), "fused_group_norm: expected a contiguous or channels_last input");
  // The CPU kernel (the family's reference) reads (N, C, *); a channels_last input is copied, and a store output
  // given back in the input's memory format, as the CUDA kernel writes it.
  const at::Tensor x = x_in.contiguous();
  std::vector<at::Tensor> keep;
  const Problem p = prepare(x, num_groups, weight, bias, eps, prologue, epilogue, vectors, scalars, input_pool,
                            output, output_pool, stats_mode, input_bias, keep);
  at::Tensor out = at::empty(output_shape(x, p), x.options());
  if (p.N == 0 || p.C == 0) return out;
  switch (x.scalar_type()) {
    case at::kHalf: dispatch_cpu<c10::Half>(x, prologue, epilogue, p, out); break;
    case at::kBFloat16: dispatch_cpu<c10::BFloat16>(x, prologue, epilogue, p, out); break;
    default: dispatch_cpu<float>(x, prologue, epilogue, p, out); break;
  }
  if (p.output == kStore && !x_in.is_contiguous()) return out.contiguous(x_in.suggest_memory_format());
  return out;
}


at::Tensor to_channels_last_cpu(const at::Tensor& x) { return x.contiguous(channels_last_format_of(x)); }

at::Tensor channel_moments_cpu(const at::Tensor& x) { return channel_moments_var_mean(x); }

}  // namespace gn_family

TORCH_LIBRARY(GN_NAMESPACE, m) {
  m.def("@FAMILY_SCHEMA@");
  m.def("@TO_CHANNELS_LAST_SCHEMA@");
  m.def("@CHANNEL_MOMENTS_SCHEMA@");
  m.def("@CONV3D_DIRECT_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CPU, m) {
  m.impl("fused_group_norm", &gn_family::fused_group_norm_cpu);
  m.impl("to_channels_last", &gn_family::to_channels_last_cpu);
  m.impl("channel_moments", &gn_family::channel_moments_cpu);
  m.impl("conv3d_direct", &gn_conv::conv3d_direct_cpu);
}
""".replace("@FAMILY_SCHEMA@", FAMILY_SCHEMA).replace("@TO_CHANNELS_LAST_SCHEMA@", TO_CHANNELS_LAST_SCHEMA).replace(
    "@CHANNEL_MOMENTS_SCHEMA@", CHANNEL_MOMENTS_SCHEMA).replace(
    "@CONV3D_DIRECT_SCHEMA@", CONV3D_DIRECT_SCHEMA)
