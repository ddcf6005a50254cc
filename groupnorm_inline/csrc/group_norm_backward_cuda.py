"""CUDA source of `group_norm_backward` (schema and math: `group_norm_backward_cpu`).

The input and grad_out are made contiguous (N, C, HW); row r = n * C + c is the HW elements of one
channel of one sample, and the (n, g) slice is the D = (C / G) * HW contiguous elements of rows
g * C/G .. (g + 1) * C/G - 1 of sample n (slice = row / (C / G)). x and dy are read twice in all, dx
written once; scratch is O(N * G + grid), never a full-size temporary:

  1 sums           ds = sum dy (x - m), db = sum dy, dm = sum (x - m), m the saved mean of the slice
  2 coefficients   per slice, one warp: delta = sum dm / D (the saved mean's rounding), S, B, and
                   coef_x, coef_1 of the formulas in `group_norm_backward_cpu`
  3 parameter grads  dw = sum_n (ds - delta db) rstd, db_param = sum_n db  (when asked for; on the row and
                   channels-last paths the first CTAs of step 4's launch, not a launch of their own)
  4 grad input     dx = rstd * w[c] * dy + coef_x * (x - m) + coef_1

Two paths, by row length:
  row path    (HW >= 1024) steps 1 and 4 on a grid of rows * splits CTAs in memory order, each on a
              contiguous chunk of one row with 16-byte vector accesses (rows of any length: a chunk that does
              not start at a 16-byte boundary takes its head and tail element-wise) and per-CTA constants; step 1
              writes per-(row, chunk) sums, (rows, splits, 3), small next to the rows, which steps 2
              and 3 fold (deterministic, no atomics).
  short path  (HW < 1024) per-row sums would be as large as the tensor (HW = 1: three values per
              element), so step 1 sums whole slices instead, each element weighted by its channel's w:
              groups of 1-256 lanes per (slice, chunk), several short slices per CTA, long slices split
              over CTAs. Step 4 runs segments of 1-32 lanes per row, C * k segments in all, so each
              segment only ever meets rows of one channel (rows are n * C + c): it adds that channel's
              dw / db terms in registers as it goes and writes them once; step 3 folds the k per
              channel.

Indices: the row path works in int64 (its cost is the loads, and a row may pass 2^31 elements); the
short path in int32 whenever the tensor has fewer than 2^30 elements (cheaper per-row divisions).

Numerics: products in the compute type (float, or double for double), sums in double (the row path
adds one unrolled batch in the compute type first); ds is taken about the saved mean, so it does not
cancel when |mean| >> std, and delta removes the saved mean's float32 rounding.
"""

from .channels_last_common_cuda import CL_TILING_CUDA
from .common_cuda import COMMON_CUDA_HEADER
from .group_norm_backward_channels_last_cuda import CHANNELS_LAST_BACKWARD_CUDA
from .group_norm_backward_cpu import GROUP_NORM_BACKWARD_CHECKS

