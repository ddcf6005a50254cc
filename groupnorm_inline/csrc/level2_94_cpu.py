"""C++ sources of KernelBench level 2 #94 (Gemm -> +bias -> Hardtanh -> Mish -> GroupNorm): the operator
schemas, the element math shared by the CPU and CUDA kernels, and the CPU kernels.

Two operators, registered under P94_NAMESPACE (a token: `with_namespace` puts the real name in):

  split_rows(src (R, K) f32, format, lo_first) -> (cat (R, 2K), row_scale (R,) f32)
      Each float32 value as a high and a low part that tensor cores take exactly, laid side by side:
      cat = [hi | lo], or [lo | hi] when `lo_first`. format 0: both parts TF32 values (float32 storage
      with the low 13 mantissa bits zero, rounded to nearest even); row_scale is 1. format 1: float16
      parts of the row scaled by a power of two so that its largest magnitude lies in [0.5, 1):
          src[r, k] = row_scale[r] * (hi + lo * 2^-12)      (to about 2^-24 relative)
      The low part is stored times 2^12 so that it stays a normal float16 number.

  epilogue(parts, part_scales, row_scale?, col_scale?, linear_bias, bias, gn_weight, gn_bias, G, eps) -> y
      acc[m, n] = (sum_p part_scales[p] * parts[p][m, n]) * row_scale[m] * col_scale[n]
      v = (acc + linear_bias[n]) + bias[n];  h = clamp(v, -1, 1);  u = h * tanh(log1p(exp(h)))
      y = GroupNorm(u) over groups of C/G consecutive columns of a row, affine (gn_weight, gn_bias).
      `parts` are the float32 GEMM results (M, N) whose sum is the product; all scales are powers of two,
      so the scaling is exact.

The CPU kernels follow the CUDA algorithm step for step where the arithmetic is concerned (same element
functions, same summation order of the parts, two sweeps over the group's values for mean and variance),
with double accumulators for the statistics.
"""

from .message import MESSAGE_HEADER

# torch.library namespace of the #94 operators. The sources spell it GN_NAMESPACE, replaced by
# `group_norm_cpu.with_namespace`, so an exported single file can register them under another name.
P94_NAMESPACE = "groupnorm_inline_p94"

SPLIT_SCHEMA = "split_rows(Tensor src, int format, bool lo_first) -> (Tensor, Tensor)"
EPILOGUE_SCHEMA = ("epilogue(Tensor[] parts, float[] part_scales, Tensor? row_scale, Tensor? col_scale, "
                   "Tensor linear_bias, Tensor bias, Tensor gn_weight, Tensor gn_bias, int num_groups, float eps)"
                   " -> Tensor")

# Shared by both translation units: error messages (gn_inline_msg), element functions (host and device) and
# argument checks (host).
P94_COMMON_TEMPLATE = MESSAGE_HEADER + r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define P94_HD __host__ __device__ __forceinline__
#else
#define P94_HD inline
#endif

namespace p94 {

constexpr int kMaxParts = 8;           // GEMM partial products one epilogue launch can sum
constexpr int kFormatTF32 = 0;
constexpr int kFormatFP16 = 1;
constexpr float kLowPartScale = 4096.0f;  // float16 low parts are stored times 2^12

P94_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

P94_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

// x rounded to the nearest TF32 value (10 explicit mantissa bits), ties to even; inf and NaN unchanged.
// A carry out of the mantissa moves to the next binade (or to inf), as round-to-nearest requires.
P94_HD float round_to_tf32(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u += 0x0fffu + ((u >> 13) & 1u);
  return bits_float(u & 0xffffe000u);
}

// The power-of-two exponent e with amax * 2^-e in [0.5, 1), clamped so that 2^e and 2^-e are normal
// floats; 0 when amax is zero or not finite (such rows are left unscaled).
P94_HD int row_exponent(float amax) {
  if (!(amax > 0.0f) || !(amax <= 3.4028234663852886e38f)) return 0;
  int e = 0;
  (void)frexpf(amax, &e);
  return e < -126 ? -126 : (e > 126 ? 126 : e);
}

// Hardtanh(-1, 1); NaN stays NaN (both comparisons are false), as torch.clamp.
P94_HD float hardtanh(float v) { return v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v); }

// Mish as PyTorch computes it in float32: x * tanh(log1p(exp(x))). Its input here lies in [-1, 1].
P94_HD float mish(float h) { return h * tanhf(log1pf(expf(h))); }

// bias, Hardtanh and Mish of one GEMM result; the Linear bias is added first, as F.linear does.
P94_HD float activation(float acc, float linear_bias, float bias) {
  return mish(hardtanh((acc + linear_bias) + bias));
}

