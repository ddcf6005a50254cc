"""C++/CUDA source: the elementwise activations that GroupNorm kernels apply as an epilogue, y = act(z).

One header for the CPU and the CUDA kernels (functions are `__host__ __device__` under nvcc, plain inline
functions in the C++ translation unit). Every kernel of the package that writes a normalised value takes an
epilogue functor as a template parameter:

  Identity   z -> z: plain GroupNorm; the kernels compile it away (no extra registers or instructions).
  Fixed<K>   one activation known at compile time (Silu = Fixed<kSilu>, the diffusion ResNet block's
             GroupNorm + SiLU): only its own instructions, the cheapest epilogue.
  Runtime    the activation named by `Params::kind`, chosen per call: one binary serves every activation of the
             table (a kernel per activation would multiply the build time by the table's size). The switch is
             uniform across the grid and taken once per vector of 4-8 values (`apply`), not per element.
             Measured on an H100 with a per-element switch and accurate expf/division, GroupNorm + SiLU cost
             1.3-2.2x GroupNorm alone where the kernel applies the epilogue from shared memory: there the
             epilogue's instructions, not memory, set the time. Hence Fixed<kSilu> and the MUFU-based sigmoid.
  (problem modules)  fixed chains of operations (a KernelBench problem's tail) written as functors of the same
             shape, compiled for that problem only.

`Params::kind` codes are fixed: groupnorm_inline/activations.py holds the same table for Python (names,
parameters, PyTorch references). Formulas and derivatives follow PyTorch's own kernels, including where the
derivative at a kink is taken (relu: 0 at z <= 0; hardtanh: 0 at z <= min or z >= max; hardswish: the
(z / 3 + 1/2) branch on [-3, 3]). The backward kernels recompute z from the saved statistics and the affine
parameters, then multiply the incoming gradient by `derivative(z)`: nothing extra is saved for the backward
(except on the CPU for sigmoid and tanh, whose autograd takes the derivative from the saved output as PyTorch's
does: group_norm_autograd.py).
"""

