"""CUDA source of the GroupNorm forward: statistics per (n, g) slice, then y = x * a[c] + b[c].

Layout: the input is contiguous (N, C, HW) with HW the product of the trailing dims; the (n, g) slice is
the D = (C / G) * HW contiguous elements starting at (n * C + g * C / G) * HW. Three launch plans:

  fused   one CTA per slice: reduce the slice, then normalise it (the second read hits L2/L1 when the
          slice is small, HBM otherwise). One launch; chosen when the slices alone fill the GPU.
  split   several CTAs per slice: `gn_stats_partial` writes per-CTA sums, `gn_finalize` turns them
          into mean/rstd, `gn_apply` normalises. Chosen when there are too few slices to fill the GPU.

Numerics: sums of (x - K) and (x - K)^2 with K the slice's first element, so |mean| >> std does not
cancel; each thread adds UNROLL*VEC elements in the compute type (float for fp32/fp16/bf16) before
folding them into double, and CTAs combine their sums in double.
"""

from .common_cuda import COMMON_CUDA_HEADER

# Registers the CUDA kernels under GN_NAMESPACE (see group_norm_cpu.with_namespace).
GROUP_NORM_FORWARD_CUDA_TEMPLATE = COMMON_CUDA_HEADER + r"""
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace gn_inline {

template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

// Per-thread shifted sums over xs[begin, end), a multiple of VEC elements, starting at a VEC boundary.
template <typename T, typename I, int VEC>
__device__ __forceinline__ void shifted_sums(const T* __restrict__ xs, I begin, I end,
                                             typename Compute<T>::type K, double& s, double& ss) {
  using C = typename Compute<T>::type;
  const I stride = static_cast<I>(blockDim.x) * VEC;
  I j = begin + static_cast<I>(threadIdx.x) * VEC;
  for (; j + (kUnroll - 1) * stride < end; j += kUnroll * stride) {
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_vec<T, VEC>(xs + j + u * stride);
    C ls = 0, lss = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const C d = static_cast<C>(v[u].v[k]) - K;
        ls += d;
        lss += d * d;
      }
    s += ls;
    ss += lss;
  }
  for (; j < end; j += stride) {
    const Vec<T, VEC> v = load_vec<T, VEC>(xs + j);
    C ls = 0, lss = 0;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const C d = static_cast<C>(v.v[k]) - K;
      ls += d;
      lss += d * d;
    }
    s += ls;
    ss += lss;
  }
}

// y = x * a + b over one vector whose first element is at slice offset j; channel of element k is
// (j + k) / HW. `w`, `b` point at the group's first channel; unused when !AFFINE.
template <typename T, typename I, int VEC, bool AFFINE>
__device__ __forceinline__ Vec<T, VEC> normalize_vec(const Vec<T, VEC>& v, I j, I HW, bool channel_per_vec,
                                                     const typename Compute<T>::type* __restrict__ w,
                                                     const typename Compute<T>::type* __restrict__ b,
                                                     typename Compute<T>::type mean,
                                                     typename Compute<T>::type rstd) {
  using C = typename Compute<T>::type;
  Vec<T, VEC> out;
  if (!AFFINE) {
    const C shift = -mean * rstd;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = static_cast<T>(static_cast<C>(v.v[k]) * rstd + shift);
  } else if (channel_per_vec) {  // HW % VEC == 0: the whole vector lies in one channel
    const I c = j / HW;
    const C a = rstd * w[c];
    const C shift = b[c] - mean * a;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = static_cast<T>(static_cast<C>(v.v[k]) * a + shift);
  } else {  // the vector may cross channel boundaries (HW < VEC or HW % VEC != 0)
    I c = j / HW;
    I r = j - c * HW;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      if (r == HW) { ++c; r = 0; }
      const C a = rstd * w[c];
      out.v[k] = static_cast<T>(static_cast<C>(v.v[k]) * a + (b[c] - mean * a));
      ++r;
    }
  }
  return out;
}

template <typename T, typename I, int VEC, bool AFFINE>
__device__ __forceinline__ void normalize_range(const T* __restrict__ xs, T* __restrict__ ys, I begin, I end,
                                                I HW, const typename Compute<T>::type* __restrict__ w,
                                                const typename Compute<T>::type* __restrict__ b,
                                                typename Compute<T>::type mean,
                                                typename Compute<T>::type rstd) {
  const bool channel_per_vec = (HW % VEC) == 0;
  const I stride = static_cast<I>(blockDim.x) * VEC;
  I j = begin + static_cast<I>(threadIdx.x) * VEC;
  for (; j + (kUnroll - 1) * stride < end; j += kUnroll * stride) {
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_vec<T, VEC>(xs + j + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      store_vec_streaming<T, VEC>(
          ys + j + u * stride,
          normalize_vec<T, I, VEC, AFFINE>(v[u], j + u * stride, HW, channel_per_vec, w, b, mean, rstd));
  }
  for (; j < end; j += stride)
    store_vec_streaming<T, VEC>(
        ys + j, normalize_vec<T, I, VEC, AFFINE>(load_vec<T, VEC>(xs + j), j, HW, channel_per_vec, w, b, mean, rstd));
}

template <typename C>
__device__ __forceinline__ void mean_rstd_from_sums(double s, double ss, double count, C K, double eps,
                                                    C& mean, C& rstd) {
  const double m = s / count;                       // mean of (x - K)
  const double var = fmax(ss / count - m * m, 0.0); // biased variance, as nn.GroupNorm
  mean = static_cast<C>(static_cast<double>(K) + m);
  rstd = static_cast<C>(1.0 / sqrt(var + eps));
}

// One CTA per (n, g) slice. x, y: (N*G slices, D); w, b: (C,) or null; mean, rstd: (N*G,).
template <typename T, typename I, int VEC, bool AFFINE>
__global__ void __launch_bounds__(kThreads) gn_fused_forward(
    const T* __restrict__ x, T* __restrict__ y, const typename Compute<T>::type* __restrict__ w,
    const typename Compute<T>::type* __restrict__ b, typename Compute<T>::type* __restrict__ mean_out,
    typename Compute<T>::type* __restrict__ rstd_out, int64_t G, int64_t channels_per_group, I HW, I D,
    double eps) {
  using C = typename Compute<T>::type;
  __shared__ double scratch[64];
  const int64_t slice = blockIdx.x;
  const T* xs = x + slice * static_cast<int64_t>(D);
  T* ys = y + slice * static_cast<int64_t>(D);
  const C K = static_cast<C>(xs[0]);
  double s = 0, ss = 0;
  shifted_sums<T, I, VEC>(xs, I(0), D, K, s, ss);
  block_sum2(s, ss, scratch);
  C mean, rstd;
  mean_rstd_from_sums<C>(s, ss, static_cast<double>(D), K, eps, mean, rstd);
  if (threadIdx.x == 0) { mean_out[slice] = mean; rstd_out[slice] = rstd; }
  const int64_t c0 = (slice % G) * channels_per_group;
  normalize_range<T, I, VEC, AFFINE>(xs, ys, I(0), D, HW, AFFINE ? w + c0 : w, AFFINE ? b + c0 : b, mean, rstd);
}

// Split plan, step 1: CTA (slice, split) sums chunk `split` of its slice. partial: (N*G, splits, 2).
template <typename T, typename I, int VEC>
__global__ void __launch_bounds__(kThreads) gn_stats_partial(const T* __restrict__ x, double* __restrict__ partial,
                                                             I D, I chunk) {
  using C = typename Compute<T>::type;
  __shared__ double scratch[64];
  const int64_t slice = blockIdx.x;
  const T* xs = x + slice * static_cast<int64_t>(D);
  const C K = static_cast<C>(xs[0]);
  const I begin = static_cast<I>(blockIdx.y) * chunk;
  const I end = begin + chunk < D ? begin + chunk : D;
  double s = 0, ss = 0;
  shifted_sums<T, I, VEC>(xs, begin, end, K, s, ss);
  block_sum2(s, ss, scratch);
  if (threadIdx.x == 0) {
    double* p = partial + (slice * gridDim.y + blockIdx.y) * 2;
    p[0] = s;
    p[1] = ss;
  }
}

// Split plan, step 2: one thread per slice folds its splits into mean and rstd.
template <typename T>
__global__ void gn_finalize(const T* __restrict__ x, const double* __restrict__ partial, int64_t slices,
                            int splits, int64_t D, double eps, typename Compute<T>::type* __restrict__ mean_out,
                            typename Compute<T>::type* __restrict__ rstd_out) {
  using C = typename Compute<T>::type;
  const int64_t slice = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (slice >= slices) return;
  double s = 0, ss = 0;
  for (int k = 0; k < splits; ++k) {
    s += partial[(slice * splits + k) * 2];
    ss += partial[(slice * splits + k) * 2 + 1];
  }
  C mean, rstd;
  mean_rstd_from_sums<C>(s, ss, static_cast<double>(D), static_cast<C>(x[slice * D]), eps, mean, rstd);
  mean_out[slice] = mean;
  rstd_out[slice] = rstd;
}

// Split plan, step 3: CTA (slice, split) normalises chunk `split` of its slice.
template <typename T, typename I, int VEC, bool AFFINE>
__global__ void __launch_bounds__(kThreads) gn_apply(
    const T* __restrict__ x, T* __restrict__ y, const typename Compute<T>::type* __restrict__ w,
    const typename Compute<T>::type* __restrict__ b, const typename Compute<T>::type* __restrict__ mean_in,
    const typename Compute<T>::type* __restrict__ rstd_in, int64_t G, int64_t channels_per_group, I HW, I D,
    I chunk) {
  const int64_t slice = blockIdx.x;
  const int64_t offset = slice * static_cast<int64_t>(D);
  const I begin = static_cast<I>(blockIdx.y) * chunk;
  const I end = begin + chunk < D ? begin + chunk : D;
  const int64_t c0 = (slice % G) * channels_per_group;
  normalize_range<T, I, VEC, AFFINE>(x + offset, y + offset, begin, end, HW, AFFINE ? w + c0 : w,
                                     AFFINE ? b + c0 : b, mean_in[slice], rstd_in[slice]);
}

inline int sm_count(int device) {
  static int cached[64] = {0};
  if (device < 64 && cached[device]) return cached[device];
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device < 64) cached[device] = sms;
  return sms;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Launch plan for a contiguous (slices, D) problem with VEC-wide accesses.
template <typename T, typename I, int VEC, bool AFFINE>
void launch_forward(const T* x, T* y, const typename Compute<T>::type* w, const typename Compute<T>::type* b,
                    typename Compute<T>::type* mean, typename Compute<T>::type* rstd, int64_t slices, int64_t G,
                    int64_t channels_per_group, int64_t HW, int64_t D, double eps, int device,
                    const at::TensorOptions& opts, cudaStream_t stream) {
  // Enough CTAs for ~4 resident waves of 256-thread CTAs; each CTA should still stream >= 32 KB.
  const int64_t target_ctas = static_cast<int64_t>(sm_count(device)) * 32;
  const int64_t min_chunk = 8192;  // elements
  int64_t splits = slices >= target_ctas ? 1 : ceil_div(target_ctas, slices);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, D / min_chunk));
  splits = std::min<int64_t>(splits, 65535);
  if (splits == 1) {
    gn_fused_forward<T, I, VEC, AFFINE><<<static_cast<unsigned>(slices), kThreads, 0, stream>>>(
        x, y, w, b, mean, rstd, G, channels_per_group, static_cast<I>(HW), static_cast<I>(D), eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // Chunks are whole multiples of a warp's vector footprint so accesses stay aligned and coalesced.
  const int64_t quantum = 32 * VEC;
  const int64_t chunk = ceil_div(ceil_div(D, splits), quantum) * quantum;
  splits = ceil_div(D, chunk);
  at::Tensor partial = at::empty({slices * splits * 2}, opts.dtype(at::kDouble));
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(splits));
  gn_stats_partial<T, I, VEC><<<grid, kThreads, 0, stream>>>(x, partial.data_ptr<double>(), static_cast<I>(D),
                                                             static_cast<I>(chunk));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gn_finalize<T><<<static_cast<unsigned>(ceil_div(slices, 128)), 128, 0, stream>>>(
      x, partial.data_ptr<double>(), slices, static_cast<int>(splits), D, eps, mean, rstd);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gn_apply<T, I, VEC, AFFINE><<<grid, kThreads, 0, stream>>>(x, y, w, b, mean, rstd, G, channels_per_group,
                                                             static_cast<I>(HW), static_cast<I>(D),
                                                             static_cast<I>(chunk));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename I, bool AFFINE>
void dispatch_vec(const at::Tensor& x, at::Tensor& y, const at::Tensor& w, const at::Tensor& b, at::Tensor& mean,
                  at::Tensor& rstd, int64_t G, int64_t HW, double eps, cudaStream_t stream) {
  using C = typename Compute<T>::type;
  constexpr int V = vec16<T>();
  const int64_t N = x.size(0), Cn = x.size(1);
  const int64_t cpg = Cn / G, D = cpg * HW, slices = N * G;
  const T* xp = x.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  const C* wp = AFFINE ? w.data_ptr<C>() : nullptr;
  const C* bp = AFFINE ? b.data_ptr<C>() : nullptr;
  const bool aligned = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) && (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
  const int device = x.get_device();
  if (aligned && D % V == 0) {
    launch_forward<T, I, V, AFFINE>(xp, yp, wp, bp, mean.data_ptr<C>(), rstd.data_ptr<C>(), slices, G, cpg, HW, D,
                                    eps, device, x.options(), stream);
  } else {  // slices not 16-byte aligned: element-wise accesses
    launch_forward<T, I, 1, AFFINE>(xp, yp, wp, bp, mean.data_ptr<C>(), rstd.data_ptr<C>(), slices, G, cpg, HW, D,
                                    eps, device, x.options(), stream);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_forward_cuda(const at::Tensor& input, int64_t num_groups,
                                                                       const std::optional<at::Tensor>& weight,
                                                                       const std::optional<at::Tensor>& bias,
                                                                       double eps) {
  TORCH_CHECK(input.is_cuda(), "group_norm_forward_cuda: expected a CUDA input");
  TORCH_CHECK(input.dim() >= 2, "Expected at least 2 dimensions for input tensor but received ", input.dim());
  TORCH_CHECK(input.is_contiguous(), "group_norm_forward_cuda: expected a contiguous input");
  TORCH_CHECK(num_groups > 0 && input.size(1) % num_groups == 0,
              "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
              input.sizes(), " and num_groups=", num_groups);
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t N = input.size(0), C = input.size(1);
  const int64_t HW = C > 0 ? (N > 0 ? input.numel() / (N * C) : 1) : 0;
  const at::ScalarType acc = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor y = at::empty_like(input);
  at::Tensor mean = at::empty({N, num_groups}, input.options().dtype(acc));
  at::Tensor rstd = at::empty({N, num_groups}, input.options().dtype(acc));
  if (input.numel() == 0) return {y, mean, rstd};
  const bool affine = weight.has_value() && weight->defined();
  at::Tensor w, b;
  if (affine) {
    TORCH_CHECK(bias.has_value() && bias->defined(), "group_norm_forward_cuda: weight and bias come together");
    w = weight->to(acc).contiguous();
    b = bias->to(acc).contiguous();
    TORCH_CHECK(w.numel() == C && b.numel() == C, "group_norm_forward_cuda: weight/bias must have C elements");
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  // 32-bit slice offsets when a slice plus one CTA's stride stays well inside int32.
  const bool small = C / num_groups * HW < (int64_t(1) << 30);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_forward_cuda", [&] {
    if (affine) {
      if (small) dispatch_vec<scalar_t, int32_t, true>(input, y, w, b, mean, rstd, num_groups, HW, eps, stream);
      else dispatch_vec<scalar_t, int64_t, true>(input, y, w, b, mean, rstd, num_groups, HW, eps, stream);
    } else {
      if (small) dispatch_vec<scalar_t, int32_t, false>(input, y, w, b, mean, rstd, num_groups, HW, eps, stream);
      else dispatch_vec<scalar_t, int64_t, false>(input, y, w, b, mean, rstd, num_groups, HW, eps, stream);
    }
  });
  return {y, mean, rstd};
}

}  // namespace gn_inline

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("group_norm_forward", &gn_inline::group_norm_forward_cuda);
}
"""
