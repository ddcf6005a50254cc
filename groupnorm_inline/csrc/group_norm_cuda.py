"""CUDA source of the GroupNorm forward: statistics per (n, g) slice, then y = x * a[c] + b[c].

Layout: the input is contiguous (N, C, HW) with HW the product of the trailing dims; the (n, g) slice is
the D = (C / G) * HW contiguous elements starting at (n * C + g * C / G) * HW. The launch plan is picked
by the slice size in bytes against what one SM can hold (`choose_plan` in the host code):

  small     D <= LANES * VEC * 4: a group of LANES (4..32) threads per slice holds it in registers,
            reduces with shuffles, writes. One HBM read. (e.g. (1024, 8192) G=256: 32 floats a slice)
  resident  slice <= 16 x 200 KB on sm_90+ (<= 200 KB elsewhere), every slice's cluster resident at once or
            clusters of 1-2 CTAs (try_launch_resident's first_pass): a thread-block cluster of CS CTAs per
            slice; each CTA keeps its part in shared memory, partial sums are exchanged through distributed
            shared memory, then each CTA normalises its part from shared memory. One HBM read, no global synchronisation; parts of <= 64 KB when possible so 3
            CTAs share an SM and one CTA's loads overlap another's stores. A tensor within L2 that would
            need 16-CTA clusters does not take it (kSplitOverClusterOf16MaxTensorOfL2).
  streamed  larger slices on sm_90+, parts of >= 256 KB per CTA of a 16-CTA group, tails that fit L2,
            at least 16 slices per resident group: persistent groups (of a cooperative launch; thread-block
            clusters where there are none) hold each CTA's part in registers, shared memory (bulk async
            copies) and L2 across the exchange. One HBM read.
            (group_norm_streamed_cuda.py; #35 in every dtype)
  held      tensors up to ~4x the GPU's shared memory that neither of the above takes (few large slices,
            or more clusters of 4-16 CTAs than one resident wave): one cooperative launch of the split
            plan's items, each CTA keeping the first ones it reads in shared memory and normalising them
            from there, the rest from L2 where it kept them. (group_norm_held_cuda.py)
  resident  again, in several waves of clusters of 4-16 CTAs, for the tensors too large for the held plan.
  fused     larger slices, enough of them to fill the GPU: one CTA per slice reduces, then normalises
            with a second read of the slice.
  split     larger slices, too few to fill the GPU: `gn_stats_partial` (several CTAs per slice) ->
            `gn_finalize` -> `gn_apply`, the last walking the chunks from the end so that its second
            read starts on what L2 still holds: the first read's last chunks, up to half the L2, taken
            with an evict_last hint, the rest evict_first. The three kernels are chained by programmatic
            dependent launches on sm_90 (each grid's CTAs start as the previous one drains).

Slices whose length D is not a multiple of the 16-byte vector start at a different alignment each: the
resident, held, fused and split plans take them in vectors with element-wise heads and tails (AlignedSplit);
the small and streamed plans only aligned ones (launch_forward_unaligned).

Channels-last inputs (NHWC, NDHWC) take none of these plans: group_norm_channels_last_cuda.py reads them in
place (statistics over (rows x channels) tiles, finalize, normalisation) and writes the output in their layout.

Numerics: sums of (x - K) and (x - K)^2 with K the slice's first element, so |mean| >> std does not
cancel; each thread adds UNROLL*VEC elements in the compute type (float for fp32/fp16/bf16) before
folding them into double, and CTAs combine their sums in double. The output is formed as
(x - K) * a + (b - (mean - K) * a), so the large mean never meets the small deviations in float.
"""

from .channels_last_common_cuda import CL_TILING_CUDA
from .common_cuda import COMMON_CUDA_HEADER
from .group_norm_cpu import GROUP_NORM_FORWARD_SHARED
from .group_norm_channels_last_cuda import CHANNELS_LAST_FORWARD_CUDA
from .group_norm_held_cuda import HELD_FORWARD_CUDA
from .group_norm_streamed_cuda import STREAMED_FORWARD_CUDA