ACTIVATION_HEADER = r"""
#ifndef GN_INLINE_ACTIVATION_HEADER
#define GN_INLINE_ACTIVATION_HEADER
#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define GN_HD __host__ __device__ __forceinline__
#else
#define GN_HD inline
#endif
// `#pragma unroll` in the device pass only: the host compiler (gcc) warns on it, and warnings are errors.
#if defined(__CUDA_ARCH__)
#define GN_ACT_UNROLL _Pragma("unroll")
#else
#define GN_ACT_UNROLL
#endif

namespace gn_act {

// Codes shared with groupnorm_inline/activations.py; keep the two tables in step.
enum Kind : int {
  kNone = 0, kSilu = 1, kGelu = 2, kGeluTanh = 3, kRelu = 4, kLeakyRelu = 5, kMish = 6, kHardswish = 7,
  kHardtanh = 8, kSigmoid = 9, kTanh = 10, kNumKinds = 11
};

// Activations whose value or derivative needs an exp, tanh or erf (the others are piecewise polynomial): the
// costly ones to evaluate twice (host code).
constexpr bool is_transcendental(int kind) {
  return kind == kSilu || kind == kGelu || kind == kGeluTanh || kind == kMish || kind == kSigmoid || kind == kTanh;
}

// One activation with its parameters: alpha = negative_slope (leaky_relu) or min_val (hardtanh);
// beta = max_val (hardtanh). Unused parameters are ignored.
struct Params {
  int kind = kNone;
  double alpha = 0.0;
  double beta = 0.0;
};

// Overloads for the two compute types (float for fp32/fp16/bf16 data, double for fp64).
GN_HD float e_exp(float v) { return expf(v); }
GN_HD double e_exp(double v) { return exp(v); }
GN_HD float e_tanh(float v) { return tanhf(v); }
GN_HD double e_tanh(double v) { return tanh(v); }
GN_HD float e_erf(float v) { return erff(v); }
GN_HD double e_erf(double v) { return erf(v); }
GN_HD float e_log1p(float v) { return log1pf(v); }
GN_HD double e_log1p(double v) { return log1p(v); }

// 1 / (1 + exp(-z)). On the GPU in float: ex2.approx.ftz and rcp.approx.ftz (MUFU.EX2, MUFU.RCP: error ~2 ulp
// + 1.2|z| ulp from rounding -z * log2(e), i.e. < 3e-6 relative wherever the result is not 0) instead of the
// ~25-instruction accurate expf plus IEEE division, which made the epilogue issue-bound in the kernels that
// apply it from shared memory. The .ftz forms, not __expf/__fdividef: those are the non-ftz ex2/div, which wrap
// each MUFU in a range check and two predicated rescalings for subnormal arguments and results (8 instructions
// per element against 5; Nsight Compute counted 7.9 per element for the whole SiLU epilogue). Flushing costs
// nothing here: the exponential's argument is subnormal only where the result is 1 + 0, its result only where
// z > 87 (sigmoid = 1 in float), and 1 + exp(-z) >= 1 is never subnormal. For z < -88, exp(-z) is inf and the
// result 0 (float64: ~1e-38), as intended. float16/bfloat16 outputs round at 2^-11 / 2^-8; float32 outputs stay
// within 1e-6 relative of float64.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float ex2_approx_ftz(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float rcp_approx_ftz(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
#endif
GN_HD float sigmoid(float z) {
#if defined(__CUDA_ARCH__)
  return rcp_approx_ftz(1.0f + ex2_approx_ftz(z * -1.4426950408889634f));
#else
  return 1.0f / (1.0f + expf(-z));
#endif
}
GN_HD double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

// act(z) for an activation known at compile time (KIND = kNone: z).
template <int KIND, typename C>
GN_HD C forward_as(const Params& p, C z) {
  if constexpr (KIND == kSilu) {
    return z * sigmoid(z);
  } else if constexpr (KIND == kGelu) {
    return C(0.5) * z * (C(1) + e_erf(z * C(0.70710678118654752440)));
  } else if constexpr (KIND == kGeluTanh) {
    const C inner = C(0.79788456080286535588) * (z + C(0.044715) * z * z * z);
    return C(0.5) * z * (C(1) + e_tanh(inner));
  } else if constexpr (KIND == kRelu) {
    return z <= C(0) ? C(0) : z;  // NaN stays NaN, as torch.relu
  } else if constexpr (KIND == kLeakyRelu) {
    return z > C(0) ? z : z * static_cast<C>(p.alpha);
  } else if constexpr (KIND == kMish) {
    return z * e_tanh(e_log1p(e_exp(z)));
  } else if constexpr (KIND == kHardswish) {
    const C r = z + C(3);
    return z * (r < C(0) ? C(0) : (r > C(6) ? C(6) : r)) / C(6);
  } else if constexpr (KIND == kHardtanh) {
    const C lo = static_cast<C>(p.alpha), hi = static_cast<C>(p.beta);
    return z < lo ? lo : (z > hi ? hi : z);
  } else if constexpr (KIND == kSigmoid) {
    return sigmoid(z);
  } else if constexpr (KIND == kTanh) {
    return e_tanh(z);
  } else {
    return z;
  }
}

// d act / dz at z for an activation known at compile time (KIND = kNone: 1).
template <int KIND, typename C>
GN_HD C derivative_as(const Params& p, C z) {
  if constexpr (KIND == kSilu) {
    const C s = sigmoid(z);
    return s * (C(1) + z * (C(1) - s));
  } else if constexpr (KIND == kGelu) {
    const C cdf = C(0.5) * (C(1) + e_erf(z * C(0.70710678118654752440)));
    const C pdf = e_exp(C(-0.5) * z * z) * C(0.39894228040143267794);
    return cdf + z * pdf;
  } else if constexpr (KIND == kGeluTanh) {
    const C k = C(0.79788456080286535588), c = C(0.044715);
    const C t = e_tanh(k * (z + c * z * z * z));
    return C(0.5) * (C(1) + t) + C(0.5) * z * (C(1) - t * t) * k * (C(1) + C(3) * c * z * z);
  } else if constexpr (KIND == kRelu) {
    return z > C(0) ? C(1) : C(0);
  } else if constexpr (KIND == kLeakyRelu) {
    return z > C(0) ? C(1) : static_cast<C>(p.alpha);
  } else if constexpr (KIND == kMish) {
    const C tsp = e_tanh(e_log1p(e_exp(z)));
    return tsp + z * sigmoid(z) * (C(1) - tsp * tsp);
  } else if constexpr (KIND == kHardswish) {
    return z < C(-3) ? C(0) : (z <= C(3) ? z / C(3) + C(0.5) : C(1));
  } else if constexpr (KIND == kHardtanh) {
    return (z <= static_cast<C>(p.alpha) || z >= static_cast<C>(p.beta)) ? C(0) : C(1);
  } else if constexpr (KIND == kSigmoid) {
    const C s = sigmoid(z);
    return s * (C(1) - s);
  } else if constexpr (KIND == kTanh) {
    const C t = e_tanh(z);
    return C(1) - t * t;
  } else {
    return C(1);
  }
}

// Calls f(std::integral_constant<int, KIND>{}) for the runtime kind: the one switch of the table, so the
// per-call dispatch of forward, derivative and the vector epilogue stays in step with the enum.
template <typename F>
GN_HD void with_kind(int kind, F&& f) {
  switch (kind) {
    case kSilu: f(std::integral_constant<int, kSilu>{}); break;
    case kGelu: f(std::integral_constant<int, kGelu>{}); break;
    case kGeluTanh: f(std::integral_constant<int, kGeluTanh>{}); break;
    case kRelu: f(std::integral_constant<int, kRelu>{}); break;
    case kLeakyRelu: f(std::integral_constant<int, kLeakyRelu>{}); break;
    case kMish: f(std::integral_constant<int, kMish>{}); break;
    case kHardswish: f(std::integral_constant<int, kHardswish>{}); break;
    case kHardtanh: f(std::integral_constant<int, kHardtanh>{}); break;
    case kSigmoid: f(std::integral_constant<int, kSigmoid>{}); break;
    case kTanh: f(std::integral_constant<int, kTanh>{}); break;
    default: f(std::integral_constant<int, kNone>{}); break;
  }
}

// act(z) and d act / dz for the activation p.kind, chosen per call.
template <typename C>
GN_HD C forward(const Params& p, C z) {
  C out = z;
  with_kind(p.kind, [&](auto k) { out = forward_as<decltype(k)::value>(p, z); });
  return out;
}
template <typename C>
GN_HD C derivative(const Params& p, C z) {
  C out = C(1);
  with_kind(p.kind, [&](auto k) { out = derivative_as<decltype(k)::value>(p, z); });
  return out;
}

// Epilogue functors (template parameters of the kernels). Each has operator() and grad for one value and
// apply(z[N]) for the N values of a vector, which a kernel calls once per vector so that Runtime branches once
// per vector, not once per element.
struct Identity {
  static constexpr bool kIsIdentity = true;
  template <typename C> GN_HD C operator()(C z) const { return z; }
  template <typename C> GN_HD C grad(C) const { return C(1); }
  template <typename C, int N> GN_HD void apply(C (&)[N]) const {}
};

// One activation fixed at compile time: the kernels instantiated for it carry only its instructions.
template <int KIND>
struct Fixed {
  static constexpr bool kIsIdentity = false;
  Params p;
  template <typename C> GN_HD C operator()(C z) const { return forward_as<KIND>(p, z); }
  template <typename C> GN_HD C grad(C z) const { return derivative_as<KIND>(p, z); }
  template <typename C, int N> GN_HD void apply(C (&z)[N]) const {
    GN_ACT_UNROLL
    for (int k = 0; k < N; ++k) z[k] = forward_as<KIND>(p, z[k]);
  }
};
using Silu = Fixed<kSilu>;  // GroupNorm + SiLU, the diffusion ResNet block: its own instantiation

struct Runtime {
  static constexpr bool kIsIdentity = false;
  Params p;
  template <typename C> GN_HD C operator()(C z) const { return forward(p, z); }
  template <typename C> GN_HD C grad(C z) const { return derivative(p, z); }
  template <typename C, int N> GN_HD void apply(C (&z)[N]) const {
    with_kind(p.kind, [&](auto kind) {
      GN_ACT_UNROLL
      for (int k = 0; k < N; ++k) z[k] = forward_as<decltype(kind)::value>(p, z[k]);
    });
  }
};

}  // namespace gn_act
#endif  // GN_INLINE_ACTIVATION_HEADER
"""
