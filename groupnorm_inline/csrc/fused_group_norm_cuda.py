"""CUDA source of the GroupNorm family kernel (operator and functors described in `fused_group_norm_cpu`).

Two paths, chosen per chain (GN_FAMILY_CHAINS) and input:

Slice path (the convolution problems: (n, g) slices of cpg * S values, S up to 10^5). Rows (n, c) of S values are
cut into parts of ~8192 values (plan_parts), one work item each; a grid of SMs x resident CTAs walks the items.
  1. `part_stats_kernel`: per item, the prologue's values v read as 16-byte vectors (a scalar head up to the
     row's first 16-byte boundary and a scalar tail, so any S and any offset work), 4 vectors in flight per thread;
     float32 sums of (v - K) and (v - K)^2 per thread, K = v at the first position of the group (a shift that
     keeps the sum of squares from cancelling when the mean is large against the spread), combined over the CTA in
     float64 into one partial per item.
  2. `group_stats_kernel`: one warp per (n, g) adds the group's cpg * parts partials in float64 in a fixed order
     (no atomics: the result does not depend on scheduling), and writes (mean, rstd) as float32 (rounded to the
     data type under kStatsRound).
  3. the output:
     store         `part_store_kernel`: the items in the reverse order of pass 1 (its last rows are still in the
                   50 MB L2), x read evict-first, 16-byte streaming stores: x read twice, out written once;
     mean_all / mean_spatial with the identity epilogue: `linear_mean_kernel`, no second pass over x: the mean of
                   z = affine(v) over a channel is affine(mean of v), and pass 1 has each row's sum: x read once;
     other means   `part_sum_kernel` (per-item float64 sums of e) then `mean_kernel`;
     max_pool      `max_pool_kernel`: one CTA per (row, chunk of output pixels), the max over each window.
  input_pool > 1 (#11): `pooled_stats_kernel` / `pooled_store_kernel` over parts of ~2048 pooled values of a group
     (its rows are contiguous), walked by a machine-filling grid; scalar loads, k * k per pooled value.

Channels-last paths (x (N, *, C) from a channels_last convolution, store output in that layout):
  unpooled  `cl_stats_kernel` (per (n, chunk of positions) item, a thread per 16 bytes of channels) ->
            `group_stats_kernel` -> `cl_store_kernel`: x read twice, out written once;
  pooled    `cl_pooled_kernel` (#11 in float32): a cluster of two CTAs per sample holds its pooled values in
            shared memory, takes each group's mean and centred sum of squares there (the two CTAs' sums exchanged
            through distributed shared memory) and writes the output: x read once.
`channel_moments` (a BatchNorm's batch statistics of a channels_last x) reuses `cl_stats_kernel` with one group per
channel.

Rows path (the GEMM problems: x (N, C), slices of cpg contiguous values): `rows_kernel`, one CTA per row, each
warp takes groups warp, warp + 8, ...; a lane holds the values lane, lane + 32, ... of the group in registers
(PER of them: cpg <= 64 -> 2, <= 512 -> 16; wider groups take three sweeps over global memory), so x is read
once; mean and centred sum of squares by warp shuffles. min_channels keeps a running min per warp and reduces
it over the CTA: only (N, 1) is written.
"""

from .common_cuda import COMMON_CUDA_HEADER
from .conv3d_direct import CONV3D_DIRECT_CUDA
from .fused_group_norm_cpu import FAMILY_COMMON_TEMPLATE

