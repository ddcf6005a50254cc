"""C++/CUDA source: the elementwise activations that GroupNorm kernels apply as an epilogue, y = act(z).

One header for the CPU and the CUDA kernels (functions are `__host__ __device__` under nvcc, plain inline
functions in the C++ translation unit). Every kernel of the package that writes a normalised value takes an
epilogue functor as a template parameter:

  Identity   z -> z: plain GroupNorm; the kernels compile it away (no extra registers or instructions).
  Runtime    the activation named by `Params::kind`, chosen per call. A kernel instantiated for Runtime serves
             every activation of the table below with one binary: the switch is uniform across the grid
             (every thread takes the same case) and sits beside a 16-byte load and store, and a memory-bound
             kernel has hundreds of thread-instructions of issue slack per vector at HBM rate, so it costs no
             measurable time, while a kernel per activation would multiply the build time by the table's size.
  (problem modules)  fixed chains of operations (a KernelBench problem's tail) written as functors of the same
             shape, compiled for that problem only.

`Params::kind` codes are fixed: groupnorm_inline/activations.py holds the same table for Python (names,
parameters, PyTorch references). Formulas and derivatives follow PyTorch's own kernels, including where the
derivative at a kink is taken (relu: 0 at z <= 0; hardtanh: 0 at z <= min or z >= max; hardswish: the
(z / 3 + 1/2) branch on [-3, 3]). The backward kernels recompute z from the saved statistics and the affine
parameters, then multiply the incoming gradient by `derivative(z)`: nothing extra is saved for the backward.
"""

ACTIVATION_HEADER = r"""
#ifndef GN_INLINE_ACTIVATION_HEADER
#define GN_INLINE_ACTIVATION_HEADER
#include <cmath>

#if defined(__CUDACC__)
#define GN_HD __host__ __device__ __forceinline__
#else
#define GN_HD inline
#endif

namespace gn_act {

// Codes shared with groupnorm_inline/activations.py; keep the two tables in step.
enum Kind : int {
  kNone = 0, kSilu = 1, kGelu = 2, kGeluTanh = 3, kRelu = 4, kLeakyRelu = 5, kMish = 6, kHardswish = 7,
  kHardtanh = 8, kSigmoid = 9, kTanh = 10, kNumKinds = 11
};

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

template <typename C> GN_HD C sigmoid(C z) { return C(1) / (C(1) + e_exp(-z)); }

// act(z) for the activation p.kind (kNone: z).
template <typename C>
GN_HD C forward(const Params& p, C z) {
  switch (p.kind) {
    case kSilu: return z / (C(1) + e_exp(-z));
    case kGelu: return C(0.5) * z * (C(1) + e_erf(z * C(0.70710678118654752440)));
    case kGeluTanh: {
      const C inner = C(0.79788456080286535588) * (z + C(0.044715) * z * z * z);
      return C(0.5) * z * (C(1) + e_tanh(inner));
    }
    case kRelu: return z <= C(0) ? C(0) : z;           // NaN stays NaN, as torch.relu
    case kLeakyRelu: return z > C(0) ? z : z * static_cast<C>(p.alpha);
    case kMish: return z * e_tanh(e_log1p(e_exp(z)));
    case kHardswish: {
      const C r = z + C(3);
      return z * (r < C(0) ? C(0) : (r > C(6) ? C(6) : r)) / C(6);
    }
    case kHardtanh: {
      const C lo = static_cast<C>(p.alpha), hi = static_cast<C>(p.beta);
      return z < lo ? lo : (z > hi ? hi : z);
    }
    case kSigmoid: return sigmoid(z);
    case kTanh: return e_tanh(z);
    default: return z;
  }
}

// d act / dz at z (kNone: 1).
template <typename C>
GN_HD C derivative(const Params& p, C z) {
  switch (p.kind) {
    case kSilu: {
      const C s = sigmoid(z);
      return s * (C(1) + z * (C(1) - s));
    }
    case kGelu: {
      const C cdf = C(0.5) * (C(1) + e_erf(z * C(0.70710678118654752440)));
      const C pdf = e_exp(C(-0.5) * z * z) * C(0.39894228040143267794);
      return cdf + z * pdf;
    }
    case kGeluTanh: {
      const C k = C(0.79788456080286535588), c = C(0.044715);
      const C t = e_tanh(k * (z + c * z * z * z));
      return C(0.5) * (C(1) + t) + C(0.5) * z * (C(1) - t * t) * k * (C(1) + C(3) * c * z * z);
    }
    case kRelu: return z > C(0) ? C(1) : C(0);
    case kLeakyRelu: return z > C(0) ? C(1) : static_cast<C>(p.alpha);
    case kMish: {
      const C tsp = e_tanh(e_log1p(e_exp(z)));
      return tsp + z * sigmoid(z) * (C(1) - tsp * tsp);
    }
    case kHardswish: return z < C(-3) ? C(0) : (z <= C(3) ? z / C(3) + C(0.5) : C(1));
    case kHardtanh:
      return (z <= static_cast<C>(p.alpha) || z >= static_cast<C>(p.beta)) ? C(0) : C(1);
    case kSigmoid: {
      const C s = sigmoid(z);
      return s * (C(1) - s);
    }
    case kTanh: {
      const C t = e_tanh(z);
      return C(1) - t * t;
    }
    default: return C(1);
  }
}

// Epilogue functors (template parameters of the kernels).
struct Identity {
  static constexpr bool kIsIdentity = true;
  template <typename C> GN_HD C operator()(C z) const { return z; }
  template <typename C> GN_HD C grad(C) const { return C(1); }
};

struct Runtime {
  static constexpr bool kIsIdentity = false;
  Params p;
  template <typename C> GN_HD C operator()(C z) const { return forward(p, z); }
  template <typename C> GN_HD C grad(C z) const { return derivative(p, z); }
};

}  // namespace gn_act
#endif  // GN_INLINE_ACTIVATION_HEADER
"""