// Argument checks shared by the CPU and CUDA epilogues (host only).
inline void check_vector(const at::Tensor& t, const char* name, int64_t n, const at::Tensor& like) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == n,
              gn_inline_msg::cat("p94 epilogue: expected ", name, " of shape [", n, "], got ",
                                 gn_inline_msg::shape(t.sizes())));
  TORCH_CHECK(t.scalar_type() == at::kFloat, gn_inline_msg::cat("p94 epilogue: expected ", name, " to be float32, got ",
                                                                gn_inline_msg::dtype_name(t.scalar_type())));
  TORCH_CHECK(t.device() == like.device(),
              gn_inline_msg::cat("Expected all tensors to be on the same device, but found ", like.device().str(),
                                 " and ", t.device().str(), " (", name, ")"));
  TORCH_CHECK(t.is_contiguous(), gn_inline_msg::cat("p94 epilogue: expected ", name, " to be contiguous"));
}

inline void check_epilogue_args(at::TensorList parts, at::ArrayRef<double> part_scales,
                                const std::optional<at::Tensor>& row_scale,
                                const std::optional<at::Tensor>& col_scale, const at::Tensor& linear_bias,
                                const at::Tensor& bias, const at::Tensor& gn_weight, const at::Tensor& gn_bias,
                                int64_t num_groups) {
  TORCH_CHECK(!parts.empty() && parts.size() <= static_cast<size_t>(kMaxParts),
              gn_inline_msg::cat("p94 epilogue: expected 1 to ", kMaxParts, " GEMM parts, got ", parts.size()));
  TORCH_CHECK(part_scales.size() == parts.size(), gn_inline_msg::cat("p94 epilogue: got ", parts.size(),
                                                                     " parts but ", part_scales.size(),
                                                                     " part scales"));
  const at::Tensor& first = parts[0];
  TORCH_CHECK(first.dim() == 2, gn_inline_msg::cat("p94 epilogue: expected 2-D GEMM parts, got shape ",
                                                   gn_inline_msg::shape(first.sizes())));
  for (const at::Tensor& p : parts) {
    TORCH_CHECK(p.sizes() == first.sizes(),
                gn_inline_msg::cat("p94 epilogue: GEMM parts differ in shape: ", gn_inline_msg::shape(first.sizes()),
                                   " and ", gn_inline_msg::shape(p.sizes())));
    TORCH_CHECK(p.scalar_type() == at::kFloat, gn_inline_msg::cat("p94 epilogue: expected float32 GEMM parts, got ",
                                                                  gn_inline_msg::dtype_name(p.scalar_type())));
    TORCH_CHECK(p.device() == first.device(),
                gn_inline_msg::cat("Expected all tensors to be on the same device, but found ",
                                   first.device().str(), " and ", p.device().str()));
    TORCH_CHECK(p.is_contiguous(), "p94 epilogue: expected contiguous GEMM parts");
  }
  const int64_t M = first.size(0), N = first.size(1);
  TORCH_CHECK(num_groups > 0, gn_inline_msg::cat("Expected num groups to be greater than 0, got ", num_groups));
  TORCH_CHECK(N % num_groups == 0,
              gn_inline_msg::cat("Expected number of channels in input to be divisible by num_groups, but got input "
                                 "of shape ", gn_inline_msg::shape(first.sizes()), " and num_groups=", num_groups));
  if (row_scale.has_value() && row_scale->defined()) check_vector(*row_scale, "row_scale", M, first);
  if (col_scale.has_value() && col_scale->defined()) check_vector(*col_scale, "col_scale", N, first);
  check_vector(linear_bias, "linear_bias", N, first);
  check_vector(bias, "bias", N, first);
  check_vector(gn_weight, "gn_weight", N, first);
  check_vector(gn_bias, "gn_bias", N, first);
}

inline void check_split_args(const at::Tensor& src, int64_t format) {
  TORCH_CHECK(src.dim() == 2, gn_inline_msg::cat("p94 split_rows: expected a 2-D tensor, got shape ",
                                                 gn_inline_msg::shape(src.sizes())));
  TORCH_CHECK(src.scalar_type() == at::kFloat,
              gn_inline_msg::cat("p94 split_rows: expected float32, got ",
                                 gn_inline_msg::dtype_name(src.scalar_type())));
  TORCH_CHECK(src.is_contiguous(), "p94 split_rows: expected a contiguous tensor");
  TORCH_CHECK(format == kFormatTF32 || format == kFormatFP16,
              gn_inline_msg::cat("p94 split_rows: format must be 0 (tf32) or 1 (float16), got ", format));
}

inline const float* optional_data(const std::optional<at::Tensor>& t) {
  return (t.has_value() && t->defined()) ? t->data_ptr<float>() : nullptr;
}

}  // namespace p94
"""

P94_CPU_TEMPLATE = P94_COMMON_TEMPLATE + r"""
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <vector>