FAMILY_CUDA_TEMPLATE = COMMON_CUDA_HEADER + FAMILY_COMMON_TEMPLATE + r"""
#include <algorithm>
#include <climits>
#include <cooperative_groups.h>

namespace gn_family {

constexpr int kThreads = 256;
constexpr int kItems = 8;                       // GroupNorm inputs per thread per chunk
constexpr int64_t kChunk = kThreads * kItems;   // per CTA of the slice path
constexpr int kWarps = kThreads / 32;

// One warp per (n, g): float2 (mean, rstd) from the group's `per_group` partials (items of a group are contiguous:
// group * per_group onwards), added in float64 in a fixed order. The partials are sums of v - K and (v - K)^2, K the
// prologue's value at the group's first element.
template <typename T, class Pro>
__global__ void __launch_bounds__(kThreads) group_stats_kernel(const T* __restrict__ x, const Problem p,
                                                               int64_t per_group,
                                                               const double2* __restrict__ partial,
                                                               float2* __restrict__ stats) {
  const int64_t group = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (group >= p.N * p.G) return;  // whole warps leave together
  const int64_t n = group / p.G, c_first = (group - n * p.G) * p.cpg;
  const int64_t first = group * per_group;
  double a = 0.0, b = 0.0;
  for (int64_t i = lane; i < per_group; i += 32) {
    const double2 q = partial[first + i];
    a += q.x;
    b += q.y;
  }
  a = gn_inline::warp_sum(a);
  b = gn_inline::warp_sum(b);
  if (lane == 0) {
    const Pro pro(p.args, 0, 0);
    const T* first = p.channels_last ? x + n * p.S_in * p.C + c_first : x + (n * p.C + c_first) * p.S_in;
    const float shift = load_value<T, Pro>(first, 0, c_first, pro, p);
    const double cnt = static_cast<double>(p.cpg * p.S);
    const double m = a / cnt;
    const double var = fmax(b / cnt - m * m, 0.0);
    // rsqrtf of the float32 variance plus eps: PyTorch's CUDA GroupNorm takes rsqrt (not 1 / sqrt) in float32.
    float mean = static_cast<float>(static_cast<double>(shift) + m);
    float rstd = rsqrtf(static_cast<float>(var) + p.eps);
    round_stats<T>(p.stats_mode, mean, rstd);
    stats[group] = make_float2(mean, rstd);
  }
}

// ------------------------------------------------------------------ pooled-input path (input_pool = k > 1, #11)
// The GroupNorm input is the k x k max-pool of the prologue's values. A group's pooled values are contiguous in
// the pooled index space (its cpg rows of S pooled values each): j in [0, cpg * S) is channel c_first + j / S,
// position j % S. Each group is cut into `parts` parts of ~kPooledPart pooled values, one work item each
// (item = group * parts + part), and a grid of SMs x resident CTAs walks the items: every thread has a few
// pooled values per item whatever S is (a CTA per row left most threads idle when S is a few hundred).

constexpr int64_t kPooledPart = 2048;  // pooled values per item: 8 per thread, k * k loads each

struct GroupParts {
  int64_t parts = 1, part_len = 1, items = 0;
};

inline GroupParts plan_group_parts(int64_t groups, int64_t group_len) {
  GroupParts r;
  r.parts = std::max<int64_t>(1, (group_len + kPooledPart - 1) / kPooledPart);
  r.part_len = (group_len + r.parts - 1) / r.parts;
  r.items = groups * r.parts;
  return r;
}

// A pooled value of channel row `xr` (S_in = H * W values) at pooled position s, in index type I: int where a
// group's input (cpg * S_in values) has fewer than 2^31 elements (the host checks), so the three divisions per
// pooled value are 32-bit (a 64-bit division is a ~70-instruction software routine, the cost that dominated).
template <typename I, typename T, class Pro>
__device__ __forceinline__ float load_pooled(const T* xr, I s, int64_t c, const Pro& pro, I W, I ow, I k) {
  const I oh = s / ow;
  const T* window = xr + oh * k * W + (s - oh * ow) * k;
  float m = -INFINITY;
  for (I i = 0; i < k; ++i)
    for (I j = 0; j < k; ++j) m = maximum_nan(m, pro(static_cast<float>(window[i * W + j]), c));
  return m;
}

template <typename T, class Pro, typename I>
__global__ void __launch_bounds__(kThreads) pooled_stats_kernel(const T* __restrict__ x, const Problem p,
                                                                const GroupParts gp,
                                                                double2* __restrict__ partial) {
  __shared__ double scratch[64];
  const Pro pro(p.args, 0, 0);
  const I S = static_cast<I>(p.S), S_in = static_cast<I>(p.S_in), W = static_cast<I>(p.W);
  const I k = static_cast<I>(p.in_pool), ow = static_cast<I>(p.W / p.in_pool);
  const I group_len = static_cast<I>(p.cpg * p.S), part_len = static_cast<I>(gp.part_len);
  for (int64_t item = blockIdx.x; item < gp.items; item += gridDim.x) {
    const int64_t group = item / gp.parts, part = item - group * gp.parts;
    const int64_t n = group / p.G, c_first = (group - n * p.G) * p.cpg;
    const T* xg = x + (n * p.C + c_first) * p.S_in;
    const float shift = load_pooled<I, T, Pro>(xg, I(0), c_first, pro, W, ow, k);
    const I begin = static_cast<I>(part) * part_len;
    const I end = begin + part_len < group_len ? begin + part_len : group_len;
    float s1 = 0.0f, s2 = 0.0f;
    for (I j = begin + static_cast<I>(threadIdx.x); j < end; j += kThreads) {
      const I dc = j / S;
      const float d = load_pooled<I, T, Pro>(xg + dc * S_in, j - dc * S, c_first + dc, pro, W, ow, k) - shift;
      s1 += d;
      s2 = fmaf(d, d, s2);
    }
    double a = s1, b = s2;
    gn_inline::block_sum2(a, b, scratch);  // ends with a barrier: scratch is free for the next item
    if (threadIdx.x == 0) partial[item] = make_double2(a, b);
  }
}

// The output of the pooled path: items in the reverse order of the statistics (the last ones are still in L2),
// stores coalesced (the group's output rows are contiguous too).
template <typename T, class Pro, class Epi, typename I>
__global__ void __launch_bounds__(kThreads) pooled_store_kernel(const T* __restrict__ x, const Problem p,
                                                                const GroupParts gp,
                                                                const float2* __restrict__ stats,
                                                                T* __restrict__ out) {
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  const I S = static_cast<I>(p.S), S_in = static_cast<I>(p.S_in), W = static_cast<I>(p.W);
  const I k = static_cast<I>(p.in_pool), ow = static_cast<I>(p.W / p.in_pool);
  const I group_len = static_cast<I>(p.cpg * p.S), part_len = static_cast<I>(gp.part_len);
  const bool fused = (p.stats_mode & kFusedAffine) != 0;
  const float* gw = p.args.vec[kMaxVectors - 2];
  const float* gb = p.args.vec[kMaxVectors - 1];
  for (int64_t it = blockIdx.x; it < gp.items; it += gridDim.x) {
    const int64_t item = gp.items - 1 - it;
    const int64_t group = item / gp.parts, part = item - group * gp.parts;
    const int64_t n = group / p.G, c_first = (group - n * p.G) * p.cpg;
    const T* xg = x + (n * p.C + c_first) * p.S_in;
    T* og = out + (n * p.C + c_first) * p.S;
    const float2 st = stats[group];
    const I begin = static_cast<I>(part) * part_len;
    const I end = begin + part_len < group_len ? begin + part_len : group_len;
    for (I j = begin + static_cast<I>(threadIdx.x); j < end; j += kThreads) {
      const I dc = j / S;
      const int64_t c = c_first + dc;
      const float v = load_pooled<I, T, Pro>(xg + dc * S_in, j - dc * S, c, pro, W, ow, k);
      const ChannelAffine aff(st.x, st.y, gw[c], gb[c], fused);
      og[j] = static_cast<T>(epi(rnd<T>(aff(v)), c));
    }
  }
}

// max_pool output: one CTA per (row, chunk of kChunk output pixels), the max over each window of the epilogue's
// values.
template <typename T, class Pro, class Epi>
__global__ void __launch_bounds__(kThreads) max_pool_kernel(const T* __restrict__ x, const Problem p, int64_t chunks,
                                                            const float2* __restrict__ stats, T* __restrict__ out) {
  const int64_t task = blockIdx.x;
  const int64_t row = task / chunks, chunk = task - row * chunks;
  const int64_t n = row / p.C, c = row - n * p.C;
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  const float2 st = stats[n * p.G + c / p.cpg];
  const ChannelAffine aff(st.x, st.y, p.args.vec[kMaxVectors - 2][c], p.args.vec[kMaxVectors - 1][c],
                          (p.stats_mode & kFusedAffine) != 0);
  const T* xr = x + row * p.S_in;
  const int64_t begin = chunk * kChunk + threadIdx.x;
  const int64_t pixels = p.OH * p.OW;
  T* o = out + row * pixels;
#pragma unroll 2
  for (int i = 0; i < kItems; ++i) {
    const int64_t q = begin + static_cast<int64_t>(i) * kThreads;
    if (q < pixels) {
      const int64_t h0 = (q / p.OW) * p.out_pool, w0 = (q % p.OW) * p.out_pool;
      float m = -INFINITY;
      for (int64_t u = 0; u < p.out_pool; ++u)
        for (int64_t k = 0; k < p.out_pool; ++k) {
          const float v = pro(static_cast<float>(xr[(h0 + u) * p.W + w0 + k]), c);
          m = maximum_nan(m, epi(rnd<T>(aff(v)), c));
        }
      o[q] = static_cast<T>(m);
    }
  }
}

// ------------------------------------------------------------------ row-part path (input_pool = 1)
// Row r = n * C + c of x holds S values; each row is cut into `parts` parts of `part_len` values (a multiple of the
// 16-byte vector width), one work item each, numbered row-major (item = r * parts + part): a group's items are
// contiguous, as group_stats_kernel reads them. A grid of (SMs x resident CTAs) walks the items with a stride.

struct RowParts {
  int64_t parts = 1, part_len = 1, items = 0;
};

// Items of ~kPartTarget values (32 KB of float32): 8 x 16 bytes per thread, enough for a CTA to keep 8 KB in flight
// per step while the reduction per item (two barriers) stays a few percent of the item's time.
constexpr int64_t kPartTarget = 8192;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread per step

inline RowParts plan_parts(int64_t rows, int64_t S, int vec) {
  RowParts r;
  r.parts = std::max<int64_t>(1, (S + kPartTarget - 1) / kPartTarget);
  const int64_t len = (S + r.parts - 1) / r.parts;
  r.part_len = std::max<int64_t>(vec, (len + vec - 1) / vec * vec);
  r.parts = (S + r.part_len - 1) / r.part_len;
  r.items = rows * r.parts;
  return r;
}

template <typename T>
using Vec16 = gn_inline::Vec<T, gn_inline::vec16<T>()>;

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// One value stored streaming (float: st.global.cs; the 2-byte types through a plain store: only the few values of a
// row's unaligned head and tail take this way).
template <typename T>
__device__ __forceinline__ void store_streaming(T* p, T v) {
  if constexpr (std::is_same_v<T, float>) __stcs(p, v);
  else *p = v;
}

// 16 bytes at p (16-byte aligned): through L1 for the statistics pass (STREAM false), evict-first for the apply
// pass, which reads x for the last time (STREAM true).
template <typename T, bool STREAM>
__device__ __forceinline__ Vec16<T> load16(const T* p) {
  Vec16<T> v;
  if constexpr (STREAM) *reinterpret_cast<int4*>(&v) = __ldcs(reinterpret_cast<const int4*>(p));
  else *reinterpret_cast<int4*>(&v) = __ldg(reinterpret_cast<const int4*>(p));
  return v;
}

// The values [begin, end) of one row xr, across the CTA: a scalar head up to the first 16-byte boundary, the body
// as 16-byte vectors (kUnroll of them loaded per thread before any is used), a scalar tail. vec_ok false: all
// scalar (coalesced). fs(i, value) takes one value, fv(i, vector) the vector that starts at i.
template <typename T, bool STREAM, class Scalar, class Vector>
__device__ __forceinline__ void walk_row(const T* __restrict__ xr, int64_t begin, int64_t end, bool vec_ok,
                                         Scalar&& fs, Vector&& fv) {
  constexpr int V = gn_inline::vec16<T>();
  int64_t head = end - begin;
  if (vec_ok) {
    const int64_t mis = static_cast<int64_t>(reinterpret_cast<uintptr_t>(xr + begin) % 16);
    head = mis == 0 ? 0 : imin((16 - mis) / static_cast<int64_t>(sizeof(T)), end - begin);
  }
  for (int64_t i = threadIdx.x; i < head; i += kThreads) fs(begin + i, xr[begin + i]);
  const int64_t b0 = begin + head;
  const int64_t nvec = vec_ok ? (end - b0) / V : 0;
  for (int64_t k0 = threadIdx.x; k0 < nvec; k0 += static_cast<int64_t>(kThreads) * kUnroll) {
    Vec16<T> buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + static_cast<int64_t>(u) * kThreads;
      if (k < nvec) buf[u] = load16<T, STREAM>(xr + b0 + k * V);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + static_cast<int64_t>(u) * kThreads;
      if (k < nvec) fv(b0 + k * V, buf[u]);
    }
  }
  for (int64_t i = b0 + nvec * V + threadIdx.x; i < end; i += kThreads) fs(i, xr[i]);
}

// The prologue's value of the group's first element: the shift K of the shifted sums (see stats_kernel).
template <typename T, class Pro>
__device__ __forceinline__ float group_shift(const T* __restrict__ x, const Problem& p, int64_t row, const Pro& pro) {
  const int64_t c = row % p.C, c_first = c - c % p.cpg;
  return pro(static_cast<float>(x[(row - (c - c_first)) * p.S]), c_first);
}

// Statistics pass: per item, float32 sums of (v - K) and (v - K)^2 per thread, combined over the CTA in float64.
template <typename T, class Pro>
__global__ void __launch_bounds__(kThreads) part_stats_kernel(const T* __restrict__ x, const Problem p,
                                                              const RowParts rp, double2* __restrict__ partial) {
  __shared__ double scratch[64];
  const Pro pro(p.args, 0, 0);
  for (int64_t item = blockIdx.x; item < rp.items; item += gridDim.x) {
    const int64_t row = item / rp.parts, part = item - row * rp.parts;
    const int64_t c = row % p.C;
    const float shift = group_shift<T, Pro>(x, p, row, pro);
    const int64_t begin = part * rp.part_len, end = imin(begin + rp.part_len, p.S);
    float s1 = 0.0f, s2 = 0.0f;
    auto add = [&](float v) {
      const float d = v - shift;
      s1 += d;
      s2 = fmaf(d, d, s2);
    };
    walk_row<T, false>(
        x + row * p.S, begin, end, true, [&](int64_t, T v) { add(pro(static_cast<float>(v), c)); },
        [&](int64_t, const Vec16<T>& v) {
#pragma unroll
          for (int j = 0; j < gn_inline::vec16<T>(); ++j) add(pro(static_cast<float>(v.v[j]), c));
        });
    double a = s1, b = s2;
    gn_inline::block_sum2(a, b, scratch);  // ends with a barrier: scratch is free for the next item
    if (threadIdx.x == 0) partial[item] = make_double2(a, b);
  }
}

// Apply pass, store output: the items in the reverse order of the statistics pass (its last rows are still in L2),
// x read evict-first, the output stored streaming (it must not evict x). vec_ok: x and out share their offset
// modulo 16 bytes (always for tensors from the caching allocator).
template <typename T, class Pro, class Epi>
__global__ void __launch_bounds__(kThreads) part_store_kernel(const T* __restrict__ x, const Problem p,
                                                              const RowParts rp, bool vec_ok,
                                                              const float2* __restrict__ stats, T* __restrict__ out) {
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  for (int64_t k = blockIdx.x; k < rp.items; k += gridDim.x) {
    const int64_t item = rp.items - 1 - k;
    const int64_t row = item / rp.parts, part = item - row * rp.parts;
    const int64_t n = row / p.C, c = row - n * p.C;
    const float2 st = stats[n * p.G + c / p.cpg];
    const ChannelAffine aff(st.x, st.y, p.args.vec[kMaxVectors - 2][c], p.args.vec[kMaxVectors - 1][c],
                            (p.stats_mode & kFusedAffine) != 0);
    const int64_t begin = part * rp.part_len, end = imin(begin + rp.part_len, p.S);
    T* orow = out + row * p.S;
    auto value = [&](T v) { return static_cast<T>(epi(rnd<T>(aff(pro(static_cast<float>(v), c))), c)); };
    walk_row<T, true>(
        x + row * p.S, begin, end, vec_ok, [&](int64_t i, T v) { store_streaming(orow + i, value(v)); },
        [&](int64_t i, const Vec16<T>& v) {
          Vec16<T> o;
#pragma unroll
          for (int j = 0; j < gn_inline::vec16<T>(); ++j) o.v[j] = value(v.v[j]);
          gn_inline::store_vec_streaming(orow + i, o);
        });
  }
}

// Apply pass of a mean output with an epilogue that is not linear: per item the float64 sum of e (mean_kernel adds
// the items of each output).
template <typename T, class Pro, class Epi>
__global__ void __launch_bounds__(kThreads) part_sum_kernel(const T* __restrict__ x, const Problem p,
                                                            const RowParts rp, const float2* __restrict__ stats,
                                                            double* __restrict__ sums) {
  __shared__ double scratch[64];
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  for (int64_t k = blockIdx.x; k < rp.items; k += gridDim.x) {
    const int64_t item = rp.items - 1 - k;
    const int64_t row = item / rp.parts, part = item - row * rp.parts;
    const int64_t n = row / p.C, c = row - n * p.C;
    const float2 st = stats[n * p.G + c / p.cpg];
    const ChannelAffine aff(st.x, st.y, p.args.vec[kMaxVectors - 2][c], p.args.vec[kMaxVectors - 1][c],
                            (p.stats_mode & kFusedAffine) != 0);
    const int64_t begin = part * rp.part_len, end = imin(begin + rp.part_len, p.S);
    float acc = 0.0f;
    auto add = [&](T v) { acc += epi(rnd<T>(aff(pro(static_cast<float>(v), c))), c); };
    walk_row<T, true>(
        x + row * p.S, begin, end, true, [&](int64_t, T v) { add(v); },
        [&](int64_t, const Vec16<T>& v) {
#pragma unroll
          for (int j = 0; j < gn_inline::vec16<T>(); ++j) add(v.v[j]);
        });
    double a = acc, unused = 0.0;
    gn_inline::block_sum2(a, unused, scratch);
    if (threadIdx.x == 0) sums[item] = a;
  }
}

// Mean outputs with the identity epilogue need no second pass: the mean of z = affine(v) over a channel is
// affine(mean of v), and the statistics pass already has each row's sum of v (K * S + the sum of (v - K) over its
// parts). One CTA per sample, a thread per channel; float64 throughout. For float16/bfloat16 the reference rounds
// each z before averaging; those roundings (at most half a unit each, of both signs) move the mean by far less than
// one unit of the result's dtype.
template <typename T, class Pro>
__global__ void __launch_bounds__(kThreads) linear_mean_kernel(const T* __restrict__ x, const Problem p,
                                                               const RowParts rp,
                                                               const double2* __restrict__ partial,
                                                               const float2* __restrict__ stats, T* __restrict__ out) {
  __shared__ double scratch[64];
  const Pro pro(p.args, 0, 0);
  const int64_t n = blockIdx.x;
  const bool fused = (p.stats_mode & kFusedAffine) != 0;
  double total = 0.0;
  for (int64_t c = threadIdx.x; c < p.C; c += kThreads) {
    const int64_t row = n * p.C + c;
    double sum = 0.0;
    for (int64_t q = 0; q < rp.parts; ++q) sum += partial[row * rp.parts + q].x;
    const double m = static_cast<double>(group_shift<T, Pro>(x, p, row, pro)) + sum / static_cast<double>(p.S);
    const float2 st = stats[n * p.G + c / p.cpg];
    const float w = p.args.vec[kMaxVectors - 2][c], b = p.args.vec[kMaxVectors - 1][c];
    const ChannelAffine aff(st.x, st.y, w, b, fused);
    const double z = fused ? static_cast<double>(aff.a) * m + static_cast<double>(aff.c)
                           : (m - static_cast<double>(st.x)) * static_cast<double>(st.y) * static_cast<double>(w) +
                                 static_cast<double>(b);
    if (p.output == kMeanSpatial) out[row] = static_cast<T>(z);
    total += z;
  }
  if (p.output == kMeanAll) {
    double unused = 0.0;
    gn_inline::block_sum2(total, unused, scratch);
    if (threadIdx.x == 0) out[n] = static_cast<T>(total / static_cast<double>(p.C));
  }
}

// ------------------------------------------------------------------ channels-last path (store output)
// x (N, S, C) in memory, channel fastest (a channels_last convolution's output). A thread owns V = 16 bytes of
// consecutive channels, c0 = (threadIdx.x % tpr) * V with tpr = C / V, and walks the positions r, r + rps, ... of
// its work item, r = threadIdx.x / tpr, rps = kThreads / tpr positions per CTA step (threads past rps * tpr idle).
// An item is (n, chunk of `len` positions), ~kClPart values. Its statistics are shifted sums per group (the
// shift K = the prologue's value at (n, 0, the group's first channel), group_stats_kernel's shift), so the
// partials are per (n, g, chunk), laid out group-major as group_stats_kernel reads them.
struct ClPlan {
  int64_t tpr = 1, rps = 1, len = 1, chunks = 1, items = 0;
};

// Values per item: 64 (float) / 128 (half) 16-byte vectors per thread. An item ends with the CTA-wide column
// reduction (three barriers, a serial sum over the CTA's positions), which large items amortise: on an H200 the
// statistics pass of #19 (GELU, 2.2 GB) took 1.36 / 1.11 / 1.00 / 0.94 ms at 8K / 16K / 32K / 64K values per item,
// #60's (Swish, 1 GB) 0.85 / 0.69 / 0.60 / 0.57 ms (with 8 loads in flight per thread; 4, kept, did better still at
// 16K: 1.08 and 0.47 ms).
constexpr int64_t kClPart = 65536;
constexpr int64_t kClMaxChannels = 1024;  // the column sums of one item fit 16 KB of shared memory
constexpr int64_t kClItemsPerSm = 4;      // small inputs: shorter items, at least this many per SM

inline ClPlan plan_channels_last(int64_t N, int64_t S, int64_t C, int vec, int sms) {
  ClPlan q;
  q.tpr = C / vec;
  q.rps = kThreads / q.tpr;
  const int64_t filling = (N * S + kClItemsPerSm * sms - 1) / (kClItemsPerSm * sms);  // positions per item
  const int64_t len = std::max<int64_t>(q.rps, std::min<int64_t>(kClPart / C, filling));
  q.len = (len + q.rps - 1) / q.rps * q.rps;
  q.chunks = std::max<int64_t>(1, (S + q.len - 1) / q.len);
  q.items = N * q.chunks;
  return q;
}

// Statistics pass: per thread float32 shifted sums per owned channel; per item the column of each channel summed in
// float64 over the CTA's positions (shared memory), then each group's cpg columns by one warp.
template <typename T, class Pro>
__global__ void __launch_bounds__(kThreads) cl_stats_kernel(const T* __restrict__ x, const Problem p, const ClPlan q,
                                                            double2* __restrict__ partial) {
  constexpr int V = gn_inline::vec16<T>();
  __shared__ float2 lanes[kThreads * V];     // [r][c]: each thread's sums, rps * C <= kThreads * V entries
  __shared__ double2 columns[kClMaxChannels];
  const Pro pro(p.args, 0, 0);
  const int64_t r = threadIdx.x / q.tpr, c0 = (threadIdx.x - r * q.tpr) * V;
  const bool active = r < q.rps;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int64_t item = blockIdx.x; item < q.items; item += gridDim.x) {
    const int64_t n = item / q.chunks, chunk = item - n * q.chunks;
    const T* xn = x + n * p.S * p.C;
    float s1[V], s2[V], shift[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s1[j] = 0.0f;
      s2[j] = 0.0f;
      const int64_t c_first = active ? (c0 + j) - (c0 + j) % p.cpg : 0;
      shift[j] = active ? pro(static_cast<float>(xn[c_first]), c_first) : 0.0f;
    }
    if (active) {
      const int64_t begin = chunk * q.len, end = imin(begin + q.len, p.S);
      for (int64_t s0 = begin + r; s0 < end; s0 += q.rps * kUnroll) {
        Vec16<T> buf[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t s = s0 + u * q.rps;
          if (s < end) buf[u] = load16<T, false>(xn + s * p.C + c0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (s0 + u * q.rps < end) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float d = pro(static_cast<float>(buf[u].v[j]), c0 + j) - shift[j];
              s1[j] += d;
              s2[j] = fmaf(d, d, s2[j]);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) lanes[r * p.C + c0 + j] = make_float2(s1[j], s2[j]);
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.C; c += kThreads) {
      double a = 0.0, b = 0.0;
      for (int64_t k = 0; k < q.rps; ++k) {
        const float2 v = lanes[k * p.C + c];
        a += v.x;
        b += v.y;
      }
      columns[c] = make_double2(a, b);
    }
    __syncthreads();
    for (int64_t g = warp; g < p.G; g += kWarps) {
      double a = 0.0, b = 0.0;
      for (int64_t k = lane; k < p.cpg; k += 32) {
        a += columns[g * p.cpg + k].x;
        b += columns[g * p.cpg + k].y;
      }
      a = gn_inline::warp_sum(a);
      b = gn_inline::warp_sum(b);
      if (lane == 0) partial[(n * p.G + g) * q.chunks + chunk] = make_double2(a, b);
    }
    __syncthreads();  // lanes and columns are rewritten by the next item
  }
}

// Apply pass: the items in the reverse order of the statistics pass (its last ones are still in L2), x read
// evict-first, the output (the same layout) stored streaming.
template <typename T, class Pro, class Epi>
__global__ void __launch_bounds__(kThreads) cl_store_kernel(const T* __restrict__ x, const Problem p, const ClPlan q,
                                                            const float2* __restrict__ stats, T* __restrict__ out) {
  constexpr int V = gn_inline::vec16<T>();
  const int64_t r = threadIdx.x / q.tpr, c0 = (threadIdx.x - r * q.tpr) * V;
  if (r >= q.rps) return;  // no barriers below
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  const bool fused = (p.stats_mode & kFusedAffine) != 0;
  const float* gw = p.args.vec[kMaxVectors - 2];
  const float* gb = p.args.vec[kMaxVectors - 1];
  for (int64_t k = blockIdx.x; k < q.items; k += gridDim.x) {
    const int64_t item = q.items - 1 - k;
    const int64_t n = item / q.chunks, chunk = item - n * q.chunks;
    ChannelAffine aff[V];  // this item's affine of each owned channel, in registers
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float2 st = stats[n * p.G + (c0 + j) / p.cpg];
      aff[j] = ChannelAffine(st.x, st.y, gw[c0 + j], gb[c0 + j], fused);
    }
    const T* xn = x + n * p.S * p.C;
    T* on = out + n * p.S * p.C;
    const int64_t begin = chunk * q.len, end = imin(begin + q.len, p.S);
    for (int64_t s0 = begin + r; s0 < end; s0 += q.rps * kUnroll) {
      Vec16<T> buf[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t s = s0 + u * q.rps;
        if (s < end) buf[u] = load16<T, true>(xn + s * p.C + c0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t s = s0 + u * q.rps;
        if (s < end) {
          Vec16<T> o;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const int64_t c = c0 + j;
            o.v[j] = static_cast<T>(epi(rnd<T>(aff[j](pro(static_cast<float>(buf[u].v[j]), c))), c));
          }
          gn_inline::store_vec_streaming(on + s * p.C + c0, o);
        }
      }
    }
  }
}

// ------------------------------------------------------------------ pooled channels-last path (input_pool = k > 1)
// x (N, H, W, C) in memory (#11's channels_last convolution output); the GroupNorm input is the k x k max-pool of
// the prologue's values; the output (N, C, H/k, W/k) is channels_last too. A cluster of two CTAs per sample at a
// time (the samples from the last: the batch-norm statistics pass before the operator leaves its last rows in
// L2), CTA rank r holding the pooled positions [r S / 2, (r + 1) S / 2):
//   1. its pooled values into shared memory ([S/2][C] floats), a thread per (pooled position, V channels) per
//      step, the window's k * k 16-byte loads (two positions' worth for k = 2) issued before any is used.
//      Where the prologue is monotone on a channel (`direction`: #11's BatchNorm + tanh for a finite nonzero
//      weight) the window's raw max (min where it decreases) goes through the prologue once: the max of the k * k
//      prologue values (but for one float32 unit where tanhf itself steps down, see ProBatchNormTanh), for a
//      quarter of the tanh evaluations at k = 2 (275 -> 247 us at #11's shape on an H100);
//   2. per group the mean, then the sum of squares about it, both over shared memory (two passes: exact where a
//      one-pass shifted sum loses digits): warps over (group, slab of positions) units, float64 partials added in
//      a fixed order into the CTA's total per group, the two CTAs' totals exchanged through distributed shared
//      memory (rank 0's + rank 1's in both, so both CTAs hold the same statistics);
//   3. the output from shared memory and each channel's (mean, rstd, weight, bias), 16-byte streaming stores.
// x is read once and out written once (the slice path's pooled kernels read x twice, with scalar loads). Half a
// pooled sample must fit shared memory: 74 KB for #11's 128 channels x 17 x 17 float32, so two CTAs of two
// clusters share an SM and one loads while the other works in shared memory (a CTA per sample, 148 KB, held an SM
// alone: its loads and its shared-memory phases took turns, 247 us, DRAM at 38% by ncu).
constexpr int kClPoolThreads = 512;
constexpr int kClPoolWarps = kClPoolThreads / 32;
constexpr int kClPoolCluster = 2;          // CTAs per sample
constexpr int64_t kClPoolMaxUnits = 1024;  // (group, slab) partials per pass: at most 8 KB of shared memory

// Position slabs per group: enough units for every warp, at most kClPoolMaxUnits partials, at most S.
inline int64_t cl_pool_slabs(int64_t G, int64_t S) {
  return std::max<int64_t>(1, std::min<int64_t>({kClPoolWarps, kClPoolMaxUnits / G, S}));
}

// Pooled positions of the larger of a cluster's CTAs.
inline int64_t cl_pool_positions(const Problem& p) { return (p.S + kClPoolCluster - 1) / kClPoolCluster; }

// Shared memory of one CTA: its pooled values [S/2][C] float, each channel's (mean, rstd, weight, bias) float4, the
// partials of one pass [G][slabs] double, the CTA's per-group totals of the two passes [2][G] double, the per-group
// (mean, rstd) float2, each channel's direction (one byte).
inline size_t cl_pool_smem_bytes(const Problem& p) {
  const int64_t positions = cl_pool_positions(p);
  return static_cast<size_t>(positions * p.C) * sizeof(float) + static_cast<size_t>(p.C) * sizeof(float4) +
         static_cast<size_t>(p.G * cl_pool_slabs(p.G, positions)) * sizeof(double) +
         static_cast<size_t>(2 * p.G) * sizeof(double) + static_cast<size_t>(p.G) * sizeof(float2) +
         static_cast<size_t>(p.C);
}

// Sum over group g's values of f(g, v) (units of `slabs` position slabs, the warp's lanes over each slab's
// (position, channel) pairs, stepped without divisions); then the CTA's float64 total of each group, its slabs
// added in order, in total[g].
template <class F>
__device__ __forceinline__ void cl_pool_group_pass(const float* pooled, int S, int C, int G, int cpg, int slabs,
                                                   double* part, double* total, F f) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int step_s = 32 / cpg, step_c = 32 - step_s * cpg;
  for (int u = warp; u < G * slabs; u += kClPoolWarps) {
    const int g = u / slabs, slab = u - g * slabs;
    const int s_begin = static_cast<int>(static_cast<int64_t>(S) * slab / slabs);
    const int len = static_cast<int>(static_cast<int64_t>(S) * (slab + 1) / slabs) - s_begin;
    const float* base = pooled + s_begin * C + g * cpg;
    float acc = 0.0f;
    int ds = lane / cpg, dc = lane - (lane / cpg) * cpg;
    while (ds < len) {
      acc += f(g, base[ds * C + dc]);
      ds += step_s;
      dc += step_c;
      if (dc >= cpg) {
        dc -= cpg;
        ++ds;
      }
    }
    const double sum = gn_inline::warp_sum(static_cast<double>(acc));
    if (lane == 0) part[u] = sum;
  }
  __syncthreads();
  for (int g = threadIdx.x; g < G; g += kClPoolThreads) {
    double a = 0.0;
    for (int j = 0; j < slabs; ++j) a += part[g * slabs + j];
    total[g] = a;
  }
}

// Two CTAs per SM (at most 64 registers a thread). With a bound of 512 threads alone the compiler may take up to 128
// registers, and then one CTA fits an SM: the kernel took 292 us at #11's shape that way, 223 us with this bound.
template <typename T, class Pro, class Epi, int K>
__global__ void __launch_bounds__(kClPoolThreads, 2) cl_pooled_kernel(const T* __restrict__ x, const Problem p,
                                                                   int slabs, T* __restrict__ out) {
  using cluster = gn_inline::ClusterView;  // compiles below sm_90 too; launched only on sm_90+
  constexpr int V = gn_inline::vec16<T>();
  constexpr int kPer = K == 2 ? 2 : 1;  // pooled vectors per thread per step (their loads in flight together)
  extern __shared__ float4 cl_pool_smem[];
  const int rank = cluster::rank();
  const int S = static_cast<int>(p.S), C = static_cast<int>(p.C), G = static_cast<int>(p.G);
  const int cpg = static_cast<int>(p.cpg), W = static_cast<int>(p.W), OW = static_cast<int>(p.W / p.in_pool);
  const int k = K > 0 ? K : static_cast<int>(p.in_pool);
  const int positions = (S + kClPoolCluster - 1) / kClPoolCluster;                 // of the larger CTA
  const int s_lo = static_cast<int>(static_cast<int64_t>(S) * rank / kClPoolCluster);  // this CTA's positions
  const int own = static_cast<int>(static_cast<int64_t>(S) * (rank + 1) / kClPoolCluster) - s_lo;
  const int tpr = C / V, vectors = own * tpr;
  float* pooled = reinterpret_cast<float*>(cl_pool_smem);           // [own][C]; positions * C * 4: multiple of 16
  float4* chan = reinterpret_cast<float4*>(pooled + positions * C);  // [C] (mean, rstd, weight, bias)
  double* part = reinterpret_cast<double*>(chan + C);               // [G][slabs]
  double* totals = part + G * slabs;                                // [2][G] this CTA's sums of the two passes
  float2* gstat = reinterpret_cast<float2*>(totals + 2 * G);        // [G] (mean, rstd)
  signed char* dirs = reinterpret_cast<signed char*>(gstat + G);    // [C] the prologue's direction
  const double* totals0 = cluster::peer(totals, 0);
  const double* totals1 = cluster::peer(totals, 1);
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  const bool fused = (p.stats_mode & kFusedAffine) != 0;
  const float* gw = p.args.vec[kMaxVectors - 2];
  const float* gb = p.args.vec[kMaxVectors - 1];
  const double count = static_cast<double>(cpg) * S;
  for (int c = threadIdx.x; c < C; c += kClPoolThreads) {
    if constexpr (HasDirection<Pro>::value) dirs[c] = static_cast<signed char>(pro.direction(c));
    else dirs[c] = 0;
  }
  __syncthreads();
  const int64_t clusters = gridDim.x / kClPoolCluster;
  for (int64_t it = blockIdx.x / kClPoolCluster; it < p.N; it += clusters) {
    const int64_t n = p.N - 1 - it;
    const T* xn = x + n * p.S_in * p.C;
    // 1. pooled values of this CTA's positions
    for (int i0 = threadIdx.x; i0 < vectors; i0 += kPer * kClPoolThreads) {
      Vec16<T> buf[kPer][K > 0 ? K * K : 1];
      int where[kPer];
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int i = i0 + u * kClPoolThreads;
        const int s = s_lo + i / tpr, c0 = (i % tpr) * V, oh = s / OW;
        where[u] = i < vectors ? ((oh * k) * W + (s - oh * OW) * k) * C + c0 : -1;
        if constexpr (K > 0) {
          if (where[u] >= 0) {
#pragma unroll
            for (int a = 0; a < K; ++a)
#pragma unroll
              for (int b = 0; b < K; ++b) buf[u][a * K + b] = load16<T, true>(xn + where[u] + (a * W + b) * C);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        if (where[u] < 0) continue;
        const int i = i0 + u * kClPoolThreads;
        const int sl = i / tpr, c0 = (i - sl * tpr) * V;
        float m[V];
        if constexpr (K > 0) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const int c = c0 + j;
            float hi = static_cast<float>(buf[u][0].v[j]), lo = hi;
#pragma unroll
            for (int w = 1; w < K * K; ++w) {
              const float v = static_cast<float>(buf[u][w].v[j]);
              hi = maximum_nan(hi, v);
              lo = minimum_nan(lo, v);
            }
            const int dir = dirs[c];
            if (dir != 0) {
              m[j] = pro(dir > 0 ? hi : lo, c);
            } else {
              m[j] = -INFINITY;
#pragma unroll
              for (int w = 0; w < K * K; ++w) m[j] = maximum_nan(m[j], pro(static_cast<float>(buf[u][w].v[j]), c));
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) m[j] = -INFINITY;
          for (int a = 0; a < k; ++a)
            for (int b = 0; b < k; ++b) {
              const Vec16<T> v = load16<T, true>(xn + where[u] + (a * W + b) * C);
#pragma unroll
              for (int j = 0; j < V; ++j) m[j] = maximum_nan(m[j], pro(static_cast<float>(v.v[j]), c0 + j));
            }
        }
#pragma unroll
        for (int j = 0; j < V; j += 4)  // 16-byte stores: scalar ones 4-way bank conflicted (lanes 16 bytes apart)
          *reinterpret_cast<float4*>(pooled + sl * C + c0 + j) = make_float4(m[j], m[j + 1], m[j + 2], m[j + 3]);
      }
    }
    __syncthreads();
    // 2. statistics: the mean, then the sum of squares about it, each summed over both CTAs' positions. The
    // cluster barrier after each pass publishes this CTA's totals; the peer's are read before the next barrier,
    // and each pass has its own totals row, so no CTA overwrites a row its peer may still be reading.
    cl_pool_group_pass(pooled, own, C, G, cpg, slabs, part, totals, [](int, float v) { return v; });
    cluster::sync();
    for (int g = threadIdx.x; g < G; g += kClPoolThreads)
      gstat[g].x = static_cast<float>((totals0[g] + totals1[g]) / count);
    __syncthreads();
    cl_pool_group_pass(pooled, own, C, G, cpg, slabs, part, totals + G, [gstat](int g, float v) {
      const float d = v - gstat[g].x;
      return d * d;
    });
    cluster::sync();
    for (int g = threadIdx.x; g < G; g += kClPoolThreads) {
      // rsqrtf of the float32 variance plus eps, as group_stats_kernel (PyTorch's CUDA GroupNorm).
      float mean = gstat[g].x;
      float rstd = rsqrtf(static_cast<float>((totals0[G + g] + totals1[G + g]) / count) + p.eps);
      round_stats<T>(p.stats_mode, mean, rstd);
      gstat[g] = make_float2(mean, rstd);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += kClPoolThreads) {
      const float2 st = gstat[c / cpg];
      chan[c] = make_float4(st.x, st.y, gw[c], gb[c]);
    }
    __syncthreads();
    // 3. the output of this CTA's positions (the same layout as x)
    T* on = out + (n * p.S + s_lo) * p.C;
    for (int i = threadIdx.x; i < vectors; i += kClPoolThreads) {
      const int sl = i / tpr, c0 = (i - sl * tpr) * V;
      alignas(16) float v[V];
      const float4* row = reinterpret_cast<const float4*>(pooled + sl * C + c0);
#pragma unroll
      for (int j = 0; j < V / 4; ++j) reinterpret_cast<float4*>(v)[j] = row[j];
      Vec16<T> o;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int c = c0 + j;
        const float4 q = chan[c];
        const ChannelAffine aff(q.x, q.y, q.z, q.w, fused);
        o.v[j] = static_cast<T>(epi(rnd<T>(aff(v[j])), c));
      }
      gn_inline::store_vec_streaming(on + static_cast<int64_t>(sl) * C + c0, o);
    }
    __syncthreads();  // the next sample rewrites pooled, gstat and chan
  }
  cluster::sync();  // the peer may still read this CTA's totals
}

// ------------------------------------------------------------------ per-channel moments (BatchNorm statistics)
// mean and biased variance per channel of a channels_last x (N, S, C) over its N * S positions: cl_stats_kernel with
// one channel per group (partials per (n, c, chunk), shifted by x[n, 0, c]), then a CTA per channel re-centres each
// sample's sums on x[0, 0, c] and adds them in float64 (threads over (sample, chunk) partials, a fixed order; a warp
// per channel, 16 samples a lane at #11's shape, took 19 us, bound by its serial loads). out (2, C): mean, var.
template <typename T>
__global__ void __launch_bounds__(kThreads) channel_moments_kernel(const T* __restrict__ x, int64_t N, int64_t S,
                                                                   int64_t C, int64_t chunks,
                                                                   const double2* __restrict__ partial,
                                                                   float* __restrict__ out) {
  __shared__ double scratch[64];
  const int64_t c = blockIdx.x;
  const double pivot = static_cast<double>(static_cast<float>(x[c]));
  double A = 0.0, B = 0.0;  // sums of (v - pivot) and (v - pivot)^2
  for (int64_t n = threadIdx.x; n < N; n += kThreads) {
    const double d = static_cast<double>(static_cast<float>(x[n * S * C + c])) - pivot;  // shift of (n, c) - pivot
    double a = 0.0, b = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      const double2 q = partial[(n * C + c) * chunks + k];
      a += q.x;
      b += q.y;
    }
    const double rows = static_cast<double>(S);
    A += a + rows * d;
    B += b + d * (2.0 * a + rows * d);
  }
  gn_inline::block_sum2(A, B, scratch);
  if (threadIdx.x == 0) {
    const double count = static_cast<double>(N) * static_cast<double>(S), m = A / count;
    out[c] = static_cast<float>(pivot + m);
    out[C + c] = static_cast<float>(fmax(B / count - m * m, 0.0));
  }
}

// x (N, C, S) contiguous -> out (N, S, C) through shared memory, tiles of 32 channels x 128 positions: each warp
// reads rows of 128 positions (four 128-byte requests of float32) and writes, per position, the tile's 32 channels
// (one 128-byte request); 16 loads in flight per thread (a 32 x 32 tile with 4 per thread ran at 0.6x the copy
// rate on #19's 2 GB input). One padding column keeps both phases free of bank conflicts. blockIdx.x = n * s_tiles
// + tile of S, blockIdx.y = tile of C.
constexpr int kTileC = 32, kTileS = 128;

template <typename T>
__global__ void __launch_bounds__(256) to_channels_last_kernel(const T* __restrict__ x, int64_t C, int64_t S,
                                                               int64_t s_tiles, T* __restrict__ out) {
  __shared__ T tile[kTileC][kTileS + 1];
  const int64_t n = blockIdx.x / s_tiles, s_base = (blockIdx.x - n * s_tiles) * kTileS;
  const int64_t c_base = static_cast<int64_t>(blockIdx.y) * kTileC;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int row = warp; row < kTileC; row += 8) {
    const int64_t c = c_base + row;
#pragma unroll
    for (int k = 0; k < kTileS; k += 32) {
      const int64_t s = s_base + k + lane;
      if (c < C && s < S) tile[row][k + lane] = x[(n * C + c) * S + s];
    }
  }
  __syncthreads();
  const int64_t c = c_base + lane;
#pragma unroll 4
  for (int j = warp; j < kTileS; j += 8) {
    const int64_t s = s_base + j;
    if (c < C && s < S) out[(n * S + s) * C + c] = tile[lane][j];
  }
}

// SMs of a device, asked once per device.
inline int family_sm_count(int device) { return gn_inline::device_attribute<cudaDevAttrMultiProcessorCount>(device); }

// A grid that fills the device once: SMs x resident CTAs of `kernel`, at most `items`.
inline unsigned filling_grid(const void* kernel, int64_t items) {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t full = static_cast<int64_t>(family_sm_count(device)) *
                       std::max(1, gn_inline::resident_ctas_per_sm(kernel, device, kThreads, 0));
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(items, full)));
}

// filling_grid cut to the fewest CTAs that keep its number of rounds over the items, so that every CTA takes the
// same number of items (within one): 1536 items over 1056 resident CTAs ran as 1056 CTAs of which half took two,
// the device half-idle in the second round; 768 CTAs of two each keep enough loads in flight to stream at full rate.
inline unsigned balanced_grid(const void* kernel, int64_t items) {
  const int64_t full = filling_grid(kernel, items);
  const int64_t rounds = (items + full - 1) / full;
  return static_cast<unsigned>(std::max<int64_t>(1, (items + rounds - 1) / rounds));
}

// out[i] = (sum of sums[i * per_output .. (i + 1) * per_output)) / count, one thread per output.
template <typename T>
__global__ void __launch_bounds__(kThreads) mean_kernel(const double* __restrict__ sums, int64_t outputs,
                                                        int64_t per_output, double count, T* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= outputs) return;
  double a = 0.0;
  for (int64_t j = 0; j < per_output; ++j) a += sums[i * per_output + j];
  out[i] = static_cast<T>(a / count);
}

__device__ __forceinline__ float warp_min_nan(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = minimum_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// One CTA per row of x (N, C); PER values per lane in registers (0: three sweeps over global memory).
template <typename T, class Pro, class Epi, int PER, bool MIN>
__global__ void __launch_bounds__(kThreads) rows_kernel(const T* __restrict__ x, const Problem p, T* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const Pro pro(p.args, 0, 0);
  const Epi epi(p.args, Pro::kVectors, Pro::kScalars);
  const float* gw = p.args.vec[kMaxVectors - 2];
  const float* gb = p.args.vec[kMaxVectors - 1];
  const float cnt = static_cast<float>(p.cpg);
  const bool fused = (p.stats_mode & kFusedAffine) != 0;
  [[maybe_unused]] float run_min = INFINITY;
  for (int64_t g = warp; g < p.G; g += kWarps) {
    const int64_t c0 = g * p.cpg;
    const T* xs = x + row * p.C + c0;
    [[maybe_unused]] T* os = out + row * p.C + c0;
    if constexpr (PER > 0) {
      float v[PER];
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int64_t i = lane + 32 * j;
        v[j] = i < p.cpg ? pro(static_cast<float>(xs[i]), c0 + i) : 0.0f;
        sum += v[j];
      }
      const float mean = gn_inline::warp_sum(sum) / cnt;
      float sq = 0.0f;
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int64_t i = lane + 32 * j;
        const float dv = i < p.cpg ? v[j] - mean : 0.0f;
        sq = fmaf(dv, dv, sq);
      }
      float mean_r = mean, rstd = rsqrtf(gn_inline::warp_sum(sq) / cnt + p.eps);
      round_stats<T>(p.stats_mode, mean_r, rstd);
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int64_t i = lane + 32 * j;
        if (i < p.cpg) {
          const ChannelAffine aff(mean_r, rstd, gw[c0 + i], gb[c0 + i], fused);
          const float e = epi(rnd<T>(aff(v[j])), c0 + i);
          if constexpr (MIN) run_min = minimum_nan(run_min, e);
          else os[i] = static_cast<T>(e);
        }
      }
    } else {
      float sum = 0.0f;
      for (int64_t i = lane; i < p.cpg; i += 32) sum += pro(static_cast<float>(xs[i]), c0 + i);
      const float mean = gn_inline::warp_sum(sum) / cnt;
      float sq = 0.0f;
      for (int64_t i = lane; i < p.cpg; i += 32) {
        const float dv = pro(static_cast<float>(xs[i]), c0 + i) - mean;
        sq = fmaf(dv, dv, sq);
      }
      float mean_r = mean, rstd = rsqrtf(gn_inline::warp_sum(sq) / cnt + p.eps);
      round_stats<T>(p.stats_mode, mean_r, rstd);
      for (int64_t i = lane; i < p.cpg; i += 32) {
        const float v = pro(static_cast<float>(xs[i]), c0 + i);
        const ChannelAffine aff(mean_r, rstd, gw[c0 + i], gb[c0 + i], fused);
        const float e = epi(rnd<T>(aff(v)), c0 + i);
        if constexpr (MIN) run_min = minimum_nan(run_min, e);
        else os[i] = static_cast<T>(e);
      }
    }
  }
  if constexpr (MIN) {
    __shared__ float mins[kWarps];
    run_min = warp_min_nan(run_min);
    if (lane == 0) mins[warp] = run_min;
    __syncthreads();
    if (threadIdx.x == 0) {
      float m = mins[0];
      for (int k = 1; k < kWarps; ++k) m = minimum_nan(m, mins[k]);
      out[row] = static_cast<T>(m);
    }
  }
}

inline unsigned grid_of(int64_t blocks, const char* what) {
  TORCH_CHECK(blocks <= INT_MAX, gn_inline_msg::cat("fused_group_norm: ", what, " too large for one launch"));
  return static_cast<unsigned>(blocks);
}

template <typename T, class Pro, class Epi, bool MIN>
void launch_rows(const T* x, const Problem& p, T* out, cudaStream_t stream) {
  const unsigned grid = grid_of(p.N, "batch");
  if (p.cpg <= 64) rows_kernel<T, Pro, Epi, 2, MIN><<<grid, kThreads, 0, stream>>>(x, p, out);
  else if (p.cpg <= 512) rows_kernel<T, Pro, Epi, 16, MIN><<<grid, kThreads, 0, stream>>>(x, p, out);
  else rows_kernel<T, Pro, Epi, 0, MIN><<<grid, kThreads, 0, stream>>>(x, p, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Per-group (mean, rstd) from statistics partials laid out per group (per_group of them from group * per_group).
template <typename T, class Pro>
void launch_group_stats(const T* x, const Problem& p, int64_t per_group, const double2* partial, float2* stats,
                        cudaStream_t stream) {
  group_stats_kernel<T, Pro><<<grid_of((p.N * p.G * 32 + kThreads - 1) / kThreads, "input"), kThreads, 0, stream>>>(
      x, p, per_group, partial, stats);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The store output of the slice path from per-group (mean, rstd): part_store_kernel over row parts.
template <typename T, class Pro, class Epi>
void launch_part_store(const T* x, const Problem& p, const float2* stats, T* out, cudaStream_t stream) {
  const RowParts rp = plan_parts(p.N * p.C, p.S, gn_inline::vec16<T>());
  const bool vec_ok = reinterpret_cast<uintptr_t>(x) % 16 == reinterpret_cast<uintptr_t>(out) % 16;
  part_store_kernel<T, Pro, Epi><<<filling_grid(reinterpret_cast<const void*>(&part_store_kernel<T, Pro, Epi>),
                                                rp.items), kThreads, 0, stream>>>(x, p, rp, vec_ok, stats, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// input_pool > 1 (#11: GroupNorm of a max-pooled prologue): statistics and output over group parts.
template <typename T, class Pro, class Epi>
void launch_pooled(const T* x, const Problem& p, T* out, const at::Tensor& x_t, cudaStream_t stream) {
  const GroupParts gp = plan_group_parts(p.N * p.G, p.cpg * p.S);
  at::Tensor partial = at::empty({gp.items, 2}, x_t.options().dtype(at::kDouble));
  at::Tensor stats = at::empty({p.N * p.G, 2}, x_t.options().dtype(at::kFloat));
  auto* partial_p = reinterpret_cast<double2*>(partial.data_ptr<double>());
  auto* stats_p = reinterpret_cast<float2*>(stats.data_ptr<float>());
  // 32-bit indices inside a group where its input fits them; the item and group offsets stay 64-bit.
  const bool narrow = p.cpg * p.S_in < (int64_t{1} << 31) - kThreads;
  if (narrow)
    pooled_stats_kernel<T, Pro, int><<<filling_grid(reinterpret_cast<const void*>(&pooled_stats_kernel<T, Pro, int>),
                                                    gp.items), kThreads, 0, stream>>>(x, p, gp, partial_p);
  else
    pooled_stats_kernel<T, Pro, int64_t><<<filling_grid(
        reinterpret_cast<const void*>(&pooled_stats_kernel<T, Pro, int64_t>), gp.items), kThreads, 0, stream>>>(
        x, p, gp, partial_p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_group_stats<T, Pro>(x, p, gp.parts, partial_p, stats_p, stream);
  if (narrow)
    pooled_store_kernel<T, Pro, Epi, int><<<filling_grid(
        reinterpret_cast<const void*>(&pooled_store_kernel<T, Pro, Epi, int>), gp.items), kThreads, 0, stream>>>(
        x, p, gp, stats_p, out);
  else
    pooled_store_kernel<T, Pro, Epi, int64_t><<<filling_grid(
        reinterpret_cast<const void*>(&pooled_store_kernel<T, Pro, Epi, int64_t>), gp.items), kThreads, 0, stream>>>(
        x, p, gp, stats_p, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The slice path: statistics over row parts (16-byte loads), per-group (mean, rstd), then the output.
//   bytes moved, float32: store 2 reads + 1 write of x; max_pool 2 reads + the pooled output; mean outputs with the
//   identity epilogue 1 read (linear_mean_kernel), other mean outputs 2 reads.
template <typename T, class Pro, class Epi>
void launch_slices(const at::Tensor& x_t, const Problem& p, at::Tensor& out_t, cudaStream_t stream) {
  const T* x = x_t.data_ptr<T>();
  T* out = out_t.data_ptr<T>();
  if (p.in_pool > 1) return launch_pooled<T, Pro, Epi>(x, p, out, x_t, stream);
  const int64_t rows = p.N * p.C;
  const RowParts rp = plan_parts(rows, p.S, gn_inline::vec16<T>());
  at::Tensor partial = at::empty({rp.items, 2}, x_t.options().dtype(at::kDouble));
  at::Tensor stats = at::empty({p.N * p.G, 2}, x_t.options().dtype(at::kFloat));
  auto* partial_p = reinterpret_cast<double2*>(partial.data_ptr<double>());
  auto* stats_p = reinterpret_cast<float2*>(stats.data_ptr<float>());
  part_stats_kernel<T, Pro><<<filling_grid(reinterpret_cast<const void*>(&part_stats_kernel<T, Pro>), rp.items),
                              kThreads, 0, stream>>>(x, p, rp, partial_p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_group_stats<T, Pro>(x, p, p.cpg * rp.parts, partial_p, stats_p, stream);
  switch (p.output) {
    case kMaxPool: {
      const int64_t out_chunks = (p.OH * p.OW + kChunk - 1) / kChunk;
      max_pool_kernel<T, Pro, Epi><<<grid_of(rows * out_chunks, "input"), kThreads, 0, stream>>>(
          x, p, out_chunks, stats_p, out);
      break;
    }
    case kMeanAll:
    case kMeanSpatial: {
      if constexpr (std::is_same_v<Epi, EpiIdentity<T>>) {
        linear_mean_kernel<T, Pro><<<grid_of(p.N, "batch"), kThreads, 0, stream>>>(x, p, rp, partial_p, stats_p, out);
      } else {
        at::Tensor sums = at::empty({rp.items}, x_t.options().dtype(at::kDouble));
        double* sums_p = sums.data_ptr<double>();
        part_sum_kernel<T, Pro, Epi><<<filling_grid(reinterpret_cast<const void*>(&part_sum_kernel<T, Pro, Epi>),
                                                    rp.items), kThreads, 0, stream>>>(x, p, rp, stats_p, sums_p);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        const bool all = p.output == kMeanAll;
        const int64_t outputs = all ? p.N : rows;
        mean_kernel<T><<<grid_of((outputs + kThreads - 1) / kThreads, "input"), kThreads, 0, stream>>>(
            sums_p, outputs, all ? p.C * rp.parts : rp.parts, static_cast<double>(all ? p.C * p.S : p.S), out);
      }
      break;
    }
    default:
      return launch_part_store<T, Pro, Epi>(x, p, stats_p, out, stream);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The channels-last path: statistics per (n, chunk) item, per-group (mean, rstd), the store; bytes moved as the
// slice path's store (x read twice, the second time mostly from L2 for the last items, out written once).
template <typename T, class Pro, class Epi>
void launch_channels_last(const at::Tensor& x_t, const Problem& p, at::Tensor& out_t, cudaStream_t stream) {
  const T* x = x_t.data_ptr<T>();
  T* out = out_t.data_ptr<T>();
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const ClPlan q = plan_channels_last(p.N, p.S, p.C, gn_inline::vec16<T>(), family_sm_count(device));
  at::Tensor partial = at::empty({p.N * p.G * q.chunks, 2}, x_t.options().dtype(at::kDouble));
  at::Tensor stats = at::empty({p.N * p.G, 2}, x_t.options().dtype(at::kFloat));
  auto* partial_p = reinterpret_cast<double2*>(partial.data_ptr<double>());
  auto* stats_p = reinterpret_cast<float2*>(stats.data_ptr<float>());
  cl_stats_kernel<T, Pro><<<filling_grid(reinterpret_cast<const void*>(&cl_stats_kernel<T, Pro>), q.items), kThreads,
                            0, stream>>>(x, p, q, partial_p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_group_stats<T, Pro>(x, p, q.chunks, partial_p, stats_p, stream);
  cl_store_kernel<T, Pro, Epi><<<filling_grid(reinterpret_cast<const void*>(&cl_store_kernel<T, Pro, Epi>), q.items),
                                 kThreads, 0, stream>>>(x, p, q, stats_p, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The pooled channels-last path: one launch of clusters of two CTAs, as many as fit the device at once.
template <typename T, class Pro, class Epi>
void launch_pooled_channels_last(const at::Tensor& x_t, const Problem& p, at::Tensor& out_t, cudaStream_t stream) {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const size_t smem = cl_pool_smem_bytes(p);
  const int slabs = static_cast<int>(cl_pool_slabs(p.G, cl_pool_positions(p)));
  auto* kernel = p.in_pool == 2 ? &cl_pooled_kernel<T, Pro, Epi, 2> : &cl_pooled_kernel<T, Pro, Epi, 0>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int per_sm = std::max(1, gn_inline::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), device,
                                                                  kClPoolThreads, smem));
  const int64_t clusters = std::max<int64_t>(
      1, std::min<int64_t>(p.N, static_cast<int64_t>(family_sm_count(device)) * per_sm / kClPoolCluster));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(clusters * kClPoolCluster));
  config.blockDim = dim3(kClPoolThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kClPoolCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, x_t.data_ptr<T>(), p, slabs, out_t.data_ptr<T>()));
}

// Shared memory one CTA of `device` may take (the opt-in maximum), asked once per device.
inline int64_t family_smem_optin(int device) {
  return gn_inline::device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device);
}

// Whether the pooled channels-last kernel takes x as it is: a 4-D channels_last (not also contiguous) input, a chain
// built for it, the store output of a pooled input, whole 16-byte vectors of channels at 16-byte aligned rows, a
// sample of fewer than 2^31 elements (32-bit offsets inside it), its pooled values within shared memory, and a
// device with thread-block clusters.
inline bool takes_pooled_channels_last(const at::Tensor& x, const Problem& p, int64_t pro, int64_t epi) {
  if (x.dim() != 4 || x.is_contiguous() || !is_channels_last_dense(x)) return false;
  if ((chain_paths(pro, epi) & kPooledChannelsLastPath) == 0 || p.output != kStore || p.in_pool <= 1) return false;
  const int64_t vec = static_cast<int64_t>(16 / x.element_size());
  if (p.C % vec != 0 || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0 || p.S_in * p.C >= (int64_t{1} << 31))
    return false;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  // Clusters of two CTAs: sm_90+ only (elsewhere the input is read through a contiguous copy).
  if (gn_inline::device_attribute<cudaDevAttrComputeCapabilityMajor>(device) < 9) return false;
  return static_cast<int64_t>(cl_pool_smem_bytes(p)) <= family_smem_optin(device);
}

// Whether the channels-last kernels take x as it is: a channels_last (not also contiguous) input, a chain built for
// them, the store output of an unpooled input, whole 16-byte vectors of channels at 16-byte aligned rows, and the
// column sums of an item within shared memory. Otherwise the operator reads a contiguous copy.
inline bool takes_channels_last(const at::Tensor& x, const Problem& p, int64_t pro, int64_t epi) {
  if (x.is_contiguous() || !is_channels_last_dense(x)) return false;
  if ((chain_paths(pro, epi) & kChannelsLastPath) == 0 || p.output != kStore || p.in_pool != 1) return false;
  const int64_t vec = static_cast<int64_t>(16 / x.element_size());
  return p.C % vec == 0 && p.C <= kClMaxChannels && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

template <typename T, int P, int E, int PATHS>
void run_cuda(const at::Tensor& x, const Problem& p, at::Tensor& out, cudaStream_t stream) {
  using Pro = WithInputBias<typename ProOf<P, T>::type, T>;
  using Epi = typename EpiOf<E, T>::type;
  if constexpr ((PATHS & kPooledChannelsLastPath) != 0) {
    if (p.channels_last && p.in_pool > 1) return launch_pooled_channels_last<T, Pro, Epi>(x, p, out, stream);
  }
  if constexpr ((PATHS & kChannelsLastPath) != 0) {
    if (p.channels_last) return launch_channels_last<T, Pro, Epi>(x, p, out, stream);
  }
  if constexpr ((PATHS & kRowsPath) != 0) {
    if (x.dim() == 2 && (p.output == kStore || p.output == kMinChannels)) {
      if (p.output == kMinChannels) launch_rows<T, Pro, Epi, true>(x.data_ptr<T>(), p, out.data_ptr<T>(), stream);
      else launch_rows<T, Pro, Epi, false>(x.data_ptr<T>(), p, out.data_ptr<T>(), stream);
      return;
    }
  }
  if constexpr ((PATHS & kSlicePath) != 0) {
    launch_slices<T, Pro, Epi>(x, p, out, stream);
  }
}

template <typename T>
void dispatch_cuda(const at::Tensor& x, int64_t pro, int64_t epi, const Problem& p, at::Tensor& out,
                   cudaStream_t stream) {
#define GN_FAMILY_CUDA_CASE(P, E, PATHS) \
  if (pro == P && epi == E) return run_cuda<T, P, E, PATHS>(x, p, out, stream);
  GN_FAMILY_CHAINS(GN_FAMILY_CUDA_CASE)
#undef GN_FAMILY_CUDA_CASE
}

at::Tensor fused_group_norm_cuda(const at::Tensor& x_in, int64_t num_groups, const at::Tensor& weight,
                                 const at::Tensor& bias, double eps, int64_t prologue, int64_t epilogue,
                                 at::TensorList vectors, at::ArrayRef<double> scalars, int64_t input_pool,
                                 int64_t output, int64_t output_pool, int64_t stats_mode,
                                 const std::optional<at::Tensor>& input_bias) {
  TORCH_CHECK(x_in.is_cuda(), "fused_group_norm_cuda: expected a CUDA tensor");
  const c10::cuda::CUDAGuard guard(x_in.device());
  std::vector<at::Tensor> keep;
  Problem p = prepare(x_in, num_groups, weight, bias, eps, prologue, epilogue, vectors, scalars, input_pool,
                      output, output_pool, stats_mode, input_bias, keep);
  p.channels_last = takes_channels_last(x_in, p, prologue, epilogue) ||
                    takes_pooled_channels_last(x_in, p, prologue, epilogue);
  // A channels_last input the channels-last kernels do not take is read through a contiguous copy.
  const at::Tensor x = p.channels_last ? x_in : x_in.contiguous();
  at::Tensor out = at::empty(output_shape(x, p),
                             p.channels_last ? x.options().memory_format(x.suggest_memory_format()) : x.options());
  if (p.N == 0 || p.C == 0) return out;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  switch (x.scalar_type()) {
    case at::kHalf: dispatch_cuda<c10::Half>(x, prologue, epilogue, p, out, stream); break;
    case at::kBFloat16: dispatch_cuda<c10::BFloat16>(x, prologue, epilogue, p, out, stream); break;
    default: dispatch_cuda<float>(x, prologue, epilogue, p, out, stream); break;
  }
  // A store output keeps the input's layout on every path (a contiguous copy's result is converted back).
  if (p.output == kStore && !p.channels_last && !x_in.is_contiguous()) return out.contiguous(x_in.suggest_memory_format());
  return out;
}

// channel_moments: (2, C) float32, the mean and biased variance of each channel of x (N, C, *) over its other
// dimensions (a BatchNorm's batch statistics). A channels_last x of whole 16-byte channel vectors (at most
// kClMaxChannels) runs cl_stats_kernel + channel_moments_kernel, one read; any other x PyTorch's var_mean in float32.
at::Tensor channel_moments_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "channel_moments_cuda: expected a CUDA tensor");
  const at::ScalarType t = x.scalar_type();
  if (!((t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && x.numel() > 0 && !x.is_contiguous() &&
        is_channels_last_dense(x) && x.size(1) % (16 / x.element_size()) == 0 && x.size(1) <= kClMaxChannels &&
        reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0))
    return channel_moments_var_mean(x);
  const int64_t N = x.size(0), C = x.size(1);
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  at::Tensor out = at::empty({2, C}, x.options().dtype(at::kFloat));
  Problem p;  // one group per channel, no prologue
  p.N = N;
  p.C = C;
  p.G = C;
  p.cpg = 1;
  p.S_in = p.S = x.numel() / (N * C);
  p.channels_last = true;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const ClPlan q = plan_channels_last(p.N, p.S, p.C, gn_inline::vec16<T>(), family_sm_count(x.get_device()));
    at::Tensor partial = at::empty({p.N * p.C * q.chunks, 2}, x.options().dtype(at::kDouble));
    auto* partial_p = reinterpret_cast<double2*>(partial.data_ptr<double>());
    cl_stats_kernel<T, ProIdentity<T>><<<balanced_grid(
        reinterpret_cast<const void*>(&cl_stats_kernel<T, ProIdentity<T>>), q.items), kThreads, 0, stream>>>(
        xp, p, q, partial_p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    channel_moments_kernel<T><<<grid_of(C, "input"), kThreads, 0, stream>>>(
        xp, p.N, p.S, p.C, q.chunks, partial_p, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (t == at::kHalf) run(c10::Half{});
  else if (t == at::kBFloat16) run(c10::BFloat16{});
  else run(float{});
  return out;
}

// to_channels_last: the tiled transpose for inputs of at least 32 channels (PyTorch's copy for fewer, where a
// 32-channel tile would be mostly idle), any 2-, 4- or 8-byte dtype (it moves bytes).
template <typename T>
void launch_to_channels_last(const at::Tensor& x, at::Tensor& out, int64_t N, int64_t C, int64_t S,
                             cudaStream_t stream) {
  const int64_t s_tiles = (S + kTileS - 1) / kTileS;
  const dim3 grid(grid_of(N * s_tiles, "input"), static_cast<unsigned>((C + kTileC - 1) / kTileC));
  to_channels_last_kernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(x.data_ptr()), C, S, s_tiles,
                                                       static_cast<T*>(out.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor to_channels_last_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "to_channels_last_cuda: expected a CUDA tensor");
  const at::MemoryFormat fmt = channels_last_format_of(x);
  const int64_t size = x.element_size();
  const int64_t N = x.size(0), C = x.size(1);
  if (!x.is_contiguous() || C < 32 || C > int64_t{65535} * kTileC || x.numel() == 0 ||
      (size != 2 && size != 4 && size != 8) || x.is_complex())
    return x.contiguous(fmt);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(fmt));
  const int64_t S = x.numel() / (N * C);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  if (size == 2) launch_to_channels_last<uint16_t>(x, out, N, C, S, stream);
  else if (size == 4) launch_to_channels_last<uint32_t>(x, out, N, C, S, stream);
  else launch_to_channels_last<uint64_t>(x, out, N, C, S, stream);
  return out;
}

}  // namespace gn_family
@CONV3D_DIRECT_CUDA@
TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("conv3d_direct", &gn_conv::conv3d_direct_cuda);
  m.impl("to_channels_last", &gn_family::to_channels_last_cuda);
  m.impl("channel_moments", &gn_family::channel_moments_cuda);
  m.impl("fused_group_norm", &gn_family::fused_group_norm_cuda);
}
""".replace("@CONV3D_DIRECT_CUDA@", CONV3D_DIRECT_CUDA)