# Registers the CUDA kernel under GN_NAMESPACE (see group_norm_cpu.with_namespace). The shared checks start with
# the message header (gn_inline_msg), which the host code below uses too.
GROUP_NORM_BACKWARD_CUDA_TEMPLATE = COMMON_CUDA_HEADER + CL_TILING_CUDA + GROUP_NORM_BACKWARD_CHECKS + r"""
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <algorithm>
#include <type_traits>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cooperative_groups.h>

namespace gn_inline_backward {

using gn_inline::Vec;
using gn_inline::load_vec;
using gn_inline::store_vec_streaming;

template <typename T> using Acc = gn_inline::Compute<T>;
template <typename T> using Param = gn_inline::ParamRef<T>;          // w, b: read in place
template <typename T> using ParamGrad = gn_inline::ParamGradRef<T>;  // dw, db: written in the weight's dtype

constexpr int kThreads = 256;       // CTA size of every kernel here
constexpr int kUnroll = 4;          // vectors per tensor in flight per thread (row path)
constexpr int64_t kRowPathMinHW = 1024;
constexpr int kResidentThreads = 512;  // largest CTA of the resident path

constexpr int kSums = 3;            // per-row sums: ds, db, dm
constexpr int kCoefs = 3;           // per-slice coefficients: coef_x, coef_1, delta

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sum of three values over the block; every thread gets the result. scratch: 3 * 32 doubles.
__device__ __forceinline__ void block_sum3(double& a, double& b, double& c, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  a = gn_inline::warp_sum(a);
  b = gn_inline::warp_sum(b);
  c = gn_inline::warp_sum(c);
  if (lane == 0) { scratch[warp] = a; scratch[32 + warp] = b; scratch[64 + warp] = c; }
  __syncthreads();
  a = gn_inline::warp_sum(lane < warps ? scratch[lane] : 0.0);
  b = gn_inline::warp_sum(lane < warps ? scratch[32 + lane] : 0.0);
  c = gn_inline::warp_sum(lane < warps ? scratch[64 + lane] : 0.0);
  __syncthreads();
}

// The gradient that reaches the normalisation: dz = dy * act'(z), z = (x - m) * a + bias, where a = rstd * w[c]
// and bias = b[c] are the channel's affine coefficients and d = x - m (m the saved mean). With the Identity
// epilogue (no activation) this is dy and the coefficients are never read.
template <typename Epi, typename A>
__device__ __forceinline__ A grad_z(const Epi& epi, A g, A d, A a, A bias) {
  if constexpr (Epi::kIsIdentity) return g;
  else return g * epi.grad(d * a + bias);
}

// ---------------------------------------------------------------------------------- 1. channel sums

// Row path. CTA b = row * splits + split sums chunk [split * chunk, +chunk) of its row: consecutive CTAs
// stream consecutive memory. Rows whose length is not a multiple of VEC start at another alignment each (x and
// dy at the same offset from a 16-byte boundary, which the host checks): each chunk is cut as in AlignedSplit,
// its body in vectors, its head and tail (< VEC elements each) one element per thread.
// x, dy: (rows, HW); mean: (N * G,); partial: (rows, splits, kSums) holding (ds, db, dm).
// Epi: the forward's epilogue; w, b, rstd are read only for an activation (to form z).
template <typename T, int VEC, typename Epi>
__global__ void __launch_bounds__(kThreads) row_channel_sums(
    const T* __restrict__ x, const T* __restrict__ dy, const typename Acc<T>::type* __restrict__ mean,
    typename Acc<T>::type* __restrict__ partial, int64_t cpg, int64_t HW, int64_t chunk, int64_t splits,
    Param<T> w, Param<T> b, const typename Acc<T>::type* __restrict__ rstd, int64_t C, Epi epi) {
  using A = typename Acc<T>::type;
  __shared__ double scratch[3 * 32];
  const int64_t cta = blockIdx.x;
  const int64_t row = cta / splits;
  const T* xr = x + row * HW;
  const T* dyr = dy + row * HW;
  const A mu = mean[row / cpg];
  A za = A(1), zb = A(0);  // z = (x - mu) * za + zb
  if constexpr (!Epi::kIsIdentity) {
    za = rstd[row / cpg] * (w ? w[row % C] : A(1));
    zb = b ? b[row % C] : A(0);
  }
  int64_t begin = (cta - row * splits) * chunk;
  int64_t end = begin + chunk < HW ? begin + chunk : HW;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * VEC;
  double ds = 0, db = 0, dm = 0;
  if constexpr (VEC > 1) {  // the chunk's head and tail elements, one per thread; then its body
    const gn_inline::AlignedSplit<T, int64_t, VEC> cut(xr, begin, end);
    const int64_t e = cut.edge_element(begin, end, static_cast<int64_t>(threadIdx.x));
    if (e >= 0) {
      const A d = static_cast<A>(xr[e]) - mu;
      const A g = grad_z(epi, static_cast<A>(dyr[e]), d, za, zb);
      ds += static_cast<double>(g * d);
      db += static_cast<double>(g);
      dm += static_cast<double>(d);
    }
    begin += cut.head;
    end = cut.body_end;
  }
  int64_t j = begin + static_cast<int64_t>(threadIdx.x) * VEC;
  for (; j + (kUnroll - 1) * stride < end; j += kUnroll * stride) {
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      xv[u] = load_vec<T, VEC>(xr + j + u * stride);
      gv[u] = load_vec<T, VEC>(dyr + j + u * stride);
    }
    A ls = 0, lb = 0, lm = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const A d = static_cast<A>(xv[u].v[k]) - mu;
        const A g = grad_z(epi, static_cast<A>(gv[u].v[k]), d, za, zb);
        ls += g * d;
        lb += g;
        lm += d;
      }
    ds += ls;
    db += lb;
    dm += lm;
  }
  if (j < end) {  // fewer than kUnroll strides left: one batch of guarded loads, not a chain of single ones
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j + u * stride < end) {
        xv[u] = load_vec<T, VEC>(xr + j + u * stride);
        gv[u] = load_vec<T, VEC>(dyr + j + u * stride);
      }
    }
    A ls = 0, lb = 0, lm = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j + u * stride >= end) continue;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const A d = static_cast<A>(xv[u].v[k]) - mu;
        const A g = grad_z(epi, static_cast<A>(gv[u].v[k]), d, za, zb);
        ls += g * d;
        lb += g;
        lm += d;
      }
    }
    ds += ls;
    db += lb;
    dm += lm;
  }
  block_sum3(ds, db, dm, scratch);
  if (threadIdx.x == 0) {
    A* p = partial + cta * kSums;  // (rows, splits, kSums)
    p[0] = static_cast<A>(ds);
    p[1] = static_cast<A>(db);
    p[2] = static_cast<A>(dm);
  }
}

// Short path. Work units are chunks of slices: unit u = slice * splits + split covers elements
// [split * chunk, +chunk) of the slice. A group of `lanes` threads (a power of two, 1..256) takes one
// unit; groups of up to 32 lanes sit inside one warp and reduce by shuffles, wider groups finish
// through shared memory. The loop is CTA-uniform, so every thread reaches every barrier.
// w: (C,) or null; partial: (slices, splits, kSums) = (sum w dy (x - m), sum w dy, sum (x - m)).
template <typename T, typename I, typename Epi>
__global__ void __launch_bounds__(kThreads) short_slice_sums(
    const T* __restrict__ x, const T* __restrict__ dy, Param<T> w,
    const typename Acc<T>::type* __restrict__ mean, typename Acc<T>::type* __restrict__ partial, I units,
    I splits, I chunk, I D, I HW, I G, int lanes, Param<T> bias,
    const typename Acc<T>::type* __restrict__ rstd, Epi epi) {
  using A = typename Acc<T>::type;
  __shared__ double scratch[kThreads / 32][kSums];
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const I groups = kThreads / lanes;
  const I group = static_cast<I>(threadIdx.x) / lanes;
  const int seg = lanes < 32 ? lanes : 32;
  const I cpg = D / HW;
  for (I first = static_cast<I>(blockIdx.x) * groups; first < units; first += static_cast<I>(gridDim.x) * groups) {
    const I unit = first + group;
    double s = 0, b = 0, m = 0;
    if (unit < units) {
      const I slice = unit / splits;
      const I begin = (unit - slice * splits) * chunk;
      const I end = begin + chunk < D ? begin + chunk : D;
      const T* xs = x + static_cast<int64_t>(slice) * D;
      const T* dys = dy + static_cast<int64_t>(slice) * D;
      const A mu = mean[slice];
      const Param<T> wg = w ? w + (slice % G) * cpg : Param<T>{};
      const Param<T> bg = bias ? bias + (slice % G) * cpg : Param<T>{};
      const A sigma = Epi::kIsIdentity ? A(1) : rstd[slice];
      for (I e = begin + lane; e < end; e += lanes) {
        const A wc = wg ? wg[e / HW] : A(1);
        const A d = static_cast<A>(xs[e]) - mu;
        const A g = grad_z(epi, static_cast<A>(dys[e]), d, sigma * wc,
                           (!Epi::kIsIdentity && bg) ? bg[e / HW] : A(0)) * wc;
        s += static_cast<double>(g * d);
        b += static_cast<double>(g);
        m += static_cast<double>(d);
      }
    }
    for (int offset = seg >> 1; offset > 0; offset >>= 1) {  // stays inside the group's part of the warp
      s += __shfl_xor_sync(0xffffffffu, s, offset);
      b += __shfl_xor_sync(0xffffffffu, b, offset);
      m += __shfl_xor_sync(0xffffffffu, m, offset);
    }
    if (lanes > 32) {  // the group spans lanes / 32 warps
      const int warp = static_cast<int>(threadIdx.x) >> 5;
      if ((threadIdx.x & 31) == 0) {
        scratch[warp][0] = s;
        scratch[warp][1] = b;
        scratch[warp][2] = m;
      }
      __syncthreads();
      if (lane == 0 && unit < units) {
        for (int k = 1; k < lanes / 32; ++k) {
          s += scratch[warp + k][0];
          b += scratch[warp + k][1];
          m += scratch[warp + k][2];
        }
      }
      __syncthreads();
    }
    if (lane == 0 && unit < units) {
      A* p = partial + static_cast<int64_t>(unit) * kSums;
      p[0] = static_cast<A>(s);
      p[1] = static_cast<A>(b);
      p[2] = static_cast<A>(m);
    }
  }
}

// --------------------------------------------------------------------------------- 2. coefficients

// One warp per (n, g) slice; its partials are the contiguous `parts` triples from slice * parts:
// row path, parts = cpg * splits per-(row, chunk) sums, weighted here by w[channel = k / splits];
// short path, parts = splits already weighted sums (w = null here). coef: (N * G, kCoefs) holding
// (coef_x, coef_1, delta).
template <typename T>
__global__ void __launch_bounds__(kThreads) group_coefficients(
    const typename Acc<T>::type* __restrict__ partial, Param<T> w, const typename Acc<T>::type* __restrict__ rstd,
    typename Acc<T>::type* __restrict__ coef, int64_t slices, int64_t G, int64_t cpg, int64_t parts, int64_t splits,
    double D) {
  using A = typename Acc<T>::type;
  const int64_t slice = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (slice >= slices) return;  // the whole warp leaves together
  const A* p = partial + slice * parts * kSums;
  const Param<T> wg = w ? w + (slice % G) * cpg : Param<T>{};
  double S0 = 0, B = 0, M = 0;  // S0 = sum_c w ds (about the saved mean)
  for (int64_t k = lane; k < parts; k += 32) {
    const double wc = wg ? static_cast<double>(wg[k / splits]) : 1.0;
    S0 += wc * static_cast<double>(p[kSums * k]);
    B += wc * static_cast<double>(p[kSums * k + 1]);
    M += static_cast<double>(p[kSums * k + 2]);
  }
  S0 = gn_inline::warp_sum(S0);
  B = gn_inline::warp_sum(B);
  M = gn_inline::warp_sum(M);
  if (lane == 0) {
    const double sigma = static_cast<double>(rstd[slice]);
    const double delta = M / D;          // exact mean - saved mean
    const double S = S0 - delta * B;     // sum_c w ds about the exact mean
    const double coef_x = -sigma * sigma * sigma * S / D;
    coef[kCoefs * slice] = static_cast<A>(coef_x);
    coef[kCoefs * slice + 1] = static_cast<A>(-sigma * B / D - coef_x * delta);
    coef[kCoefs * slice + 2] = static_cast<A>(delta);
  }
}

// ------------------------------------------------------------------------------ 3. parameter grads

// Row, resident and channels-last paths. dw[c] = sum_n (ds - delta db) rstd and db[c] = sum_n db over the
// (n, split) items of channel c: partial (N * C, splits, kSums), coef: (N * G, kCoefs) (delta), dw, db: (C,) or
// null. A CTA takes `cc` channels (a power of two <= 32): thread t works on channel t % cc and on every
// (blockDim.x / cc)-th item from t / cc, and the item lanes of a channel meet in shared memory. A channel's items
// are N * splits partials read one after another, so the lanes per channel, not the bytes, bound the time: with
// 32 channels per CTA and 32 lanes each, C = 64 left 2 CTAs to add 128 x 8 partials per channel (21 us, H200,
// resident path at N = 128); spreading the items over the CTA's threads and the channels over the SMs takes that
// to a few microseconds. Runs as its own kernel or as extra CTAs of a grad-input launch (ParamJob below).
struct ParamShape {
  int64_t N, C, G, cpg, splits;
  int cc;        // channels per CTA (a power of two, 1..32)
  int64_t ctas;  // ceil(C / cc), or 0: no parameter gradients asked for
};

// Channels per CTA: 32 where the channels alone give the SMs work, fewer (more item lanes each) while the grid
// is short of one CTA per SM and the lanes would still have items.
inline ParamShape make_param_shape(int64_t N, int64_t C, int64_t G, int64_t splits, int threads, int sms,
                                   bool wanted) {
  ParamShape s{N, C, G, C / G, splits, 32, 0};
  const int64_t items = N * splits;
  while (s.cc > 1 && ceil_div(C, s.cc) < sms && threads / s.cc < items) s.cc >>= 1;
  s.ctas = wanted ? ceil_div(C, s.cc) : 0;
  return s;
}

template <typename T>
struct ParamJob {
  using A = typename Acc<T>::type;
  const A* partial;
  const A* rstd;
  const A* coef;
  ParamGrad<T> dw, db;
  ParamShape shape;
};

// The CTA's share: channels [block * cc, + cc). Every thread of the CTA calls it (block barriers inside).
// sums: 2 * blockDim.x doubles of shared memory.
template <typename T>
__device__ __forceinline__ void parameter_grads_block(const ParamJob<T>& job, int64_t block, double* sums) {
  using A = typename Acc<T>::type;
  const ParamShape& s = job.shape;
  const int tx = static_cast<int>(threadIdx.x) & (s.cc - 1), ty = static_cast<int>(threadIdx.x) / s.cc;
  const int lanes = static_cast<int>(blockDim.x) / s.cc;  // threads past lanes * cc only take part in barriers
  const int64_t c = block * s.cc + tx;
  const int64_t items = s.N * s.splits;
  double sw = 0, sb = 0;
  if (c < s.C && ty < lanes) {
    const int64_t g = c / s.cpg;
    for (int64_t i = ty; i < items; i += lanes) {
      const int64_t n = i / s.splits, split = i - n * s.splits;
      const A* p = job.partial + ((n * s.C + c) * s.splits + split) * kSums;
      const int64_t slice = n * s.G + g;
      const double dsum = static_cast<double>(p[1]);
      sw += (static_cast<double>(p[0]) - static_cast<double>(job.coef[kCoefs * slice + 2]) * dsum) *
            static_cast<double>(job.rstd[slice]);
      sb += dsum;
    }
  }
  sums[threadIdx.x] = sw;
  sums[blockDim.x + threadIdx.x] = sb;
  __syncthreads();
  int half = 1;
  while (half * 2 < lanes) half *= 2;
  for (; half > 0; half >>= 1) {  // fixed order: deterministic
    if (ty < half && ty + half < lanes) {
      sums[threadIdx.x] += sums[threadIdx.x + half * s.cc];
      sums[blockDim.x + threadIdx.x] += sums[blockDim.x + threadIdx.x + half * s.cc];
    }
    __syncthreads();
  }
  if (ty == 0 && c < s.C) {
    if (job.dw) job.dw.store(c, sums[threadIdx.x]);
    if (job.db) job.db.store(c, sums[blockDim.x + threadIdx.x]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) parameter_grads(ParamJob<T> job) {
  __shared__ double sums[2 * kThreads];
  parameter_grads_block<T>(job, blockIdx.x, sums);
}

// Step 3 as its own launch (the resident path, and grad-input launches that do not carry it).
template <typename T>
ParamJob<T> param_job(const typename Acc<T>::type* partial, const typename Acc<T>::type* rstd,
                      const typename Acc<T>::type* coef, ParamGrad<T> dw, ParamGrad<T> db, int64_t N, int64_t C,
                      int64_t G, int64_t splits, int threads, int sms) {
  return ParamJob<T>{partial, rstd, coef, dw, db,
                     make_param_shape(N, C, G, splits, threads, sms, static_cast<bool>(dw) || static_cast<bool>(db))};
}

template <typename T>
void launch_parameter_grads(const ParamJob<T>& job, cudaStream_t stream) {
  if (job.shape.ctas == 0) return;
  parameter_grads<T><<<static_cast<unsigned>(job.shape.ctas), kThreads, 0, stream>>>(job);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Short path: channel c's terms were left by short_grad_input in segments c, c + C, ..., c + (k-1) C.
// param_partial: (k * C, 2) doubles; dw, db: (C,) or null.
template <typename T>
__global__ void __launch_bounds__(kThreads) short_parameter_grads(const double* __restrict__ param_partial,
                                                                  ParamGrad<T> dw, ParamGrad<T> db, int64_t C,
                                                                  int64_t k) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sw = 0, sb = 0;
  for (int64_t j = 0; j < k; ++j) {
    sw += param_partial[2 * (j * C + c)];
    sb += param_partial[2 * (j * C + c) + 1];
  }
  if (dw) dw.store(c, sw);
  if (db) db.store(c, sb);
}

// ---------------------------------------------------------------------------------- 4. grad input

// Per-row constants of dx = a * dy + coef_x * (x - mean) + coef_1.
template <typename A>
struct RowCoefficients {
  A a, mean, coef_x, coef_1;
};

template <typename T, typename A = typename Acc<T>::type>
__device__ __forceinline__ RowCoefficients<A> row_coefficients(int64_t row, int64_t C, int64_t cpg, Param<T> w,
                                                               const A* __restrict__ mean,
                                                               const A* __restrict__ rstd,
                                                               const A* __restrict__ coef) {
  const int64_t slice = row / cpg;
  const A sigma = rstd[slice];
  return {w ? sigma * w[row % C] : sigma, mean[slice], coef[kCoefs * slice], coef[kCoefs * slice + 1]};
}

// Row path: CTA b takes chunk [split * chunk, +chunk) of its row (chunks of its own, finer than step 1's), the
// CTAs walked from the last one: what step 1 read last is what L2 still holds. dx: (rows, HW), written with
// streaming stores; rows of any alignment as in row_channel_sums (dx at x's offset from a 16-byte boundary).
// The first job.shape.ctas CTAs compute the parameter gradients instead (step 3 rides along
// with step 4: no launch of its own, and its few CTAs finish while the others stream).
template <typename T, int VEC, typename Epi>
__global__ void __launch_bounds__(kThreads) row_grad_input(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, Param<T> w,
    const typename Acc<T>::type* __restrict__ mean, const typename Acc<T>::type* __restrict__ rstd,
    const typename Acc<T>::type* __restrict__ coef, int64_t C, int64_t cpg, int64_t HW, int64_t chunk,
    int64_t splits, Param<T> b, Epi epi, ParamJob<T> job) {
  using A = typename Acc<T>::type;
  if (static_cast<int64_t>(blockIdx.x) < job.shape.ctas) {  // CTA-uniform
    __shared__ double param_sums[2 * kThreads];
    parameter_grads_block<T>(job, blockIdx.x, param_sums);
    return;
  }
  const int64_t cta = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
  const int64_t row = cta / splits;
  const int64_t offset = row * HW;
  const T* xr = x + offset;
  const T* dyr = dy + offset;
  T* dxr = dx + offset;
  const RowCoefficients<A> k = row_coefficients<T>(row, C, cpg, w, mean, rstd, coef);
  const A zb = (!Epi::kIsIdentity && b) ? b[row % C] : A(0);  // z = (x - mean) * k.a + zb
  int64_t begin = (cta - row * splits) * chunk;
  int64_t end = begin + chunk < HW ? begin + chunk : HW;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * VEC;
  if constexpr (VEC > 1) {  // the chunk's head and tail elements, one per thread; then its body
    const gn_inline::AlignedSplit<T, int64_t, VEC> cut(xr, begin, end);
    const int64_t e = cut.edge_element(begin, end, static_cast<int64_t>(threadIdx.x));
    if (e >= 0) {
      const A d = static_cast<A>(xr[e]) - k.mean;
      dxr[e] = static_cast<T>(k.a * grad_z(epi, static_cast<A>(dyr[e]), d, k.a, zb) + k.coef_x * d + k.coef_1);
    }
    begin += cut.head;
    end = cut.body_end;
  }
  int64_t j = begin + static_cast<int64_t>(threadIdx.x) * VEC;
  for (; j + (kUnroll - 1) * stride < end; j += kUnroll * stride) {
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      xv[u] = load_vec<T, VEC>(xr + j + u * stride);
      gv[u] = load_vec<T, VEC>(dyr + j + u * stride);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      Vec<T, VEC> out;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A d = static_cast<A>(xv[u].v[e]) - k.mean;
        out.v[e] = static_cast<T>(k.a * grad_z(epi, static_cast<A>(gv[u].v[e]), d, k.a, zb) + k.coef_x * d + k.coef_1);
      }
      store_vec_streaming<T, VEC>(dxr + j + u * stride, out);
    }
  }
  if (j < end) {  // the last < kUnroll strides: one batch of guarded loads
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j + u * stride < end) {
        xv[u] = load_vec<T, VEC>(xr + j + u * stride);
        gv[u] = load_vec<T, VEC>(dyr + j + u * stride);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j + u * stride >= end) continue;
      Vec<T, VEC> out;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A d = static_cast<A>(xv[u].v[e]) - k.mean;
        out.v[e] = static_cast<T>(k.a * grad_z(epi, static_cast<A>(gv[u].v[e]), d, k.a, zb) + k.coef_x * d + k.coef_1);
      }
      store_vec_streaming<T, VEC>(dxr + j + u * stride, out);
    }
  }
}

// Short path: `seg` lanes (a power of two <= 32) per row; segment q < segments takes rows q,
// q + segments, ..., and segments = C * k, so all its rows are of channel c = q % C. dx may be null
// (only parameter grads asked for); param_partial: (segments, 2) doubles = (sum rstd * dy (x - m - delta),
// sum dy) of the segment's rows, or null.
template <typename T, typename I, typename Epi>
__global__ void __launch_bounds__(kThreads) short_grad_input(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, Param<T> w,
    const typename Acc<T>::type* __restrict__ mean, const typename Acc<T>::type* __restrict__ rstd,
    const typename Acc<T>::type* __restrict__ coef, double* __restrict__ param_partial, I rows, I C, I cpg, I HW,
    I segments, int seg, Param<T> b, Epi epi) {
  using A = typename Acc<T>::type;
  const I thread = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  const I q = thread / seg;
  const I seg_lane = thread & (seg - 1);
  const A wc = (w && q < segments) ? w[q % C] : A(1);
  const A bc = (!Epi::kIsIdentity && b && q < segments) ? b[q % C] : A(0);
  double pw = 0, pb = 0;
  for (I row = q < segments ? q : rows; row < rows; row += segments) {
    const I slice = row / cpg;
    const A sigma = rstd[slice], mu = mean[slice];
    const A a = sigma * wc, coef_x = coef[kCoefs * slice], coef_1 = coef[kCoefs * slice + 1];
    const A delta = coef[kCoefs * slice + 2];
    const int64_t offset = static_cast<int64_t>(row) * HW;
    A lw = 0, lb = 0;
    for (I i = seg_lane; i < HW; i += seg) {
      const A d = static_cast<A>(x[offset + i]) - mu;
      const A g = grad_z(epi, static_cast<A>(dy[offset + i]), d, a, bc);
      if (dx) dx[offset + i] = static_cast<T>(a * g + coef_x * d + coef_1);
      lw += g * (d - delta);
      lb += g;
    }
    pw += static_cast<double>(sigma) * static_cast<double>(lw);
    pb += static_cast<double>(lb);
  }
  if (param_partial == nullptr) return;  // uniform over the grid
  for (int offset = seg >> 1; offset > 0; offset >>= 1) {  // every lane is here: the loops have ended
    pw += __shfl_xor_sync(0xffffffffu, pw, offset);
    pb += __shfl_xor_sync(0xffffffffu, pb, offset);
  }
  if (seg_lane == 0 && q < segments) {
    param_partial[2 * static_cast<int64_t>(q)] = pw;
    param_partial[2 * static_cast<int64_t>(q) + 1] = pb;
  }
}

// ------------------------------------------------------------------------- resident path (Hopper clusters)

// Steps 1, 2 and 4 in one launch for slices whose x and dy fit in a cluster's shared memory: x and dy are
// read once from memory (the row path reads them twice; past L2's size the second read is DRAM traffic).
// CTA of cluster rank r owns slice elements [r * part, min(D, (r + 1) * part)); part and HW are multiples
// of VEC, so no vector straddles two channels.
//   1. stream the part into shared memory, summing per channel (ds, db in shared-memory accumulators, one
//      warp-reduced add per channel and vector step) and over the part (dm);
//   2. the slice's weighted sums S0 = sum_c w ds, B = sum_c w db and M = sum dm, exchanged across the
//      cluster through distributed shared memory, give the coefficients (formulas of group_coefficients);
//   4. dx from shared memory.
// partial: (rows, cluster, kSums) laid out as the row path's with splits = cluster (rank r's share of each
// row of the slice, zero where it holds none of it), for parameter_grads; coef: (N * G, kCoefs).
template <typename T, int VEC, typename Epi>
__global__ void __launch_bounds__(kResidentThreads) resident_backward(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, Param<T> w, Param<T> b,
    const typename Acc<T>::type* __restrict__ mean, const typename Acc<T>::type* __restrict__ rstd,
    typename Acc<T>::type* __restrict__ partial, typename Acc<T>::type* __restrict__ coef, int64_t C, int64_t G,
    int cpg, int HW, int D, int part, Epi epi) {
  using A = typename Acc<T>::type;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  const int rank = 0, cluster_size = 1;  // never launched with clusters there (the host checks the arch)
#else
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_size = static_cast<int>(cluster.num_blocks());
#endif
  extern __shared__ __align__(16) unsigned char resident_smem[];
  T* xbuf = reinterpret_cast<T*>(resident_smem);  // part elements of x, then part of dy, then 2 * cpg sums
  T* gbuf = xbuf + part;
  A* chan = reinterpret_cast<A*>(gbuf + part);    // chan[c] = ds, chan[cpg + c] = db of local channel c
  __shared__ double scratch[3 * 32];
  __shared__ double cta_sums[3];
  __shared__ double slice_sums[3];
  const int64_t slice = blockIdx.x / cluster_size;
  const int64_t n = slice / G;
  const int64_t c0 = (slice % G) * cpg;
  const T* xs = x + slice * D;
  const T* gs = dy + slice * D;
  const A mu = mean[slice];
  const A sigma = rstd[slice];
  const int begin = rank * part;
  const int end = min(D, begin + part);
  const int lane = threadIdx.x & 31;
  for (int c = threadIdx.x; c < 2 * cpg; c += blockDim.x) chan[c] = A(0);
  __syncthreads();

  // 1. Every thread runs the same trips (warp-uniform shuffles); lanes past `end` add zeros.
  const int stride = blockDim.x * VEC;
  double dm = 0;
  for (int jb = begin; jb < end; jb += kUnroll * stride) {
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + u * stride + static_cast<int>(threadIdx.x) * VEC;
      if (j < end) {
        xv[u] = load_vec<T, VEC>(xs + j);
        gv[u] = load_vec<T, VEC>(gs + j);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = jb + u * stride + static_cast<int>(threadIdx.x) * VEC;
      const bool active = j < end;
      const int c = active ? j / HW : -1;
      A ls = 0, lb = 0, lm = 0;
      if (active) {
        *reinterpret_cast<Vec<T, VEC>*>(xbuf + (j - begin)) = xv[u];
        *reinterpret_cast<Vec<T, VEC>*>(gbuf + (j - begin)) = gv[u];
        A za = A(1), zb = A(0);
        if constexpr (!Epi::kIsIdentity) {
          za = w ? sigma * w[c0 + c] : sigma;
          zb = b ? b[c0 + c] : A(0);
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const A d = static_cast<A>(xv[u].v[k]) - mu;
          const A g = grad_z(epi, static_cast<A>(gv[u].v[k]), d, za, zb);
          ls += g * d;
          lb += g;
          lm += d;
        }
      }
      dm += lm;
      // Lane 0 holds the warp's lowest index, so it is active whenever any lane is.
      const int cw = __shfl_sync(0xffffffffu, c, 0);
      if (cw < 0) continue;  // the whole warp is past the end (warp-uniform)
      if (__all_sync(0xffffffffu, c == cw || c < 0)) {
        ls = gn_inline::warp_sum(ls);
        lb = gn_inline::warp_sum(lb);
        if (lane == 0) {
          atomicAdd(chan + cw, ls);
          atomicAdd(chan + cpg + cw, lb);
        }
      } else if (active) {  // the warp spans a channel boundary
        atomicAdd(chan + c, ls);
        atomicAdd(chan + cpg + c, lb);
      }
    }
  }
  double s0 = 0, bb = 0;
  __syncthreads();  // every channel sum is in
  for (int c = threadIdx.x; c < cpg; c += blockDim.x) {
    const double wc = w ? static_cast<double>(w[c0 + c]) : 1.0;
    s0 += wc * static_cast<double>(chan[c]);
    bb += wc * static_cast<double>(chan[cpg + c]);
    A* p = partial + ((n * C + c0 + c) * cluster_size + rank) * kSums;  // (rows, cluster, kSums)
    p[0] = chan[c];
    p[1] = chan[cpg + c];
    p[2] = A(0);  // dm per row: not read by parameter_grads
  }
  block_sum3(s0, bb, dm, scratch);

  // 2. the slice's sums across the cluster, then its coefficients
  if (threadIdx.x == 0) { cta_sums[0] = s0; cta_sums[1] = bb; cta_sums[2] = dm; }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __syncthreads();
  if (threadIdx.x == 0) { slice_sums[0] = cta_sums[0]; slice_sums[1] = cta_sums[1]; slice_sums[2] = cta_sums[2]; }
  __syncthreads();
#else
  cluster.sync();
  if (threadIdx.x < 32) {
    double r0 = 0, r1 = 0, r2 = 0;
    if (static_cast<int>(threadIdx.x) < cluster_size) {
      const double* remote = cluster.map_shared_rank(cta_sums, static_cast<int>(threadIdx.x));
      r0 = remote[0];
      r1 = remote[1];
      r2 = remote[2];
    }
    r0 = gn_inline::warp_sum(r0);
    r1 = gn_inline::warp_sum(r1);
    r2 = gn_inline::warp_sum(r2);
    if (threadIdx.x == 0) { slice_sums[0] = r0; slice_sums[1] = r1; slice_sums[2] = r2; }
  }
  __syncthreads();
  cluster.barrier_arrive();  // done reading remote shared memory; wait before exiting
#endif
  const double Dd = static_cast<double>(D);
  const double sig = static_cast<double>(sigma);
  const double delta = slice_sums[2] / Dd;
  const double S = slice_sums[0] - delta * slice_sums[1];
  const double cx = -sig * sig * sig * S / Dd;
  const double c1 = -sig * slice_sums[1] / Dd - cx * delta;
  if (rank == 0 && threadIdx.x == 0) {
    coef[kCoefs * slice] = static_cast<A>(cx);
    coef[kCoefs * slice + 1] = static_cast<A>(c1);
    coef[kCoefs * slice + 2] = static_cast<A>(delta);
  }

  // 4. dx = a * dz + coef_x * (x - m) + coef_1, a = rstd * w[c], from shared memory
  if (dx != nullptr) {
    const A coef_x = static_cast<A>(cx), coef_1 = static_cast<A>(c1);
    T* dxs = dx + slice * D;
    for (int j = begin + static_cast<int>(threadIdx.x) * VEC; j < end; j += stride) {
      const int c = j / HW;
      const A a = w ? sigma * w[c0 + c] : sigma;
      const A zb = (!Epi::kIsIdentity && b) ? b[c0 + c] : A(0);
      const Vec<T, VEC> xv = *reinterpret_cast<const Vec<T, VEC>*>(xbuf + (j - begin));
      const Vec<T, VEC> gv = *reinterpret_cast<const Vec<T, VEC>*>(gbuf + (j - begin));
      Vec<T, VEC> out;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A d = static_cast<A>(xv.v[e]) - mu;
        out.v[e] = static_cast<T>(a * grad_z(epi, static_cast<A>(gv.v[e]), d, a, zb) + coef_x * d + coef_1);
      }
      store_vec_streaming<T, VEC>(dxs + j, out);
    }
  }
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900)
  cluster.barrier_wait();
#endif
}

// ------------------------------------------------------------------------------------------ host

// Multiprocessor count of a device, asked once per device (not through ATen/cuda/CUDAContext.h, whose
// includes need the cuSPARSE/cuBLAS headers that a bare toolkit may lack).
inline int sm_count(int device) { return gn_inline::device_attribute<cudaDevAttrMultiProcessorCount>(device); }

// Row path: how steps 1 and 4 split the rows.
struct RowPlan {
  int vec;          // elements per access (1 when x, dy and dx sit at different offsets from 16-byte boundaries)
  int64_t splits;   // CTAs per row
  int64_t chunk;    // elements per CTA, a multiple of 32 * vec
};

// vectors: x, dy and dx share their offset from a 16-byte boundary, so every chunk's body moves in 16-byte
// vectors. Rows whose length is not a multiple of the vector used to be read one element at a time: H100, backward
// kernels, element-wise -> vectors, (32,8,207,131) fp32 58.8 -> 51.1 us, (64,4,154113) bf16 193 -> 139 us.
inline RowPlan make_row_plan(int64_t rows, int64_t HW, int vec16, bool vectors, int sms) {
  RowPlan p{};
  const int64_t target_ctas = static_cast<int64_t>(sms) * 32;  // ~4 waves of 8 resident 256-thread CTAs
  p.vec = vectors ? vec16 : 1;
  // Chunks of ~16K elements keep the grid many waves deep (a short tail), each CTA still streaming
  // 64 KB or more per tensor; with few rows, rows are split further, down to 2K elements per CTA.
  int64_t splits = ceil_div(HW, 16384);
  if (rows * splits < target_ctas) splits = std::max(splits, std::min(ceil_div(target_ctas, rows), HW / 2048));
  splits = std::max<int64_t>(1, splits);
  const int64_t quantum = 32 * p.vec;
  p.chunk = ceil_div(ceil_div(HW, splits), quantum) * quantum;
  p.splits = ceil_div(HW, p.chunk);
  return p;
}

// Short path: how step 1 covers the slices and step 4 the rows.
struct ShortPlan {
  int64_t splits, chunk;   // step 1: units of `chunk` elements, `splits` per slice
  int lanes;               // step 1: lanes per unit (power of two, 1..256)
  int64_t sum_blocks;      // step 1: grid (grid-stride over units)
  int seg;                 // step 4: lanes per row (power of two, 1..32)
  int64_t k;               // step 4: segments per channel
  int64_t grad_blocks;     // step 4: grid
};

inline int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < cap && p < v) p <<= 1;
  return p;
}

inline ShortPlan make_short_plan(int64_t slices, int64_t D, int64_t N, int64_t C, int64_t HW, int sms) {
  ShortPlan p{};
  const int64_t resident_threads = static_cast<int64_t>(sms) * 2048;
  // Step 1: units of up to 8K elements; slices split further while there are fewer than ~8 units per
  // SM, down to 1K elements; ~8 elements per lane.
  int64_t splits = ceil_div(D, 8192);
  if (slices * splits < 8 * sms) splits = std::max(splits, std::min(ceil_div(8 * sms, slices), ceil_div(D, 1024)));
  p.chunk = ceil_div(D, splits);
  p.splits = ceil_div(D, p.chunk);
  p.lanes = pow2_at_least(ceil_div(p.chunk, 8), kThreads);
  const int64_t units_per_cta = kThreads / p.lanes;
  p.sum_blocks = std::max<int64_t>(1, std::min(ceil_div(slices * p.splits, units_per_cta),
                                               static_cast<int64_t>(sms) * 32));
  // Step 4: ~4 elements per lane; about one resident wave of threads, in whole sets of C segments, but no
  // more segments per channel than the channel has rows (N): an idle segment still leaves a partial that
  // short_parameter_grads adds up serially (tiny inputs took milliseconds before this bound).
  p.seg = pow2_at_least(ceil_div(HW, 4), 32);
  p.k = std::max<int64_t>(1, std::min(N, resident_threads / p.seg / C));
  p.grad_blocks = ceil_div(C * p.k * p.seg, kThreads);
  return p;
}

// Pointers and sizes of one backward call. x, dy: contiguous (N, C, HW); w, b: (C,) in the compute type or T,
// or null; mean, rstd: (N, G); dx: output or null when not asked for; dw, db: outputs in the compute type or T,
// or null; act: the forward's activation.
template <typename T>
struct Problem {
  using A = typename Acc<T>::type;
  const T* x;
  const T* dy;
  T* dx;
  Param<T> w, b;  // (C,) or null
  const A* mean;
  const A* rstd;
  ParamGrad<T> dw, db;  // (C,) or null
  int64_t N, C, G, cpg, HW;
  gn_act::Params act;
};

template <typename Epi>
inline Epi backward_epilogue(const gn_act::Params& act) {
  if constexpr (!Epi::kIsIdentity) return Epi{act};
  else return Epi{};
}

template <typename T, int VEC, typename Epi>
void launch_row_sums(const Problem<T>& pr, typename Acc<T>::type* partial, int64_t rows, const RowPlan& p,
                     cudaStream_t stream) {
  row_channel_sums<T, VEC, Epi><<<static_cast<unsigned>(rows * p.splits), kThreads, 0, stream>>>(
      pr.x, pr.dy, pr.mean, partial, pr.cpg, pr.HW, p.chunk, p.splits, pr.w, pr.b, pr.rstd, pr.C,
      backward_epilogue<Epi>(pr.act));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Step 4 cuts rows finer than step 1: one batch of kUnroll vectors per thread and CTA (16 KB of each tensor), as
// an elementwise kernel does, so that the last wave is a sliver of the kernel. CTAs of whole rows (15876 floats:
// 7.75 waves of 8 CTAs per SM) left a quarter of the SMs idle in the last wave: H200, float32 (128,64,126,126),
// 383 us against the 354 us of Inductor's elementwise kernel under ncu; (16,64,256,256) 187 against 181 us.
template <typename T, int VEC, typename Epi>
void launch_row_grad_input(const Problem<T>& pr, const typename Acc<T>::type* coef, int64_t rows,
                           const ParamJob<T>& job, cudaStream_t stream) {
  const int64_t chunk = static_cast<int64_t>(kThreads) * VEC * kUnroll;
  const int64_t splits = ceil_div(pr.HW, chunk);
  row_grad_input<T, VEC, Epi><<<static_cast<unsigned>(job.shape.ctas + rows * splits), kThreads, 0, stream>>>(
      pr.x, pr.dy, pr.dx, pr.w, pr.mean, pr.rstd, coef, pr.C, pr.cpg, pr.HW, chunk, splits, pr.b,
      backward_epilogue<Epi>(pr.act), job);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void launch_coefficients(const Problem<T>& pr, const typename Acc<T>::type* partial, bool weighted,
                         int64_t parts, int64_t splits, typename Acc<T>::type* coef, cudaStream_t stream) {
  const int64_t slices = pr.N * pr.G;
  group_coefficients<T>
      <<<static_cast<unsigned>(ceil_div(slices * 32, kThreads)), kThreads, 0, stream>>>(
          partial, weighted ? pr.w : Param<T>{}, pr.rstd, coef, slices, pr.G, pr.cpg, parts, splits,
          static_cast<double>(pr.cpg) * static_cast<double>(pr.HW));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename Epi>
void run_row_path(const Problem<T>& pr, bool vectors, int sms, const at::TensorOptions& acc_opts,
                  cudaStream_t stream) {
  using A = typename Acc<T>::type;
  constexpr int V = gn_inline::vec16<T>();
  const int64_t rows = pr.N * pr.C;
  const RowPlan p = make_row_plan(rows, pr.HW, V, vectors, sms);
  at::Tensor partial = at::empty({rows * p.splits * kSums}, acc_opts);   // (rows, splits, kSums)
  at::Tensor coef = at::empty({pr.N * pr.G * kCoefs}, acc_opts);        // (N * G, kCoefs)
  A* pp = partial.data_ptr<A>();
  A* cp = coef.data_ptr<A>();
  if (p.vec == V) launch_row_sums<T, V, Epi>(pr, pp, rows, p, stream);
  else launch_row_sums<T, 1, Epi>(pr, pp, rows, p, stream);
  launch_coefficients<T>(pr, pp, /*weighted=*/true, pr.cpg * p.splits, p.splits, cp, stream);
  const ParamJob<T> job = param_job<T>(pp, pr.rstd, cp, pr.dw, pr.db, pr.N, pr.C, pr.G, p.splits, kThreads, sms);
  if (pr.dx == nullptr) {
    launch_parameter_grads<T>(job, stream);
    return;
  }
  if (p.vec == V) launch_row_grad_input<T, V, Epi>(pr, cp, rows, job, stream);
  else launch_row_grad_input<T, 1, Epi>(pr, cp, rows, job, stream);
}

// Resident path: when the slice's x and dy fit in the shared memory of a cluster (Hopper), steps 1, 2 and
// 4 in one launch (x and dy read once), then step 3 from its per-(row, rank) sums. Returns false (nothing
// launched) when it cannot take the problem; the row path then does.
constexpr int64_t kResidentBwdTargetBytes = 96 * 1024;  // per CTA: two CTAs of 512 threads fit an SM
constexpr int64_t kResidentBwdMaxBytes = 200 * 1024;
constexpr int kResidentBwdMaxCluster = 8;
constexpr int kResidentBwdMaxCpg = 2048;                // channel accumulators: 16 KB of floats at most

// GROUPNORM_INLINE_BACKWARD_PATH: `row` turns the resident path off, `resident` takes it whenever the problem fits
// a cluster (past resident_pays), anything else leaves the choice to the rule (benchmarks compare the paths). Read
// on every call (a getenv and a compare, no allocation) so that one process can alternate the paths call by call.
enum class PathOverride { kAuto, kRow, kResident };
inline PathOverride backward_path_override() {
  const char* v = std::getenv("GROUPNORM_INLINE_BACKWARD_PATH");
  if (v == nullptr) return PathOverride::kAuto;
  if (std::strcmp(v, "row") == 0) return PathOverride::kRow;
  if (std::strcmp(v, "resident") == 0) return PathOverride::kResident;
  return PathOverride::kAuto;
}

// Whether reading x and dy once at the resident kernel's rate beats the row path's two reads at DRAM bandwidth.
// The resident kernel is latency-bound: each CTA loads its part, waits at the cluster barrier, then writes dx, so
// it moves ~kResidentBytesPerSm per second per SM whatever the DRAM (x, dy and dx together: 1.5-2.4 TB/s over
// 132 SMs, ~2.1 typical, the same on H100 (3.35 TB/s peak) and H200 (4.8 TB/s peak)). The row path streams 5
// tensor sizes (x and dy twice, dx once) at ~kRowPathEfficiency of the DRAM's peak, plus a fixed cost of its four
// launches and each pass's ramp and tail (H200: the measured row path less 5 B at 88% of the peak is 18-27 us from
// 130 MB to 520 MB; shorter rows cost it more, where the resident path wins anyway). What the second read finds in
// L2 is not counted: below a few tens of MB the fixed cost decides. benchmarks/backward_path_check.py, operator
// ms, row / resident, H200: float32 (128,64,126,126) 0.611 / 0.677, (256,32,32,32) 0.076 / 0.048; bfloat16
// (64,128,128,128) 0.322 / 0.383, (16,512,32,32) 0.069 / 0.032. On an H100 the rule keeps the resident path,
// the faster one at every row measured there (the row path's 5 B at 3.35 TB/s cost more than 3 B at ~2 TB/s):
// float32 (128,64,126,126) 0.894 / 0.749, bfloat16 (64,128,128,128) 0.449 / 0.412.
constexpr double kResidentBytesPerSm = 15.5e9;
constexpr double kRowPathEfficiency = 0.88;
constexpr double kRowPathFixedSeconds = 20e-6;
inline bool resident_pays(const gn_inline::DeviceInfo& dev, int64_t tensor_bytes) {
  if (dev.dram_bytes_per_s <= 0) return true;  // unknown bandwidth: keep the single read
  const double B = static_cast<double>(tensor_bytes);
  const double resident_s = 3.0 * B / (kResidentBytesPerSm * dev.sms);
  const double row_s = 5.0 * B / (kRowPathEfficiency * dev.dram_bytes_per_s) + kRowPathFixedSeconds;
  return resident_s < row_s;
}

// GROUPNORM_INLINE_RESIDENT_BWD_THREADS (64..512, a power of two): the largest CTA the resident path may size,
// in place of the automatic choice below (benchmarks); 0 when unset. Read on every call (~0.1 us) so that one
// process can alternate settings call by call (benchmarks/resident_threads_check.py).
inline int resident_threads_override() {
  const char* v = std::getenv("GROUPNORM_INLINE_RESIDENT_BWD_THREADS");
  const int n = v ? std::atoi(v) : 0;
  return (n >= 64 && n <= kResidentThreads && (n & (n - 1)) == 0) ? n : 0;
}

// Threads per CTA of the resident path: enough for kUnroll vectors of each tensor in flight per thread (64..512),
// then halved from 512 to 256 when that lets at least 1.5x as many CTAs share an SM, i.e. when the registers of
// 512-thread CTAs, not the parts in shared memory, bound the CTAs per SM (the kernel takes ~60 registers a
// thread in float32/float16, ~120 in bfloat16). More CTAs per SM overlap one CTA's loads with another's
// stores. H100, operator time at 256 / 512 threads (resident_threads_check.py): float32 (128,64,126,126) 0.83,
// (16,128,96,96) 0.98, (32,256,64,64) 1.01; bfloat16 (64,128,128,128) 0.70, (32,256,64,64) 0.79; where shared
// memory already bounds them at two per SM the halving only loses: (8,320,64,64) fp32 1.13, (2,320,128,128)
// fp16 1.11 (kept at 512 by the rule).
inline int resident_threads(const void* kernel, int device, int64_t part, int vec, size_t smem) {
  const int forced = resident_threads_override();
  const int cap = forced ? forced : kResidentThreads;
  int threads = 64;
  while (threads < cap && static_cast<int64_t>(threads) * vec * kUnroll < part) threads *= 2;
  if (forced || threads != kResidentThreads) return threads;
  // Sets the kernel's launch attributes (the shared-memory opt-in) first: without them the occupancy query
  // would count no CTA with more than 48 KB of dynamic shared memory.
  gn_inline::max_active_clusters(kernel, device, 1, kResidentThreads, smem);
  const int at_full = gn_inline::resident_ctas_per_sm(kernel, device, kResidentThreads, smem);
  const int at_half = gn_inline::resident_ctas_per_sm(kernel, device, kResidentThreads / 2, smem);
  return 2 * at_half >= 3 * at_full ? kResidentThreads / 2 : kResidentThreads;
}

template <typename T, typename Epi>
bool try_resident_path(const Problem<T>& pr, bool aligned, bool by_rule, const at::TensorOptions& acc_opts,
                       int device, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  constexpr int V = gn_inline::vec16<T>();
  const gn_inline::DeviceInfo& dev = gn_inline::device_info(device);
  const int64_t D = pr.cpg * pr.HW;
  if (dev.major < 9 || !aligned || pr.HW % V != 0 || pr.cpg > kResidentBwdMaxCpg || D > 0x3fffffff) return false;
  if (by_rule && !resident_pays(dev, pr.N * pr.C * pr.HW * static_cast<int64_t>(sizeof(T)))) return false;
  const int64_t chan_bytes = 2 * pr.cpg * static_cast<int64_t>(sizeof(A));
  const int64_t slice_bytes = 2 * D * static_cast<int64_t>(sizeof(T));
  // Clusters of up to 8 CTAs of <= 96 KB: two CTAs per SM, so one CTA's loads overlap another's stores (with
  // 16 CTAs of 128 KB, one per SM, the H100 measured 13% slower than the row path). Few slices are split
  // further, down to 16 KB per CTA, until there are two CTAs per SM: a part then costs one round of loads
  // (64 slices of 160 KB in clusters of 2 measured 43% slower than the row path).
  const int64_t slices = pr.N * pr.G;
  int cluster = 1;
  while (cluster < kResidentBwdMaxCluster &&
         (gn_inline::ceil_div(slice_bytes, cluster) + chan_bytes > kResidentBwdTargetBytes ||
          (slices * cluster < 2 * dev.sms && gn_inline::ceil_div(slice_bytes, cluster) > 16 * 1024)))
    cluster *= 2;
  if (gn_inline::ceil_div(slice_bytes, cluster) + chan_bytes > kResidentBwdTargetBytes) return false;
  const int64_t part = gn_inline::ceil_div(gn_inline::ceil_div(D, cluster), V) * V;
  const int64_t smem = 2 * part * static_cast<int64_t>(sizeof(T)) + chan_bytes;
  if (smem > std::min<int64_t>(kResidentBwdMaxBytes, dev.max_smem_optin - 2048)) return false;
  if (slices * cluster > 0x7fffffff) return false;
  auto kernel = resident_backward<T, V, Epi>;
  const int threads = resident_threads(reinterpret_cast<const void*>(kernel), device, part, V,
                                       static_cast<size_t>(smem));
  if (gn_inline::max_active_clusters(reinterpret_cast<const void*>(kernel), device, cluster, threads,
                                     static_cast<size_t>(smem)) < 1)
    return false;
  const int64_t rows = pr.N * pr.C;
  at::Tensor partial = at::empty({rows * cluster * kSums}, acc_opts);  // (rows, cluster, kSums)
  at::Tensor coef = at::empty({slices * kCoefs}, acc_opts);            // (N * G, kCoefs)
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(slices * cluster));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  config.attrs = attr;
  config.numAttrs = 0;
  if (cluster > 1) {
    attr[0] = gn_inline::cluster_dim_attribute(cluster);
    config.numAttrs = 1;
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, pr.x, pr.dy, pr.dx, pr.w, pr.b, pr.mean, pr.rstd,
                                    partial.data_ptr<A>(), coef.data_ptr<A>(), pr.C, pr.G,
                                    static_cast<int>(pr.cpg), static_cast<int>(pr.HW), static_cast<int>(D),
                                    static_cast<int>(part), backward_epilogue<Epi>(pr.act)));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_parameter_grads<T>(
      param_job<T>(partial.data_ptr<A>(), pr.rstd, coef.data_ptr<A>(), pr.dw, pr.db, pr.N, pr.C, pr.G, cluster,
                   kThreads, dev.sms),
      stream);
  return true;
}

template <typename T, typename I, typename Epi>
void run_short_path(const Problem<T>& pr, int sms, const at::TensorOptions& acc_opts, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  const int64_t slices = pr.N * pr.G, D = pr.cpg * pr.HW, rows = pr.N * pr.C;
  const ShortPlan p = make_short_plan(slices, D, pr.N, pr.C, pr.HW, sms);
  at::Tensor partial = at::empty({slices * p.splits * kSums}, acc_opts);  // (N * G, splits, kSums)
  at::Tensor coef = at::empty({slices * kCoefs}, acc_opts);              // (N * G, kCoefs)
  A* pp = partial.data_ptr<A>();
  A* cp = coef.data_ptr<A>();
  short_slice_sums<T, I, Epi><<<static_cast<unsigned>(p.sum_blocks), kThreads, 0, stream>>>(
      pr.x, pr.dy, pr.w, pr.mean, pp, static_cast<I>(slices * p.splits), static_cast<I>(p.splits),
      static_cast<I>(p.chunk), static_cast<I>(D), static_cast<I>(pr.HW), static_cast<I>(pr.G), p.lanes, pr.b,
      pr.rstd, backward_epilogue<Epi>(pr.act));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_coefficients<T>(pr, pp, /*weighted=*/false, p.splits, p.splits, cp, stream);
  const bool params = pr.dw || pr.db;
  at::Tensor param_partial;
  if (params) param_partial = at::empty({pr.C * p.k * 2}, acc_opts.dtype(at::kDouble));  // (k * C, 2)
  short_grad_input<T, I, Epi><<<static_cast<unsigned>(p.grad_blocks), kThreads, 0, stream>>>(
      pr.x, pr.dy, pr.dx, pr.w, pr.mean, pr.rstd, cp, params ? param_partial.data_ptr<double>() : nullptr,
      static_cast<I>(rows), static_cast<I>(pr.C), static_cast<I>(pr.cpg), static_cast<I>(pr.HW),
      static_cast<I>(pr.C * p.k), p.seg, pr.b, backward_epilogue<Epi>(pr.act));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (params) {
    short_parameter_grads<T><<<static_cast<unsigned>(ceil_div(pr.C, kThreads)), kThreads, 0, stream>>>(
        param_partial.data_ptr<double>(), pr.dw, pr.db, pr.C, p.k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

template <typename T, typename Epi>
void run_backward_typed(const Problem<T>& pr, const at::Tensor& x, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  const int sms = sm_count(x.get_device());
  const at::TensorOptions acc_opts = x.options().dtype(c10::CppTypeToScalarType<A>::value);
  if (pr.HW >= kRowPathMinHW) {
    const auto offset16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16; };
    const bool aligned = offset16(pr.x) == 0 && offset16(pr.dy) == 0 && (pr.dx == nullptr || offset16(pr.dx) == 0);
    // The row path's chunks take vectors wherever the three tensors share their offset from a 16-byte boundary
    // (GROUPNORM_INLINE_EDGE_VECTORS=0: only where every row starts at one, for benchmarks).
    const bool shared_offset =
        offset16(pr.x) == offset16(pr.dy) && (pr.dx == nullptr || offset16(pr.dx) == offset16(pr.x));
    const bool vectors =
        (aligned && pr.HW % gn_inline::vec16<T>() == 0) || (shared_offset && gn_inline::edge_vectors_enabled());
    const PathOverride path = backward_path_override();
    if (path == PathOverride::kRow ||
        !try_resident_path<T, Epi>(pr, aligned, path == PathOverride::kAuto, acc_opts, x.get_device(), stream))
      run_row_path<T, Epi>(pr, vectors, sms, acc_opts, stream);
  } else if (x.numel() < (int64_t(1) << 30)) {  // every index of the short path fits int32 with room
    run_short_path<T, int32_t, Epi>(pr, sms, acc_opts, stream);
  } else {
    run_short_path<T, int64_t, Epi>(pr, sms, acc_opts, stream);
  }
}

// x, dy: (N, C, *) contiguous; w, bias: (C,) in the compute type or T, or undefined; dw, db likewise; act: the
// forward's activation (plain GroupNorm runs the Identity instantiation, any activation the Runtime one).
template <typename T>
void run_backward(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& w, const at::Tensor& bias,
                  const at::Tensor& mean, const at::Tensor& rstd, int64_t G, at::Tensor& dx, at::Tensor& dw,
                  at::Tensor& db, const gn_act::Params& act, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  Problem<T> pr{};
  pr.x = x.data_ptr<T>();
  pr.dy = dy.data_ptr<T>();
  pr.dx = dx.defined() ? dx.data_ptr<T>() : nullptr;
  pr.w = w.defined() ? Param<T>::of(w) : Param<T>{};
  pr.b = bias.defined() ? Param<T>::of(bias) : Param<T>{};
  pr.act = act;
  pr.mean = mean.data_ptr<A>();
  pr.rstd = rstd.data_ptr<A>();
  pr.dw = dw.defined() ? ParamGrad<T>::of(dw) : ParamGrad<T>{};
  pr.db = db.defined() ? ParamGrad<T>::of(db) : ParamGrad<T>{};
  pr.N = x.size(0);
  pr.C = x.size(1);
  pr.G = G;
  pr.cpg = pr.C / G;
  pr.HW = x.numel() / (pr.N * pr.C);
  if (act.kind == gn_act::kNone) run_backward_typed<T, gn_act::Identity>(pr, x, stream);
  else run_backward_typed<T, gn_act::Runtime>(pr, x, stream);
}

""" + CHANNELS_LAST_BACKWARD_CUDA + r"""
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t num_groups, std::array<bool, 3> output_mask,
    const std::optional<at::Tensor>& bias, int64_t activation, double act_alpha, double act_beta) {
  TORCH_CHECK(input.is_cuda(), "group_norm_backward_cuda: expected a CUDA input");
  check_backward_args(grad_out, input, mean, rstd, weight, num_groups, bias);
  const gn_act::Params act = backward_activation(activation, act_alpha, act_beta);
  TORCH_CHECK_NOT_IMPLEMENTED(dispatched_type(input.scalar_type()),
                              gn_inline_msg::not_implemented_for("group_norm_backward_cuda", input.scalar_type()));
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t C = input.size(1);
  const at::ScalarType acc = stats_type(input.scalar_type());
  const at::ScalarType pdt = param_grad_type(input, weight);
  BackwardOutputs out = allocate_backward_outputs(input, weight, output_mask);
  at::Tensor &dx = out.dx, &dw = out.dw, &dbias = out.db;
  if (out.complete) return {dx, dw, dbias};
  // A channels-last input is read in place, grad_out in the same layout (copied into it if it has another), and
  // grad_input is written in that layout; anything else goes through the NCHW kernels.
  const bool channels_last = channels_last_input(input);
  const at::Tensor x = channels_last ? input : input.contiguous();
  const at::Tensor dy = channels_last ? grad_out.contiguous(channels_last_format(input)) : grad_out.contiguous();
  const at::Tensor m = mean.contiguous();
  const at::Tensor r = rstd.contiguous();
  // The kernels read a weight or bias, and write their gradients, in the compute type or in the input's own
  // dtype (a half model's parameters: no conversion launches around the kernels); any other dtype goes
  // through the compute type.
  const auto in_place = [&](at::ScalarType t) { return t == acc || t == input.scalar_type(); };
  const auto readable = [&](const at::Tensor& t) {
    return in_place(t.scalar_type()) ? t.contiguous() : t.to(acc).contiguous();
  };
  const bool affine = weight.has_value() && weight->defined();
  const at::Tensor w = affine ? readable(*weight) : at::Tensor();
  // The bias only enters through z (read with an activation).
  const bool with_bias = act.kind != gn_act::kNone && bias.has_value() && bias->defined();
  const at::Tensor b = with_bias ? readable(*bias) : at::Tensor();
  at::Tensor dw_acc = output_mask[1] ? (in_place(pdt) ? dw : at::empty({C}, input.options().dtype(acc))) : at::Tensor();
  at::Tensor db_acc = output_mask[2] ? (in_place(pdt) ? dbias : at::empty({C}, input.options().dtype(acc))) : at::Tensor();
  // Groups of one element (C == G, HW == 1): the normalised value is 0 and so is dx, exactly; the kernels'
  // a * dy + coef_x * (x - m) + coef_1 would leave the rounding of a * dy there (as the CPU kernels did). The
  // kernels skip dx (they only compute the parameter gradients) and it is zero-filled.
  const bool single_element_groups = C / num_groups * (input.numel() / (input.size(0) * C)) == 1;
  // in the input's layout (allocate_backward_outputs)
  at::Tensor dx_out = output_mask[0] && !single_element_groups ? dx : at::Tensor();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_backward_cuda", [&] {
    if (channels_last) run_backward_channels_last<scalar_t>(x, dy, w, b, m, r, num_groups, dx_out, dw_acc, db_acc, act, stream);
    else run_backward<scalar_t>(x, dy, w, b, m, r, num_groups, dx_out, dw_acc, db_acc, act, stream);
  });
  if (output_mask[0] && single_element_groups) dx.zero_();
  if (output_mask[1] && !in_place(pdt)) dw.copy_(dw_acc);
  if (output_mask[2] && !in_place(pdt)) dbias.copy_(db_acc);
  return {dx, dw, dbias};
}

}  // namespace gn_inline_backward

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("group_norm_backward", &gn_inline_backward::group_norm_backward_cuda);
}
"""