# Registers the CUDA kernels under GN_NAMESPACE (see group_norm_cpu.with_namespace).
GROUP_NORM_FORWARD_CUDA_TEMPLATE = COMMON_CUDA_HEADER + CL_TILING_CUDA + GROUP_NORM_FORWARD_SHARED + r"""
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>
#include <cooperative_groups.h>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

namespace gn_inline {

constexpr int kThreads = 256;          // fused / split kernels
constexpr int kUnroll = 4;             // vectors loaded before first use, per thread
constexpr int kSmallVecs = 4;          // vectors per thread held in registers by the small-slice kernel
constexpr int kResidentMaxThreads = 512;
constexpr int kResidentUnroll = 8;     // resident plan: vectors loaded before first use, per thread

// Normalisation constants of one slice: y = (x - K) * rstd * w[c] + (b[c] - mean_k * rstd * w[c]).
template <typename C>
struct SliceNorm {
  C K;       // shift: the slice's first element
  C mean_k;  // mean - K
  C rstd;
};

template <typename C>
__device__ __forceinline__ SliceNorm<C> norm_from_sums(double s, double ss, double count, C K, double eps) {
  const double m = s / count;                       // mean of (x - K)
  const double var = fmax(ss / count - m * m, 0.0); // biased variance, as nn.GroupNorm
  return SliceNorm<C>{K, static_cast<C>(m), static_cast<C>(1.0 / sqrt(var + eps))};
}

template <typename C>
__device__ __forceinline__ void write_stats(const SliceNorm<C>& n, C* mean_out, C* rstd_out, int64_t slice) {
  mean_out[slice] = static_cast<C>(static_cast<double>(n.K) + static_cast<double>(n.mean_k));
  rstd_out[slice] = n.rstd;
}

// Accumulates the shifted sums of one vector into (ls, lss).
template <typename T, int VEC>
__device__ __forceinline__ void add_shifted(const Vec<T, VEC>& v, typename Compute<T>::type K,
                                            typename Compute<T>::type& ls, typename Compute<T>::type& lss) {
  using C = typename Compute<T>::type;
  if constexpr (std::is_same_v<T, c10::BFloat16>) {  // in pairs (see normalize_vec)
    C xs[VEC];
    vec_to_compute<T, VEC>(v, xs);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const C d = xs[k] - K;
      ls += d;
      lss += d * d;
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const C d = static_cast<C>(v.v[k]) - K;
      ls += d;
      lss += d * d;
    }
  }
}

// L2 eviction priorities (sm_80+): a policy made once per thread, then handed to each hinted load. The split
// plan reads its last items with evict_last while summing and everything else evict_first, so that its
// second read finds them in L2 (see launch_streaming). Older GPUs take plain loads.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

__device__ __forceinline__ uint64_t l2_policy_evict_normal() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// One 16-byte global load with an L2 eviction-priority policy, kept as raw 32-bit words: an array of
// half/bfloat16 Vec would take a register per element, twice what the words take.
__device__ __forceinline__ uint4 load16_policy(const void* p, uint64_t policy) {
  uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(policy));
#else
  (void)policy;
  r = *reinterpret_cast<const uint4*>(p);
#endif
  return r;
}

template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> as_vec(const uint4& words) {
  static_assert(sizeof(Vec<T, VEC>) == 16, "16-byte vectors only");
  Vec<T, VEC> v;
  memcpy(&v, &words, 16);
  return v;
}

// One vector at p: a plain load, or (HINT, 16-byte vectors) one with the L2 policy `policy`.
template <typename T, int VEC, bool HINT>
__device__ __forceinline__ Vec<T, VEC> load_vec_hinted(const T* p, uint64_t policy) {
  if constexpr (HINT && sizeof(Vec<T, VEC>) == 16) return as_vec<T, VEC>(load16_policy(p, policy));
  return load_vec<T, VEC>(p);
}

// Per-thread shifted sums over xs[begin, end) (any alignment: the head and tail in AlignedSplit); HINT: the
// body's loads carry the L2 policy `policy`.
template <typename T, typename I, int VEC, bool HINT = false>
__device__ __forceinline__ void shifted_sums(const T* __restrict__ xs, I begin, I end,
                                             typename Compute<T>::type K, double& s, double& ss,
                                             uint64_t policy = 0) {
  using C = typename Compute<T>::type;
  if constexpr (VEC > 1) {
    const AlignedSplit<T, I, VEC> cut(xs, begin, end);
    const I e = cut.edge_element(begin, end, static_cast<I>(threadIdx.x));
    if (e >= 0) {
      const double d = static_cast<double>(static_cast<C>(xs[e]) - K);
      s += d;
      ss += d * d;
    }
    begin += cut.head;
    end = cut.body_end;
  }
  const I stride = static_cast<I>(blockDim.x) * VEC;
  I j = begin + static_cast<I>(threadIdx.x) * VEC;
  for (; j + (kUnroll - 1) * stride < end; j += kUnroll * stride) {
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_vec_hinted<T, VEC, HINT>(xs + j + u * stride, policy);
    C ls = 0, lss = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) add_shifted<T, VEC>(v[u], K, ls, lss);
    s += ls;
    ss += lss;
  }
  if (j < end) {  // fewer than kUnroll strides left: one batch of guarded loads, not a chain of single ones
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (j + u * stride < end) v[u] = load_vec_hinted<T, VEC, HINT>(xs + j + u * stride, policy);
    C ls = 0, lss = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (j + u * stride < end) add_shifted<T, VEC>(v[u], K, ls, lss);
    s += ls;
    ss += lss;
  }
}

// Normalises one vector lying in one channel c (w[c], b[c]: its affine parameters; unused when !AFFINE). The
// same arithmetic as normalize_vec's one-channel branch, kept apart: routing that branch through here makes the
// epilogue inline once per return path (Runtime-activation kernels 16 K -> 26 K SASS instructions).
template <typename T, int VEC, bool AFFINE, typename Epi>
__device__ __forceinline__ Vec<T, VEC> normalize_in_channel(const Vec<T, VEC>& v, int64_t c, ParamRef<T> w,
                                                            ParamRef<T> b,
                                                            const SliceNorm<typename Compute<T>::type>& n,
                                                            const Epi& epi) {
  using C = typename Compute<T>::type;
  C a = n.rstd, shift = -n.mean_k * n.rstd;
  if (AFFINE) {
    a = n.rstd * w[c];
    shift = b[c] - n.mean_k * a;
  }
  C z[VEC];
  if constexpr (std::is_same_v<T, c10::BFloat16>) {  // in pairs (see normalize_vec)
    vec_to_compute<T, VEC>(v, z);
#pragma unroll
    for (int k = 0; k < VEC; ++k) z[k] = (z[k] - n.K) * a + shift;
    epi.apply(z);
    return vec_from_compute<T, VEC>(z);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) z[k] = (static_cast<C>(v.v[k]) - n.K) * a + shift;
    epi.apply(z);
    Vec<T, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = static_cast<T>(z[k]);
    return out;
  }
}

// Normalises one vector whose first element is at slice offset j; element k is in channel (j + k) / HW.
// `w`, `b` point at the group's first channel; unused when !AFFINE.
template <typename T, typename I, int VEC, bool AFFINE, typename Epi>
__device__ __forceinline__ Vec<T, VEC> normalize_vec(const Vec<T, VEC>& v, I j, I HW, bool channel_per_vec,
                                                     ParamRef<T> w,
                                                     ParamRef<T> b,
                                                     const SliceNorm<typename Compute<T>::type>& n,
                                                     const Epi& epi) {
  using C = typename Compute<T>::type;
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    // bfloat16: converted in pairs (vec_to_compute), and a vector across two channels reads two channels'
    // parameters, not one per element: 102-123 -> 60-80 registers in its kernels (held, resident, apply), 13-34%
    // faster (H100, benchmarks/nchw_forward_ab.py). The other dtypes keep the element-wise form below: float16's
    // split-plan apply kernel went from 64 to 80 registers with this one and ran 37% slower.
    C z[VEC];  // the normalised values, then the epilogue over the whole vector (one Runtime branch per vector)
    vec_to_compute<T, VEC>(v, z);
    if (!AFFINE) {
      const C shift = -n.mean_k * n.rstd;
#pragma unroll
      for (int k = 0; k < VEC; ++k) z[k] = (z[k] - n.K) * n.rstd + shift;
    } else if (channel_per_vec) {  // HW % VEC == 0: the whole vector lies in one channel
      const I c = j / HW;
      const C a = n.rstd * w[c];
      const C shift = b[c] - n.mean_k * a;
#pragma unroll
      for (int k = 0; k < VEC; ++k) z[k] = (z[k] - n.K) * a + shift;
    } else if (HW >= VEC) {  // the vector lies in channel c, or from element HW - r on in channel c + 1
      const I c = j / HW;
      const I r = j - c * HW;
      const I c1 = r + VEC > HW ? c + 1 : c;  // c + 1 only where the vector reaches it (inside the slice)
      const C a0 = n.rstd * w[c], a1 = n.rstd * w[c1];
      const C s0 = b[c] - n.mean_k * a0, s1 = b[c1] - n.mean_k * a1;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const bool next = r + k >= HW;
        z[k] = (z[k] - n.K) * (next ? a1 : a0) + (next ? s1 : s0);
      }
    } else {  // HW < VEC: the vector may cross several channel boundaries
      I c = j / HW;
      I r = j - c * HW;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        if (r == HW) { ++c; r = 0; }
        const C a = n.rstd * w[c];
        z[k] = (z[k] - n.K) * a + (b[c] - n.mean_k * a);
        ++r;
      }
    }
    epi.apply(z);
    return vec_from_compute<T, VEC>(z);
  } else {
    C z[VEC];  // the normalised values, then the epilogue over the whole vector (one Runtime branch per vector)
    if (!AFFINE) {
      const C shift = -n.mean_k * n.rstd;
#pragma unroll
      for (int k = 0; k < VEC; ++k) z[k] = (static_cast<C>(v.v[k]) - n.K) * n.rstd + shift;
    } else if (channel_per_vec) {  // HW % VEC == 0: the whole vector lies in one channel
      const I c = j / HW;
      const C a = n.rstd * w[c];
      const C shift = b[c] - n.mean_k * a;
#pragma unroll
      for (int k = 0; k < VEC; ++k) z[k] = (static_cast<C>(v.v[k]) - n.K) * a + shift;
    } else {  // the vector may cross channel boundaries (HW < VEC or HW % VEC != 0)
      I c = j / HW;
      I r = j - c * HW;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        if (r == HW) { ++c; r = 0; }
        const C a = n.rstd * w[c];
        z[k] = (static_cast<C>(v.v[k]) - n.K) * a + (b[c] - n.mean_k * a);
        ++r;
      }
    }
    epi.apply(z);
    Vec<T, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = static_cast<T>(z[k]);
    return out;
  }
}
// y = act(normalised x) over xs[begin, end) (any alignment: the head and tail in AlignedSplit; ys must share
// xs's alignment, which the host checks). HINT: the body's loads carry the L2 policy `policy`.
template <typename T, typename I, int VEC, bool AFFINE, typename Epi, bool HINT = false>
__device__ __forceinline__ void normalize_range(const T* __restrict__ xs, T* __restrict__ ys, I begin, I end,
                                                I HW, ParamRef<T> w,
                                                ParamRef<T> b,
                                                const SliceNorm<typename Compute<T>::type>& n,
                                                const Epi& epi, uint64_t policy = 0) {
  bool channel_per_vec = (HW % VEC) == 0;
  if constexpr (VEC > 1) {
    const AlignedSplit<T, I, VEC> cut(xs, begin, end);
    const I e = cut.edge_element(begin, end, static_cast<I>(threadIdx.x));
    if (e >= 0) {
      Vec<T, 1> v;
      v.v[0] = xs[e];
      ys[e] = normalize_vec<T, I, 1, AFFINE, Epi>(v, e, HW, true, w, b, n, epi).v[0];
    }
    channel_per_vec = channel_per_vec && cut.head % VEC == 0;  // vectors at slice offsets that are multiples of VEC
    begin += cut.head;
    end = cut.body_end;
  }
  const I stride = static_cast<I>(blockDim.x) * VEC;
  I j = begin + static_cast<I>(threadIdx.x) * VEC;
  for (; j + (kUnroll - 1) * stride < end; j += kUnroll * stride) {
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_vec_hinted<T, VEC, HINT>(xs + j + u * stride, policy);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      store_vec_streaming<T, VEC>(ys + j + u * stride,
                                  normalize_vec<T, I, VEC, AFFINE, Epi>(v[u], j + u * stride, HW, channel_per_vec, w, b, n, epi));
  }
  if (j < end) {  // the last < kUnroll strides: one batch of guarded loads
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (j + u * stride < end) v[u] = load_vec_hinted<T, VEC, HINT>(xs + j + u * stride, policy);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (j + u * stride < end)
        store_vec_streaming<T, VEC>(ys + j + u * stride, normalize_vec<T, I, VEC, AFFINE, Epi>(
                                                              v[u], j + u * stride, HW, channel_per_vec, w, b, n, epi));
  }
}

// ---- small plan: LANES threads per slice, the slice in registers --------------------------------------
// x, y: (slices, D) with D <= LANES * VEC * kSmallVecs; grid-stride over CTA-sized groups of slices.
template <typename T, int VEC, int LANES, bool AFFINE, typename Epi>
__global__ void __launch_bounds__(kThreads) gn_small_slices(
    const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w,
    ParamRef<T> b, typename Compute<T>::type* __restrict__ mean_out,
    typename Compute<T>::type* __restrict__ rstd_out, int64_t slices, int64_t G, int channels_per_group, int HW,
    int D, double eps, Epi epi) {
  using C = typename Compute<T>::type;
  const int lane = threadIdx.x % LANES;
  const int64_t slices_per_cta = blockDim.x / LANES;
  const bool channel_per_vec = (HW % VEC) == 0;
  // The loop bound is uniform per CTA (shuffles need every lane of the warp); groups past the end idle.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * slices_per_cta; first < slices;
       first += static_cast<int64_t>(gridDim.x) * slices_per_cta) {
    const int64_t slice = first + threadIdx.x / LANES;
    const bool active = slice < slices;
    const T* xs = x + slice * D;
    T* ys = y + slice * D;
    const C K = active ? static_cast<C>(xs[0]) : C(0);
    Vec<T, VEC> v[kSmallVecs];
    C ls = 0, lss = 0;
#pragma unroll
    for (int u = 0; u < kSmallVecs; ++u) {
      const int j = (u * LANES + lane) * VEC;
      if (active && j < D) {
        v[u] = load_vec<T, VEC>(xs + j);
        add_shifted<T, VEC>(v[u], K, ls, lss);
      }
    }
    double s = ls, ss = lss;
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset >>= 1) {
      s += __shfl_xor_sync(0xffffffffu, s, offset, LANES);
      ss += __shfl_xor_sync(0xffffffffu, ss, offset, LANES);
    }
    if (!active) continue;
    const SliceNorm<C> n = norm_from_sums<C>(s, ss, static_cast<double>(D), K, eps);
    if (lane == 0) write_stats(n, mean_out, rstd_out, slice);
    const int64_t c0 = (slice % G) * channels_per_group;
#pragma unroll
    for (int u = 0; u < kSmallVecs; ++u) {
      const int j = (u * LANES + lane) * VEC;
      if (j < D)
        store_vec_streaming<T, VEC>(ys + j, normalize_vec<T, int, VEC, AFFINE, Epi>(v[u], j, HW, channel_per_vec,
                                                                                AFFINE ? w + c0 : w,
                                                                                AFFINE ? b + c0 : b, n, epi));
    }
  }
}

// ---- resident plan: a cluster of CTAs per slice, the slice in shared memory ----------------------------
// CTA of cluster rank r owns slice elements [r * part, min(D, (r + 1) * part)), part a multiple of VEC. A slice
// that does not start at a 16-byte boundary (D not a multiple of VEC) is cut as in AlignedSplit: its aligned
// body goes through shared memory in vectors, its head and tail elements (< VEC each) stay in one register of
// the thread that took them.
template <typename T, int VEC, bool AFFINE, typename Epi>
__global__ void __launch_bounds__(kResidentMaxThreads) gn_resident(
    const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w,
    ParamRef<T> b, typename Compute<T>::type* __restrict__ mean_out,
    typename Compute<T>::type* __restrict__ rstd_out, int64_t G, int channels_per_group, int HW, int D, int part,
    double eps, FastDivisor hw, Epi epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Built for pre-Hopper archs: clusters do not exist; the host only launches this with one CTA per slice.
  const int rank = 0, cluster_size = 1;
#else
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_size = static_cast<int>(cluster.num_blocks());
#endif
  using C = typename Compute<T>::type;
  extern __shared__ __align__(16) unsigned char resident_smem[];
  T* buf = reinterpret_cast<T*>(resident_smem);     // this CTA's part of the slice
  __shared__ double scratch[64];
  __shared__ double cta_sums[2];
  __shared__ double slice_sums[2];
  const int64_t slice = blockIdx.x / cluster_size;
  const T* xs = x + slice * D;
  T* ys = y + slice * D;
  const C K = static_cast<C>(xs[0]);
  int begin = rank * part;
  int end = min(D, begin + part);
  const int stride = blockDim.x * VEC;
  double s = 0, ss = 0;
  int edge = -1;  // the slice offset of this thread's head or tail element, if any
  T edge_value{};
  bool body_aligned = true;  // the body starts at a slice offset that is a multiple of VEC
  if constexpr (VEC > 1) {
    const AlignedSplit<T, int, VEC> cut(xs, begin, end);
    edge = cut.edge_element(begin, end, static_cast<int>(threadIdx.x));
    if (edge >= 0) {
      edge_value = xs[edge];
      const double d = static_cast<double>(static_cast<C>(edge_value) - K);
      s = d;
      ss = d * d;
    }
    body_aligned = cut.head == 0;
    begin += cut.head;
    end = cut.body_end;
  }

  // 1. stream the part into shared memory, summing as it arrives: kResidentUnroll loads in flight per
  //    thread, the last batch predicated, so a part of up to threads * VEC * kResidentUnroll elements
  //    costs one round trip to DRAM (a plain tail loop would stall on each of its loads).
  for (int j = begin + threadIdx.x * VEC; j < end; j += kResidentUnroll * stride) {
    Vec<T, VEC> v[kResidentUnroll];
#pragma unroll
    for (int u = 0; u < kResidentUnroll; ++u)
      if (j + u * stride < end) v[u] = load_vec<T, VEC>(xs + j + u * stride);
    C ls = 0, lss = 0;
#pragma unroll
    for (int u = 0; u < kResidentUnroll; ++u) {
      if (j + u * stride < end) {
        *reinterpret_cast<Vec<T, VEC>*>(buf + (j - begin) + u * stride) = v[u];
        add_shifted<T, VEC>(v[u], K, ls, lss);
      }
    }
    s += ls;
    ss += lss;
  }
  block_sum2(s, ss, scratch);

  // 2. exchange the CTA sums across the cluster through distributed shared memory
  if (threadIdx.x == 0) { cta_sums[0] = s; cta_sums[1] = ss; }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __syncthreads();
  if (threadIdx.x == 0) { slice_sums[0] = cta_sums[0]; slice_sums[1] = cta_sums[1]; }
  __syncthreads();
#else
  cluster.sync();  // every CTA's sums are visible cluster-wide
  if (threadIdx.x < 32) {
    double rs = 0, rss = 0;
    if (static_cast<int>(threadIdx.x) < cluster_size) {
      const double* remote = cluster.map_shared_rank(cta_sums, static_cast<int>(threadIdx.x));
      rs = remote[0];
      rss = remote[1];
    }
    rs = warp_sum(rs);
    rss = warp_sum(rss);
    if (threadIdx.x == 0) { slice_sums[0] = rs; slice_sums[1] = rss; }
  }
  __syncthreads();
  // Done reading other CTAs' shared memory: signal now, wait before exiting (a CTA's shared memory must
  // outlive every remote read of it).
  cluster.barrier_arrive();
#endif
  const SliceNorm<C> n = norm_from_sums<C>(slice_sums[0], slice_sums[1], static_cast<double>(D), K, eps);
  if (rank == 0 && threadIdx.x == 0) write_stats(n, mean_out, rstd_out, slice);

  // 3. normalise the part from shared memory (each thread reads back the vectors it wrote)
  const int64_t c0 = (slice % G) * channels_per_group;
  const bool channel_per_vec = (HW % VEC) == 0 && body_aligned;
  const ParamRef<T> wg = AFFINE ? w + c0 : w, bg = AFFINE ? b + c0 : b;
  for (int j = begin + threadIdx.x * VEC; j < end; j += stride) {
    const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(buf + (j - begin));
    // A vector in one channel finds it by a multiply-shift (hw), not a division.
    store_vec_streaming<T, VEC>(ys + j, channel_per_vec
                                            ? normalize_in_channel<T, VEC, AFFINE, Epi>(v, AFFINE ? hw.div(j) : 0, wg,
                                                                                       bg, n, epi)
                                            : normalize_vec<T, int, VEC, AFFINE, Epi>(v, j, HW, false, wg, bg, n, epi));
  }
  if (edge >= 0) {
    Vec<T, 1> v;
    v.v[0] = edge_value;
    ys[edge] = normalize_vec<T, int, 1, AFFINE, Epi>(v, edge, HW, true, AFFINE ? w + c0 : w, AFFINE ? b + c0 : b, n,
                                                    epi).v[0];
  }
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900)
  cluster.barrier_wait();
#endif
}

// ---- fused plan: one CTA per slice, two reads ------------------------------------------------------------
template <typename T, typename I, int VEC, bool AFFINE, typename Epi>
__global__ void __launch_bounds__(kThreads) gn_fused_forward(
    const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w,
    ParamRef<T> b, typename Compute<T>::type* __restrict__ mean_out,
    typename Compute<T>::type* __restrict__ rstd_out, int64_t G, int64_t channels_per_group, I HW, I D,
    double eps, Epi epi) {
  using C = typename Compute<T>::type;
  __shared__ double scratch[64];
  const int64_t slice = blockIdx.x;
  const T* xs = x + slice * static_cast<int64_t>(D);
  T* ys = y + slice * static_cast<int64_t>(D);
  const C K = static_cast<C>(xs[0]);
  double s = 0, ss = 0;
  shifted_sums<T, I, VEC>(xs, I(0), D, K, s, ss);
  block_sum2(s, ss, scratch);
  const SliceNorm<C> n = norm_from_sums<C>(s, ss, static_cast<double>(D), K, eps);
  if (threadIdx.x == 0) write_stats(n, mean_out, rstd_out, slice);
  const int64_t c0 = (slice % G) * channels_per_group;
  normalize_range<T, I, VEC, AFFINE, Epi>(xs, ys, I(0), D, HW, AFFINE ? w + c0 : w, AFFINE ? b + c0 : b, n, epi);
}

// ---- split plan ----------------------------------------------------------------------------------------
// Programmatic dependent launch (sm_90+) between its three kernels: each kernel lets the next one launch as
// soon as all of its CTAs are running, so the next grid's CTAs take the SMs as this one's drain, and wait in
// griddep_wait() for its results (the grid completed, its writes visible). A kernel launched without the
// attribute passes griddep_wait() at once.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Step 1: work item w = slice * splits + split sums chunk `split` of its slice into partial[w] (2 doubles).
// The grid is sized to what is resident at once and strides over the items, so no partial last wave.
// Items from `l2_first` on are read evict_last (the apply step reads them first, from L2), the others
// evict_first; l2_first < 0: no hints (plain L2 priority for every load).
template <typename T, typename I, int VEC>
__global__ void __launch_bounds__(kThreads) gn_stats_partial(const T* __restrict__ x, double* __restrict__ partial,
                                                             int64_t items, int splits, I D, I chunk,
                                                             int64_t l2_first) {
  using C = typename Compute<T>::type;
  __shared__ double scratch[64];
  griddep_launch_dependents();  // the finalize may launch; it waits for this grid before reading
  const uint64_t keep = l2_first < 0 ? l2_policy_evict_normal() : l2_policy_evict_last();
  const uint64_t drop = l2_first < 0 ? l2_policy_evict_normal() : l2_policy_evict_first();
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t slice = item / splits;
    const T* xs = x + slice * static_cast<int64_t>(D);
    const C K = static_cast<C>(xs[0]);
    const I begin = static_cast<I>(item - slice * splits) * chunk;
    const I end = begin + chunk < D ? begin + chunk : D;
    double s = 0, ss = 0;
    shifted_sums<T, I, VEC, true>(xs, begin, end, K, s, ss, l2_first >= 0 && item >= l2_first ? keep : drop);
    block_sum2(s, ss, scratch);
    if (threadIdx.x == 0) {
      partial[item * 2] = s;
      partial[item * 2 + 1] = ss;
    }
  }
}

// Step 2: one CTA per slice folds its splits (up to thousands when a few huge slices fill the GPU) into
// the slice's constants. norm: (slices,) of (K, mean - K, rstd).
template <typename T>
__global__ void gn_finalize(const T* __restrict__ x, const double* __restrict__ partial, int splits, int64_t D,
                            double eps, typename Compute<T>::type* __restrict__ mean_out,
                            typename Compute<T>::type* __restrict__ rstd_out,
                            SliceNorm<typename Compute<T>::type>* __restrict__ norm) {
  using C = typename Compute<T>::type;
  __shared__ double scratch[64];
  griddep_launch_dependents();
  griddep_wait();  // partial: written by the statistics step
  const int64_t slice = blockIdx.x;
  double s = 0, ss = 0;
  for (int k = threadIdx.x; k < splits; k += blockDim.x) {
    s += partial[(slice * splits + k) * 2];
    ss += partial[(slice * splits + k) * 2 + 1];
  }
  block_sum2(s, ss, scratch);
  if (threadIdx.x == 0) {
    const SliceNorm<C> n = norm_from_sums<C>(s, ss, static_cast<double>(D), static_cast<C>(x[slice * D]), eps);
    write_stats(n, mean_out, rstd_out, slice);
    norm[slice] = n;
  }
}

// Step 3: work item w = slice * splits + split normalises chunk `split` of its slice (grid-stride, as step 1),
// the items taken from the last: step 1 read them in increasing order, so L2 holds its last items, and a
// second pass in the same order would evict each of them just before reaching it (a tensor larger than L2
// then re-reads everything from memory; from the end, the first L2-sized share of the pass hits). hinted: x
// is read evict_first (each vector's last use), so the lines step 1 kept stay until reached.
template <typename T, typename I, int VEC, bool AFFINE, typename Epi>
__global__ void __launch_bounds__(kThreads) gn_apply(
    const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w,
    ParamRef<T> b, const SliceNorm<typename Compute<T>::type>* __restrict__ norm,
    int64_t items, int splits, int64_t G, int64_t channels_per_group, I HW, I D, I chunk, bool hinted, Epi epi) {
  const uint64_t policy = hinted ? l2_policy_evict_first() : l2_policy_evict_normal();
  griddep_wait();  // norm: written by the finalize
  for (int64_t step = blockIdx.x; step < items; step += gridDim.x) {
    const int64_t item = items - 1 - step;
    const int64_t slice = item / splits;
    const int64_t offset = slice * static_cast<int64_t>(D);
    const I begin = static_cast<I>(item - slice * splits) * chunk;
    const I end = begin + chunk < D ? begin + chunk : D;
    const int64_t c0 = (slice % G) * channels_per_group;
    normalize_range<T, I, VEC, AFFINE, Epi, true>(x + offset, y + offset, begin, end, HW, AFFINE ? w + c0 : w,
                                                  AFFINE ? b + c0 : b, norm[slice], epi, policy);
  }
}

// ---- host side ----------------------------------------------------------------------------------------
struct DeviceInfo {
  int sms = 0;
  int major = 0;
  int max_smem_optin = 0;  // bytes of shared memory one CTA may opt into
  int smem_per_sm = 0;     // bytes of shared memory of one SM (all its CTAs, their reserved bytes included)
  int64_t l2_bytes = 0;
  bool cooperative = false;  // cooperative launches (every CTA of the grid resident at once) supported
  double dram_bytes_per_s = 0;  // peak DRAM bandwidth: two transfers per memory clock over the bus (HBM, GDDR)
};

inline const DeviceInfo& device_info(int device) {
  static DeviceInfo cached[64];
  TORCH_CHECK(device >= 0 && device < 64, gn_inline_msg::cat("groupnorm_inline: device index out of range: ", device));
  DeviceInfo& info = cached[device];
  if (info.sms == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    int l2 = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    info.l2_bytes = l2;
    int cooperative = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    info.cooperative = cooperative != 0;
    int mem_khz = 0, bus_bits = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    info.dram_bytes_per_s = 2.0 * 1e3 * mem_khz * (bus_bits / 8.0);
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device));
  }
  return info;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A launch attribute asking for clusters of `cluster` CTAs along x.
inline cudaLaunchAttribute cluster_dim_attribute(int cluster) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// How many clusters of `cluster` CTAs (`threads` threads and `smem` bytes of dynamic shared memory each) of
// `kernel` can be resident at once on `device` (the current device); 0 when none can. The launch attributes
// (dynamic shared memory up to the device's opt-in limit, non-portable cluster sizes) are set the first time
// a kernel is seen on a device, and each answer is kept: the resident and streamed plans ask on every call.
inline int max_active_clusters(const void* kernel, int device, int cluster, int threads, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int>, bool> prepared;             // (kernel, device)
  static std::map<std::tuple<const void*, int, int, int, size_t>, int> answers;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, cluster, threads, smem);
  if (const auto it = answers.find(key); it != answers.end()) return it->second;
  if (!prepared[std::make_tuple(kernel, device)]) {
    cudaFuncAttributes fa;  // the kernel's static shared memory counts against the same opt-in limit
    C10_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        device_info(device).max_smem_optin - static_cast<int>(fa.sharedSizeBytes)));
    if (device_info(device).major >= 9)
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    prepared[std::make_tuple(kernel, device)] = true;
  }
  int active = 1;
  if (cluster > 1) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(cluster));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1] = {cluster_dim_attribute(cluster)};
    config.attrs = attr;
    config.numAttrs = 1;
    // A cluster this size with this much shared memory per CTA may not fit a GPC: ask, don't fail.
    if (cudaOccupancyMaxActiveClusters(&active, kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the query's error state; the caller takes another plan
      active = 0;
    }
  }
  answers[key] = active;
  return active;
}

struct Problem {
  int64_t slices, G, cpg, HW, D;
  double eps;
  int device;
  cudaStream_t stream;
  std::string* plan = nullptr;  // when set: describe the chosen plan here and launch nothing
  const std::string* force = nullptr;  // when set and not "auto": take this plan or fail (tests, benchmarks)
  int64_t* trace = nullptr;  // streamed plan only: phase timestamps (group_norm_streamed_trace)
  gn_act::Params act{};      // the epilogue's activation (read by the Fixed and Runtime instantiations)
};

// The epilogue functor a launch passes to its kernel: Identity carries nothing, the others the call's activation.
template <typename Epi>
inline Epi make_epilogue(const gn_act::Params& act) {
  if constexpr (Epi::kIsIdentity) return Epi{};
  else return Epi{act};
}

template <typename T>
struct Pointers {
  using C = typename Compute<T>::type;
  const T* x;
  T* y;
  ParamRef<T> w;
  ParamRef<T> b;
  C* mean;
  C* rstd;
};

// Part sizes of the resident plan: aim at <= 64 KB per CTA (three CTAs per SM overlap loads with stores),
// accept up to 200 KB (one per SM) rather than leave the plan.
constexpr int64_t kResidentTargetBytes = 64 * 1024;
constexpr int64_t kResidentMaxBytes = 200 * 1024;
// A 16-CTA cluster is non-portable: all 16 CTAs must be placed inside one GPC at once (16-18 SMs on an H100),
// so such clusters fill the device in coarser, fewer waves than smaller ones. Where the whole tensor fits L2
// (below this share of it), the split plan's second read comes from L2 and the automatic choice takes it
// instead: H100, (1,128,8,128,128) and (1,256,256,256) bf16, 32 slices of 1 MB: resident (16 x 64 KB) 51.4
// and 51.7 us, split 44.0 and 42.5 us (copy 26.7). Clusters of 2-8 keep the resident plan (it measured
// 1-27% faster than split at every such row of benchmarks/plan_check.py --rows waves).
constexpr double kSplitOverClusterOf16MaxTensorOfL2 = 0.8;
// first_pass (the automatic choice's first test): only where every slice's cluster is resident at once, or the
// clusters are of 1-2 CTAs. Waves of small clusters overlap CTA by CTA (a finished CTA's SM takes the next one
// at once); a cluster of 4-16 CTAs needs that many free SMs of one GPC at the same time, so its waves run in
// coarse steps, and the held plan was faster there (H200, benchmarks/plan_check.py --rows held,waves: clusters
// of 8 and 16 in 2-5 waves 3-27% slower than held, clusters of 4 from 5% faster to 12% slower). Inputs it
// leaves take the held plan where it can take them, else this plan in waves.
template <typename T, int VEC, bool AFFINE, typename Epi>
bool try_launch_resident(const Pointers<T>& p, const Problem& pr, bool automatic = false, bool first_pass = false) {
  const DeviceInfo& dev = device_info(pr.device);
  const int64_t bytes = pr.D * static_cast<int64_t>(sizeof(T));
  const int max_cluster = dev.major >= 9 ? 16 : 1;
  int cluster = 1;
  while (cluster < max_cluster && ceil_div(bytes, cluster) > kResidentTargetBytes) cluster *= 2;
  if (ceil_div(bytes, cluster) > std::min<int64_t>(kResidentMaxBytes, dev.max_smem_optin - 2048)) return false;
  if (automatic && cluster == 16 &&
      static_cast<double>(pr.slices) * bytes <= kSplitOverClusterOf16MaxTensorOfL2 * static_cast<double>(dev.l2_bytes))
    return false;
  if (pr.slices * cluster > 0x7fffffff) return false;
  const int64_t part = ceil_div(ceil_div(pr.D, cluster), VEC) * VEC;
  const size_t smem = static_cast<size_t>(part) * sizeof(T);
  // Threads: enough for >= 4 vectors in flight each; 64..512.
  int threads = 64;
  while (threads < kResidentMaxThreads && static_cast<int64_t>(threads) * VEC * kUnroll < part) threads *= 2;

  auto kernel = gn_resident<T, VEC, AFFINE, Epi>;
  const int active = max_active_clusters(reinterpret_cast<const void*>(kernel), pr.device, cluster, threads, smem);
  if (active < 1) return false;
  // Clusters resident at once (for clusters of one CTA, the occupancy query's CTAs per SM times the SMs).
  const int64_t at_once = cluster > 1 ? int64_t{active}
                                      : int64_t{resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), pr.device,
                                                                     threads, smem)} * dev.sms;
  if (first_pass && cluster > 2 && pr.slices > at_once) return false;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(pr.slices * cluster));
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = pr.stream;
  cudaLaunchAttribute attr[1];
  config.attrs = attr;
  config.numAttrs = 0;
  if (cluster > 1) {
    attr[0] = cluster_dim_attribute(cluster);
    config.numAttrs = 1;
  }
  if (pr.plan) {
    *pr.plan = "resident: cluster of " + std::to_string(cluster) + " CTAs per slice, " + std::to_string(threads) +
               " threads, " + std::to_string(smem / 1024) + " KB of the slice in each CTA's shared memory, " +
               std::to_string(at_once) + " clusters resident at once (vec " + std::to_string(VEC) + ")";
    return true;
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p.x, p.y, p.w, p.b, p.mean, p.rstd, pr.G,
                                    static_cast<int>(pr.cpg), static_cast<int>(pr.HW), static_cast<int>(pr.D),
                                    static_cast<int>(part), pr.eps, FastDivisor(std::max<int64_t>(pr.HW, 1)),
                                    make_epilogue<Epi>(pr.act)));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// CTAs of kThreads that are resident at once on the device for `kernel`, capped by the work items.
template <typename Kernel>
unsigned resident_grid(Kernel kernel, int64_t items, int device) {
  const int per_sm = resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), device, kThreads, 0);
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * device_info(device).sms;
  return static_cast<unsigned>(std::min(items, resident));
}

template <typename T, int VEC, int LANES, bool AFFINE, typename Epi>
void launch_small(const Pointers<T>& p, const Problem& pr) {
  const int64_t slices_per_cta = kThreads / LANES;
  if (pr.plan) {
    *pr.plan = "small: " + std::to_string(LANES) + " threads per slice, slice held in registers (vec " +
               std::to_string(VEC) + ")";
    return;
  }
  const int64_t blocks = std::min<int64_t>(ceil_div(pr.slices, slices_per_cta),
                                           static_cast<int64_t>(device_info(pr.device).sms) * 16);
  gn_small_slices<T, VEC, LANES, AFFINE, Epi><<<static_cast<unsigned>(blocks), kThreads, 0, pr.stream>>>(
      p.x, p.y, p.w, p.b, p.mean, p.rstd, pr.slices, pr.G, static_cast<int>(pr.cpg), static_cast<int>(pr.HW),
      static_cast<int>(pr.D), pr.eps, make_epilogue<Epi>(pr.act));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

enum class TwoReadMode { kAuto, kFused, kSplit };

// The split plan's statistics step reads its last items with an L2 evict_last hint, up to this share of the
// L2 (percent), and every other item evict_first; the apply step, walking from the end, reads x evict_first.
// Without hints the second read found about half of what it could in L2 (H100, (8,64,38555) G1 fp32, 79 MB:
// apply 50.5 us for the 158 MB it moves, torch.compile's 44.6). With them (H100, L2 flushed before each call,
// benchmarks/plan_check.py --rows split), none -> 50%: (4,64,27124) fp16 (14 MB) 29.4 -> 27.5 us,
// (1,256,256,256) bf16 (32 MB) 47.3 -> 45.7, (8,64,38555) fp32 (79 MB) 99.0 -> 94.9, (2,32,1024,1024) fp16
// (128 MB) 167 -> 164; the 256-512 MB rows within 0.5%. Keeping 25, 75 or 100% of the L2 was no better.
// No line stays evict_last after the call: the apply step reads every item again, and an access with a policy
// sets the line's priority (PTX has evict_unchanged for accesses that should not).
constexpr int kSplitL2KeepPct = 50;

// Launches kernel<<<grid, block, 0, stream>>>(args...) as a programmatic dependent of the kernel before it in
// the stream where the device has it (sm_90+; `dependent` false: a plain launch); see griddep_wait.
template <typename... Params, typename... Args>
void launch_after(bool dependent, void (*kernel)(Params...), unsigned grid, unsigned block, cudaStream_t stream,
                  Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = dependent ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <typename T, typename I, int VEC, bool AFFINE, typename Epi>
void launch_streaming(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts,
                      TwoReadMode mode = TwoReadMode::kAuto, int l2_keep_pct = kSplitL2KeepPct, bool pdl = true) {
  using C = typename Compute<T>::type;
  // Enough CTAs for ~4 resident waves of 256-thread CTAs; each CTA should still stream >= 32 KB.
  const int64_t target_ctas = static_cast<int64_t>(device_info(pr.device).sms) * 32;
  const int64_t min_chunk = 8192;  // elements
  int64_t splits = pr.slices >= target_ctas ? 1 : ceil_div(target_ctas, pr.slices);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, pr.D / min_chunk));
  if (mode == TwoReadMode::kFused) splits = 1;
  if (mode == TwoReadMode::kSplit) splits = std::max<int64_t>(splits, std::min<int64_t>(2, pr.D));
  splits = std::min<int64_t>(splits, 65535);
  if (splits == 1 && pr.plan) {
    *pr.plan = "fused: one CTA per slice, statistics then normalisation (two reads; vec " + std::to_string(VEC) + ")";
    return;
  }
  if (splits == 1) {
    gn_fused_forward<T, I, VEC, AFFINE, Epi><<<static_cast<unsigned>(pr.slices), kThreads, 0, pr.stream>>>(
        p.x, p.y, p.w, p.b, p.mean, p.rstd, pr.G, pr.cpg, static_cast<I>(pr.HW), static_cast<I>(pr.D), pr.eps,
        make_epilogue<Epi>(pr.act));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // Chunks are whole multiples of a warp's vector footprint so accesses stay aligned and coalesced.
  const int64_t quantum = 32 * VEC;
  const int64_t chunk = ceil_div(ceil_div(pr.D, splits), quantum) * quantum;
  splits = ceil_div(pr.D, chunk);
  const int64_t items = pr.slices * splits;
  // Items kept in L2 for the second read: the last ones the statistics step reads (l2_first < 0: no hints).
  const int64_t item_bytes = chunk * static_cast<int64_t>(sizeof(T));
  const int64_t keep_items = std::min<int64_t>(items, device_info(pr.device).l2_bytes / 100 * l2_keep_pct / item_bytes);
  const int64_t l2_first = l2_keep_pct > 0 ? items - keep_items : -1;
  if (pr.plan) {
    *pr.plan = "split: " + std::to_string(splits) + " CTAs per slice, partial sums -> finalize -> apply (two reads, " +
               (l2_first < 0 ? std::string("no L2 hints")
                             : "the last " + std::to_string(keep_items * item_bytes >> 20) + " MB of the first kept in L2") +
               "; vec " + std::to_string(VEC) + ")";
    return;
  }
  // Scratch, O(slices * splits): partial sums, then each slice's (K, mean - K, rstd).
  at::Tensor partial = at::empty({pr.slices * splits * 2}, opts.dtype(at::kDouble));
  at::Tensor norm = at::empty({static_cast<int64_t>(pr.slices * sizeof(SliceNorm<C>))}, opts.dtype(at::kByte));
  auto* norm_ptr = reinterpret_cast<SliceNorm<C>*>(norm.data_ptr());
  gn_stats_partial<T, I, VEC><<<resident_grid(gn_stats_partial<T, I, VEC>, items, pr.device), kThreads, 0,
                                pr.stream>>>(p.x, partial.data_ptr<double>(), items, static_cast<int>(splits),
                                             static_cast<I>(pr.D), static_cast<I>(chunk), l2_first);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const bool dependent = pdl && device_info(pr.device).major >= 9;
  launch_after(dependent, gn_finalize<T>, static_cast<unsigned>(pr.slices), 128, pr.stream, p.x,
               static_cast<const double*>(partial.data_ptr<double>()), static_cast<int>(splits), pr.D, pr.eps, p.mean,
               p.rstd, norm_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_after(dependent, gn_apply<T, I, VEC, AFFINE, Epi>, resident_grid(gn_apply<T, I, VEC, AFFINE, Epi>, items,
               pr.device), kThreads, pr.stream, p.x, p.y, p.w, p.b, static_cast<const SliceNorm<C>*>(norm_ptr), items,
               static_cast<int>(splits), pr.G, pr.cpg, static_cast<I>(pr.HW), static_cast<I>(pr.D),
               static_cast<I>(chunk), l2_keep_pct > 0, make_epilogue<Epi>(pr.act));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

""" + STREAMED_FORWARD_CUDA + HELD_FORWARD_CUDA + r"""
// Picks the plan for one problem (see the module docstring) and launches it.
template <typename T, int VEC, bool AFFINE, typename Epi>
void launch_two_read(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts, TwoReadMode mode,
                     int l2_keep_pct = kSplitL2KeepPct, bool pdl = true) {
  if (pr.D < (int64_t(1) << 30))
    return launch_streaming<T, int32_t, VEC, AFFINE, Epi>(p, pr, opts, mode, l2_keep_pct, pdl);
  launch_streaming<T, int64_t, VEC, AFFINE, Epi>(p, pr, opts, mode, l2_keep_pct, pdl);  // 64-bit offsets in a slice
}

template <typename T, int VEC, bool AFFINE, typename Epi>
bool try_launch_small(const Pointers<T>& p, const Problem& pr) {
  const int64_t per_lane = static_cast<int64_t>(VEC) * kSmallVecs;
  if (pr.D <= 4 * per_lane) return launch_small<T, VEC, 4, AFFINE, Epi>(p, pr), true;
  if (pr.D <= 8 * per_lane) return launch_small<T, VEC, 8, AFFINE, Epi>(p, pr), true;
  if (pr.D <= 32 * per_lane) return launch_small<T, VEC, 32, AFFINE, Epi>(p, pr), true;
  return false;
}

// "name" or "name:key=value,key=value" -> the value of `key` (or `fallback`).
inline int64_t plan_option(const std::string& plan, const std::string& key, int64_t fallback) {
  const size_t colon = plan.find(':');
  if (colon == std::string::npos) return fallback;
  size_t pos = colon + 1;
  while (pos < plan.size()) {
    size_t comma = plan.find(',', pos);
    if (comma == std::string::npos) comma = plan.size();
    const std::string item = plan.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    TORCH_CHECK(eq != std::string::npos, gn_inline_msg::cat("group_norm_forward_with_plan: expected key=value in '",
                                                            plan, "'"));
    if (item.substr(0, eq) == key) return std::stoll(item.substr(eq + 1));
    pos = comma + 1;
  }
  return fallback;
}

// The split and held plans' `l2_keep_pct` option: the share of the L2 their last items are kept in, 0 to 100.
inline int l2_keep_pct_option(const std::string& plan) {
  const int64_t keep_pct = plan_option(plan, "l2_keep_pct", kSplitL2KeepPct);
  TORCH_CHECK(keep_pct >= 0 && keep_pct <= 100,
              gn_inline_msg::cat("group_norm_forward_with_plan: l2_keep_pct must be in [0, 100], got ", keep_pct));
  return static_cast<int>(keep_pct);
}

// A plan asked for by name (tests and benchmarks): launches it, or fails saying why it cannot.
template <typename T, int VEC, bool AFFINE, typename Epi>
void launch_forced(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts) {
  const std::string& plan = *pr.force;
  const std::string name = plan.substr(0, plan.find(':'));
  bool launched = true;
  if (name == "small") {
    launched = try_launch_small<T, VEC, AFFINE, Epi>(p, pr);
  } else if (name == "resident") {
    launched = try_launch_resident<T, VEC, AFFINE, Epi>(p, pr);
  } else if (name == "streamed") {
    StreamedOptions opt;
    opt.cluster = static_cast<int>(plan_option(plan, "cluster", 0));
    opt.groups = static_cast<int>(plan_option(plan, "groups", -1));
    const int64_t smem_kb = plan_option(plan, "smem_kb", -1);
    opt.smem_cap = smem_kb < 0 ? -1 : smem_kb * 1024;
    opt.reg_vecs = static_cast<int>(std::min<int64_t>(plan_option(plan, "reg_vecs", kStreamRegVecs), kStreamRegVecs));
    opt.forced = true;
    launched = try_launch_streamed<T, VEC, AFFINE, Epi>(p, pr, opts, opt);
  } else if (name == "fused") {
    launch_two_read<T, VEC, AFFINE, Epi>(p, pr, opts, TwoReadMode::kFused);
  } else if (name == "split") {
    launch_two_read<T, VEC, AFFINE, Epi>(p, pr, opts, TwoReadMode::kSplit, l2_keep_pct_option(plan),
                                         plan_option(plan, "pdl", 1) != 0);
  } else if (name == "held") {
    HeldOptions opt;
    opt.ctas_per_sm = static_cast<int>(plan_option(plan, "ctas_per_sm", kHeldCtasPerSm));
    opt.l2_keep_pct = l2_keep_pct_option(plan);
    const int64_t held_kb = plan_option(plan, "held_kb", -1);
    opt.smem_cap = held_kb < 0 ? -1 : held_kb * 1024;
    opt.grid_finalize = plan_option(plan, "grid_finalize", 0) != 0;
    launched = try_launch_held<T, VEC, AFFINE, Epi>(p, pr, opts, opt);
  } else {
    TORCH_CHECK(false, gn_inline_msg::cat("group_norm_forward_with_plan: unknown plan '", plan,
                                          "'; expected auto, small, resident, streamed, fused, split or held"));
  }
  TORCH_CHECK(launched, gn_inline_msg::cat("group_norm_forward_with_plan: plan '", plan, "' cannot take slices of ",
                                           pr.D, " elements (", pr.slices, " slices, vec ", VEC, ") on this device"));
}

// Slices that do not start at 16-byte boundaries (D % VEC != 0), in VEC-element vectors: the resident, held and
// two-read plans cut every range into a head, an aligned body and a tail (AlignedSplit) and are tried in
// launch_forward's order; the small and streamed plans load whole vectors from the slice's start and cannot take
// them. Before the held plan took them, the resident plan ran clusters of 8-16 CTAs in waves: H100, kernel us,
// resident -> held, (64,4,154113) G2 bf16 (79 MB, 16-CTA clusters) 174 -> 111 (torch.compile 144 in event time),
// (32,16,94230) G8 bf16 (96 MB, 8-CTA clusters) 177 -> 143 (compile 135: still 9% behind).
template <typename T, int VEC, bool AFFINE, typename Epi>
void launch_forward_unaligned(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts) {
  if (try_launch_resident<T, VEC, AFFINE, Epi>(p, pr, /*automatic=*/true, /*first_pass=*/true)) return;
  HeldOptions held;
  held.max_rounds = kHeldAutoMaxRounds;
  if (try_launch_held<T, VEC, AFFINE, Epi>(p, pr, opts, held)) return;
  if (try_launch_resident<T, VEC, AFFINE, Epi>(p, pr, /*automatic=*/true)) return;
  launch_two_read<T, VEC, AFFINE, Epi>(p, pr, opts, TwoReadMode::kAuto);
}

template <typename T, int VEC, bool AFFINE, typename Epi>
void launch_forward(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts) {
  if (pr.force && *pr.force != "auto") return launch_forced<T, VEC, AFFINE, Epi>(p, pr, opts);
  if (try_launch_small<T, VEC, AFFINE, Epi>(p, pr)) return;
  if (try_launch_resident<T, VEC, AFFINE, Epi>(p, pr, /*automatic=*/true, /*first_pass=*/true)) return;
  if (try_launch_streamed<T, VEC, AFFINE, Epi>(p, pr, opts, StreamedOptions{})) return;
  HeldOptions held;
  held.max_rounds = kHeldAutoMaxRounds;
  if (try_launch_held<T, VEC, AFFINE, Epi>(p, pr, opts, held)) return;
  if (try_launch_resident<T, VEC, AFFINE, Epi>(p, pr, /*automatic=*/true)) return;
  launch_two_read<T, VEC, AFFINE, Epi>(p, pr, opts, TwoReadMode::kAuto);
}

// x, y: (N, C, HW) contiguous. Plain GroupNorm (act.kind == kNone) runs kernels instantiated for the Identity
// epilogue, which compiles to exactly the normalisation; SiLU on 16-byte vectors of float/half data (the
// diffusion block) its own Fixed<kSilu> instantiation; any other activation (and float64 data, or slices taken
// element-wise) the Runtime one. Each extra instantiation adds its share to the build, so only the common case
// has one.
template <typename T, bool AFFINE>
void forward_typed(const at::Tensor& x, at::Tensor& y, const at::Tensor& w, const at::Tensor& b, at::Tensor& mean,
                   at::Tensor& rstd, int64_t G, int64_t HW, double eps, cudaStream_t stream,
                   const gn_act::Params& act, std::string* plan = nullptr, const std::string* force = nullptr,
                   int64_t* trace = nullptr) {
  using C = typename Compute<T>::type;
  constexpr int V = vec16<T>();
  const int64_t N = x.size(0), Cn = x.size(1);
  Problem pr{N * G, G, Cn / G, HW, Cn / G * HW, eps, x.get_device(), stream, plan, force, trace, act};
  Pointers<T> p{x.data_ptr<T>(), y.data_ptr<T>(), AFFINE ? ParamRef<T>::of(w) : ParamRef<T>{},
                AFFINE ? ParamRef<T>::of(b) : ParamRef<T>{}, mean.data_ptr<C>(), rstd.data_ptr<C>()};
  const uintptr_t xa = reinterpret_cast<uintptr_t>(p.x), ya = reinterpret_cast<uintptr_t>(p.y);
  const bool vectorised = xa % 16 == 0 && ya % 16 == 0 && pr.D % V == 0;
  // Slices whose length is not a multiple of V start at a different alignment each (D = 2 * 94230 bf16
  // elements). Element-wise accesses keep few bytes in flight per thread: 2.6-4.5x the copy on an H200, slower
  // than torch.compile ((32,16,94230) bf16 G8, (2,8,1803,1402) bf16 + SiLU, (32,1,545,1022) fp32). The
  // resident and two-read plans take them in 16-byte vectors with an element-wise head and tail per range
  // (launch_forward_unaligned) when x and y share their alignment; slices the small plan holds at VEC = 1 stay
  // element-wise, and so do plans named by the caller. GROUPNORM_INLINE_EDGE_VECTORS=0 (read per call of an
  // unaligned input only) keeps them element-wise, for benchmarks (benchmarks/unaligned_check.py).
  const bool edge_vectors = !vectorised && V > 1 && xa % 16 == ya % 16 && xa % sizeof(T) == 0 &&
                            pr.D > 32 * kSmallVecs && (force == nullptr || *force == "auto") && edge_vectors_enabled();
  if (act.kind == gn_act::kNone) {
    if (vectorised) launch_forward<T, V, AFFINE, gn_act::Identity>(p, pr, x.options());
    else if (edge_vectors) launch_forward_unaligned<T, V, AFFINE, gn_act::Identity>(p, pr, x.options());
    else launch_forward<T, 1, AFFINE, gn_act::Identity>(p, pr, x.options());
  } else if (act.kind == gn_act::kSilu && (vectorised || edge_vectors) && !std::is_same_v<T, double>) {
    if constexpr (!std::is_same_v<T, double>) {
      if (vectorised) launch_forward<T, V, AFFINE, gn_act::Silu>(p, pr, x.options());
      else launch_forward_unaligned<T, V, AFFINE, gn_act::Silu>(p, pr, x.options());
    }
  } else {
    if (vectorised) launch_forward<T, V, AFFINE, gn_act::Runtime>(p, pr, x.options());
    else if (edge_vectors) launch_forward_unaligned<T, V, AFFINE, gn_act::Runtime>(p, pr, x.options());
    else launch_forward<T, 1, AFFINE, gn_act::Runtime>(p, pr, x.options());
  }
}

""" + CHANNELS_LAST_FORWARD_CUDA + r"""
std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_impl(const at::Tensor& input_arg, int64_t num_groups,
                                                            const std::optional<at::Tensor>& weight,
                                                            const std::optional<at::Tensor>& bias, double eps,
                                                            int64_t activation, double act_alpha, double act_beta,
                                                            const std::string* force, int64_t* trace = nullptr) {
  gn_inline_forward::check_forward_args(input_arg, num_groups, weight, bias);
  TORCH_CHECK(input_arg.is_cuda(), "group_norm_forward_cuda: expected a CUDA input");  // (checked, so unreachable)
  const c10::cuda::CUDAGuard guard(input_arg.device());
  // Every CUDA kernel reads a half input's own-dtype parameters directly (ParamRef): no conversion launches.
  gn_inline_forward::ForwardCall call = gn_inline_forward::prepare_forward(
      input_arg, num_groups, weight, bias, activation, act_alpha, act_beta, "group_norm_forward_cuda",
      /*keep_param_dtype=*/true);
  const at::Tensor& input = call.x;
  at::Tensor &y = call.y, &mean = call.mean, &rstd = call.rstd;
  if (call.empty) return {y, mean, rstd};
  const int64_t HW = call.HW;
  const bool affine = call.params.affine();
  const at::Tensor &w = call.params.w, &b = call.params.b;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  const at::ScalarType st = input.scalar_type();
  if (call.channels_last) {
    TORCH_CHECK(force == nullptr || *force == "auto",
                "group_norm_forward_with_plan: named plans take NCHW-contiguous inputs only");
    launch_forward_channels_last(input, y, call.params, mean, rstd, num_groups, HW, eps, call.act, stream, trace);
    return {y, mean, rstd};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, st, "group_norm_forward_cuda", [&] {
    if (affine) forward_typed<scalar_t, true>(input, y, w, b, mean, rstd, num_groups, HW, eps, stream, call.act, nullptr, force, trace);
    else forward_typed<scalar_t, false>(input, y, w, b, mean, rstd, num_groups, HW, eps, stream, call.act, nullptr, force, trace);
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_forward_cuda(const at::Tensor& input, int64_t num_groups,
                                                                       const std::optional<at::Tensor>& weight,
                                                                       const std::optional<at::Tensor>& bias,
                                                                       double eps, int64_t activation,
                                                                       double act_alpha, double act_beta) {
  return forward_impl(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta, nullptr);
}

// The forward through a plan named by the caller ("auto" is the normal choice): tests run every plan on
// small inputs, benchmarks compare plans. A plan that cannot take the input raises.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_forward_with_plan_cuda(
    const at::Tensor& input, int64_t num_groups, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, const std::string& plan, int64_t activation,
    double act_alpha, double act_beta) {
  return forward_impl(input, num_groups, weight, bias, eps, activation, act_alpha, act_beta, &plan);
}

// Diagnostics of the streamed plan: runs `plan` (a "streamed[:options]" plan, no affine, eps 1e-5) once and
// returns thread 0's %globaltimer stamps, int64 (SMs, kTraceRounds, kTracePoints): row = CTA index in the
// grid, zeros for CTAs beyond the grid and rounds not run. See kTracePoints for what each stamp marks.
at::Tensor group_norm_streamed_trace_cuda(const at::Tensor& input, int64_t num_groups, const std::string& plan) {
  TORCH_CHECK(plan.rfind("streamed", 0) == 0,
              gn_inline_msg::cat("group_norm_streamed_trace: expected a streamed plan, got '", plan, "'"));
  TORCH_CHECK(input.is_cuda(), "group_norm_streamed_trace: expected a CUDA input");
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor trace = at::empty({device_info(input.get_device()).sms, kTraceRounds, kTracePoints},
                               input.options().dtype(at::kLong));
  trace.zero_();
  forward_impl(input.contiguous(), num_groups, std::nullopt, std::nullopt, 1e-5, gn_act::kNone, 0.0, 0.0, &plan,
               trace.data_ptr<int64_t>());
  return trace;
}

// Diagnostics of the channels-last single launches (cl_block, cl_fused): runs the forward of a channels-last input
// once, as group_norm_forward would (GROUPNORM_INLINE_CL_FORWARD_PLAN=fused: never the block plan), and returns
// thread 0's %globaltimer stamps, int64 (SMs * kClTraceMaxCtasPerSm, kClTracePoints): row = CTA index in the grid,
// zeros beyond the grid. See kClTracePoints for what each stamp marks. Inputs that take the three-launch plan
// raise.
at::Tensor group_norm_channels_last_trace_cuda(const at::Tensor& input, int64_t num_groups,
                                               const std::optional<at::Tensor>& weight,
                                               const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(input.is_cuda(), "group_norm_channels_last_trace: expected a CUDA input");
  TORCH_CHECK(gn_inline_forward::is_channels_last(input),
              "group_norm_channels_last_trace: expected a channels_last (4-D) or channels_last_3d (5-D) input");
  const c10::cuda::CUDAGuard guard(input.device());
  at::Tensor trace = at::zeros({int64_t{device_info(input.get_device()).sms} * cl_forward::kClTraceMaxCtasPerSm,
                                cl_forward::kClTracePoints},
                               input.options().dtype(at::kLong));
  forward_impl(input, num_groups, weight, bias, 1e-5, gn_act::kNone, 0.0, 0.0, nullptr, trace.data_ptr<int64_t>());
  return trace;
}

// The plan group_norm_forward_cuda would take for this input (see the module docstring); launches nothing.
std::string group_norm_forward_plan_cuda(const at::Tensor& input, int64_t num_groups, bool affine) {
  TORCH_CHECK(input.is_cuda() && input.dim() >= 2 && num_groups > 0 && input.size(1) % num_groups == 0 &&
                  input.numel() > 0,
              "group_norm_forward_plan: expected a non-empty CUDA input whose channels divide into num_groups");
  const c10::cuda::CUDAGuard guard(input.device());
  TORCH_CHECK_NOT_IMPLEMENTED(gn_inline_forward::dispatched_type(input.scalar_type()),
                              gn_inline_msg::not_implemented_for("group_norm_forward_plan", input.scalar_type()));
  if (gn_inline_forward::is_channels_last(input)) {
    std::string text;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_forward_plan", [&] {
      text = cl_forward::describe<scalar_t>(input, num_groups);
    });
    return text;
  }
  const at::Tensor x = input.contiguous();
  const at::ScalarType acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor stats = at::empty({1}, x.options().dtype(acc));
  // Nothing is written: the plan is only described. The output stands in as a one-element allocation, aligned
  // as the real (fresh) output would be, so the description sees the alignment a call would.
  at::Tensor out = at::empty({1}, x.options());
  const int64_t HW = x.numel() / (x.size(0) * x.size(1));
  std::string plan;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  const at::ScalarType st = x.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, st, "group_norm_forward_plan", [&] {
    if (affine) forward_typed<scalar_t, true>(x, out, stats, stats, stats, stats, num_groups, HW, 0.0, stream, {}, &plan);
    else forward_typed<scalar_t, false>(x, out, stats, stats, stats, stats, num_groups, HW, 0.0, stream, {}, &plan);
  });
  return plan;
}

}  // namespace gn_inline

// CUDA-only diagnostics operators, defined here rather than beside the portable schemas.
TORCH_LIBRARY_FRAGMENT(GN_NAMESPACE, m) {
  m.def("group_norm_streamed_trace(Tensor input, int num_groups, str plan) -> Tensor");
  m.def("group_norm_channels_last_trace(Tensor input, int num_groups, Tensor? weight, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("group_norm_streamed_trace", &gn_inline::group_norm_streamed_trace_cuda);
  m.impl("group_norm_channels_last_trace", &gn_inline::group_norm_channels_last_trace_cuda);
  m.impl("group_norm_forward", &gn_inline::group_norm_forward_cuda);
  m.impl("group_norm_forward_plan", &gn_inline::group_norm_forward_plan_cuda);
  m.impl("group_norm_forward_with_plan", &gn_inline::group_norm_forward_with_plan_cuda);
}
"""