namespace p94 {

std::tuple<at::Tensor, at::Tensor> split_rows_cpu(const at::Tensor& src, int64_t format, bool lo_first) {
  TORCH_CHECK(src.device().is_cpu(), "p94 split_rows_cpu: expected a CPU tensor");
  check_split_args(src, format);
  const int64_t R = src.size(0), K = src.size(1);
  const at::ScalarType part_type = format == kFormatTF32 ? at::kFloat : at::kHalf;
  at::Tensor cat = at::empty({R, 2 * K}, src.options().dtype(part_type));
  at::Tensor scale = at::empty({R}, src.options());
  const float* x = src.data_ptr<float>();
  float* s = scale.data_ptr<float>();
  const int64_t hi_at = lo_first ? K : 0, lo_at = lo_first ? 0 : K;
  at::parallel_for(0, R, 1, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const float* xr = x + r * K;
      if (format == kFormatTF32) {
        float* out = cat.data_ptr<float>() + r * 2 * K;
        for (int64_t k = 0; k < K; ++k) {
          const float hi = round_to_tf32(xr[k]);
          const bool finite = std::isfinite(xr[k]);
          out[hi_at + k] = hi;
          out[lo_at + k] = finite ? round_to_tf32(xr[k] - hi) : 0.0f;
        }
        s[r] = 1.0f;
      } else {
        c10::Half* out = cat.data_ptr<c10::Half>() + r * 2 * K;
        float amax = 0.0f;
        for (int64_t k = 0; k < K; ++k) amax = std::fmax(amax, std::fabs(xr[k]));
        const int e = row_exponent(amax);
        const float inv = std::ldexp(1.0f, -e);
        for (int64_t k = 0; k < K; ++k) {
          const float xs = xr[k] * inv;
          const c10::Half hi(xs);
          const float rest = xs - static_cast<float>(hi);  // exact: hi is xs rounded to 11 bits
          out[hi_at + k] = hi;
          out[lo_at + k] = c10::Half(std::isfinite(xs) ? rest * kLowPartScale : 0.0f);
        }
        s[r] = std::ldexp(1.0f, e);
      }
    }
  });
  return {cat, scale};
}

at::Tensor epilogue_cpu(at::TensorList parts, at::ArrayRef<double> part_scales,
                        const std::optional<at::Tensor>& row_scale, const std::optional<at::Tensor>& col_scale,
                        const at::Tensor& linear_bias, const at::Tensor& bias, const at::Tensor& gn_weight,
                        const at::Tensor& gn_bias, int64_t num_groups, double eps) {
  check_epilogue_args(parts, part_scales, row_scale, col_scale, linear_bias, bias, gn_weight, gn_bias, num_groups);
  TORCH_CHECK(parts[0].device().is_cpu(), "p94 epilogue_cpu: expected CPU tensors");
  const int64_t M = parts[0].size(0), N = parts[0].size(1), G = num_groups, cpg = N / G;
  at::Tensor y = at::empty({M, N}, parts[0].options());
  if (M == 0 || N == 0) return y;
  std::vector<const float*> part_ptr;
  std::vector<float> part_scale;
  for (size_t p = 0; p < parts.size(); ++p) {
    part_ptr.push_back(parts[p].data_ptr<float>());
    part_scale.push_back(static_cast<float>(part_scales[p]));
  }
  const float* rs = optional_data(row_scale);
  const float* cs = optional_data(col_scale);
  const float* lb = linear_bias.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  const float* gw = gn_weight.data_ptr<float>();
  const float* gb = gn_bias.data_ptr<float>();
  float* out = y.data_ptr<float>();
  at::parallel_for(0, M * G, 1, [&](int64_t first, int64_t last) {
    std::vector<float> u(static_cast<size_t>(cpg));
    for (int64_t task = first; task < last; ++task) {
      const int64_t row = task / G, c0 = (task % G) * cpg;
      double sum = 0;
      for (int64_t i = 0; i < cpg; ++i) {
        const int64_t off = row * N + c0 + i;
        float acc = 0.0f;
        for (size_t p = 0; p < part_ptr.size(); ++p) acc += part_scale[p] * part_ptr[p][off];
        if (rs) acc = acc * rs[row];
        if (cs) acc = acc * cs[c0 + i];
        u[i] = activation(acc, lb[c0 + i], b[c0 + i]);
        sum += u[i];
      }
      const double mean = sum / static_cast<double>(cpg);
      double m2 = 0;
      for (int64_t i = 0; i < cpg; ++i) m2 += (u[i] - mean) * (u[i] - mean);
      const float meanf = static_cast<float>(mean);
      const float rstd = static_cast<float>(1.0 / std::sqrt(m2 / static_cast<double>(cpg) + eps));
      for (int64_t i = 0; i < cpg; ++i)
        out[row * N + c0 + i] = std::fma((u[i] - meanf) * rstd, gw[c0 + i], gb[c0 + i]);
    }
  });
  return y;
}

}  // namespace p94

TORCH_LIBRARY(GN_NAMESPACE, m) {
  m.def("@SPLIT_SCHEMA@");
  m.def("@EPILOGUE_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CPU, m) {
  m.impl("split_rows", &p94::split_rows_cpu);
  m.impl("epilogue", &p94::epilogue_cpu);
}
""".replace("@SPLIT_SCHEMA@", SPLIT_SCHEMA).replace("@EPILOGUE_SCHEMA@", EPILOGUE_SCHEMA)
