"""CUDA source of `group_norm_backward` (schema and math: `group_norm_backward_cpu`).

The input and grad_out are made contiguous (N, C, HW); row r = n * C + c is the HW elements of one
channel of one sample, and the (n, g) slice holds rows g * C/G .. (g + 1) * C/G - 1 of sample n, so
slice = row / (C / G). Four launches, x and dy read twice in all, dx written once:

  1 channel sums     per row: ds = sum dy (x - m), db = sum dy, dm = sum (x - m), m the saved mean
                     of the row's slice (one read of x and dy)
  2 coefficients     per slice, one warp: delta = sum dm / D (the saved mean's rounding), S, B, and
                     coef_x, coef_1 of the formulas in `group_norm_backward_cpu`
  3 parameter grads  per channel: dw = sum_n (ds - delta db) rstd, db_param = sum_n db (when asked for)
  4 grad input       dx = rstd * w[c] * dy + coef_x * (x - m) + coef_1  (second read, one write)

Steps 1 and 4 have two shapes:
  row path      (HW >= 1024) a grid of rows * splits CTAs, each on a contiguous chunk of one row with
                16-byte vector accesses; per-CTA constants, no per-element index arithmetic. Split
                partial sums go to a (rows, splits, 3) buffer that steps 2 and 3 fold (deterministic,
                no atomics).
  segment path  (HW < 1024) a power-of-two segment of 1-32 lanes per row, scalar coalesced accesses,
                segment sums by warp shuffles: a CTA per row would leave most lanes idle.

Indices: the row path works in int64 (its per-element cost is the loads, and a row may pass 2^31
elements); the segment path in int32 whenever the tensor has fewer than 2^30 elements, for cheaper
per-row divisions.

Numerics: each thread adds one unrolled batch of elements in the compute type (float, or double for
double), folds it into double, CTAs combine in double; ds is taken about the saved mean, so it does not
cancel when |mean| >> std, and delta removes the saved mean's float32 rounding. Offsets are 64-bit
wherever a tensor can pass 2^31 elements.
"""

from .common_cuda import COMMON_CUDA_HEADER
from .group_norm_backward_cpu import GROUP_NORM_BACKWARD_CHECKS

# Registers the CUDA kernel under GN_NAMESPACE (see group_norm_cpu.with_namespace).
GROUP_NORM_BACKWARD_CUDA_TEMPLATE = COMMON_CUDA_HEADER + GROUP_NORM_BACKWARD_CHECKS + r"""
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <algorithm>
#include <array>

namespace gn_inline_backward {

using gn_inline::Vec;
using gn_inline::load_vec;
using gn_inline::store_vec_streaming;

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

constexpr int kThreads = 256;       // CTA size of every kernel here
constexpr int kUnroll = 4;          // vectors per tensor in flight per thread (row path)
constexpr int64_t kRowPathMinHW = 1024;

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

// ---------------------------------------------------------------------------------- 1. channel sums

// Row path. CTA b = row * splits + split sums chunk [split * chunk, +chunk) of its row: consecutive CTAs
// stream consecutive memory.
// x, dy: (rows, HW); mean: (N * G,); partial: (rows, splits, kSums) holding (ds, db, dm).
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) row_channel_sums(
    const T* __restrict__ x, const T* __restrict__ dy, const typename Acc<T>::type* __restrict__ mean,
    typename Acc<T>::type* __restrict__ partial, int64_t cpg, int64_t HW, int64_t chunk, int64_t splits) {
  using A = typename Acc<T>::type;
  __shared__ double scratch[3 * 32];
  const int64_t cta = blockIdx.x;
  const int64_t row = cta / splits;
  const T* xr = x + row * HW;
  const T* dyr = dy + row * HW;
  const A mu = mean[row / cpg];
  const int64_t begin = (cta - row * splits) * chunk;
  const int64_t end = begin + chunk < HW ? begin + chunk : HW;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * VEC;
  double ds = 0, db = 0, dm = 0;
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
        const A g = static_cast<A>(gv[u].v[k]);
        const A d = static_cast<A>(xv[u].v[k]) - mu;
        ls += g * d;
        lb += g;
        lm += d;
      }
    ds += ls;
    db += lb;
    dm += lm;
  }
  for (; j < end; j += stride) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + j);
    const Vec<T, VEC> gv = load_vec<T, VEC>(dyr + j);
    A ls = 0, lb = 0, lm = 0;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const A g = static_cast<A>(gv.v[k]);
      const A d = static_cast<A>(xv.v[k]) - mu;
      ls += g * d;
      lb += g;
      lm += d;
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

// Segment path: `seg` lanes (a power of two <= 32) per row, grid-stride over rows. Each warp works on
// 32 / seg consecutive rows per step, all its lanes taking part in every shuffle.
// partial: (rows, 1, kSums).
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) segment_channel_sums(
    const T* __restrict__ x, const T* __restrict__ dy, const typename Acc<T>::type* __restrict__ mean,
    typename Acc<T>::type* __restrict__ partial, I rows, I cpg, I HW, int seg) {
  using A = typename Acc<T>::type;
  const int lane = threadIdx.x & 31;
  const int seg_lane = lane & (seg - 1);
  const I rows_per_warp = 32 / seg;
  const I warp = (static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x)) >> 5;
  const I warps = (static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) >> 5;
  for (I first = warp * rows_per_warp; first < rows; first += warps * rows_per_warp) {
    const I row = first + lane / seg;
    A ds = 0, db = 0, dm = 0;
    if (row < rows) {
      const A mu = mean[row / cpg];
      const T* xr = x + row * HW;
      const T* dyr = dy + row * HW;
      for (I i = seg_lane; i < HW; i += seg) {
        const A g = static_cast<A>(dyr[i]);
        const A d = static_cast<A>(xr[i]) - mu;
        ds += g * d;
        db += g;
        dm += d;
      }
    }
    for (int offset = seg >> 1; offset > 0; offset >>= 1) {  // stays inside the segment
      ds += __shfl_xor_sync(0xffffffffu, ds, offset);
      db += __shfl_xor_sync(0xffffffffu, db, offset);
      dm += __shfl_xor_sync(0xffffffffu, dm, offset);
    }
    if (row < rows && seg_lane == 0) {
      A* p = partial + static_cast<int64_t>(row) * kSums;  // rows * kSums may pass 2^31 with I = int32
      p[0] = ds;
      p[1] = db;
      p[2] = dm;
    }
  }
}

// --------------------------------------------------------------------------------- 2. coefficients

// One warp per (n, g) slice; the slice's rows are consecutive, so its partials are the contiguous
// cpg * splits triples from slice * cpg * splits. w: (C,) or null; coef: (N * G, kCoefs) holding
// (coef_x, coef_1, delta).
template <typename A>
__global__ void __launch_bounds__(kThreads) group_coefficients(
    const A* __restrict__ partial, const A* __restrict__ w, const A* __restrict__ rstd, A* __restrict__ coef,
    int64_t slices, int64_t G, int64_t cpg, int64_t splits, double D) {
  const int64_t slice = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (slice >= slices) return;  // the whole warp leaves together
  const A* p = partial + slice * cpg * splits * kSums;
  const A* wg = w ? w + (slice % G) * cpg : nullptr;
  double S0 = 0, B = 0, M = 0;  // S0 = sum_c w ds (about the saved mean)
  for (int64_t k = lane; k < cpg * splits; k += 32) {
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

// CTA of 32 x 8 threads: x picks one of 32 channels, y strides over the samples; the 8 partial
// sums per channel meet in shared memory. coef: (N * G, kCoefs); dw, db: (C,) or null (not asked for).
template <typename A>
__global__ void __launch_bounds__(kThreads) parameter_grads(
    const A* __restrict__ partial, const A* __restrict__ rstd, const A* __restrict__ coef, A* __restrict__ dw,
    A* __restrict__ db, int64_t N, int64_t C, int64_t G, int64_t cpg, int64_t splits) {
  __shared__ double sums[2][8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  double sw = 0, sb = 0;
  if (c < C) {
    for (int64_t n = ty; n < N; n += 8) {
      const A* p = partial + (n * C + c) * splits * kSums;
      double ds = 0, dsum = 0;
      for (int64_t s = 0; s < splits; ++s) {
        ds += static_cast<double>(p[kSums * s]);
        dsum += static_cast<double>(p[kSums * s + 1]);
      }
      const int64_t slice = n * G + c / cpg;
      const double delta = static_cast<double>(coef[kCoefs * slice + 2]);
      sw += (ds - delta * dsum) * static_cast<double>(rstd[slice]);
      sb += dsum;
    }
  }
  sums[0][ty][tx] = sw;
  sums[1][ty][tx] = sb;
  __syncthreads();
  if (ty == 0 && c < C) {
    for (int k = 1; k < 8; ++k) {
      sw += sums[0][k][tx];
      sb += sums[1][k][tx];
    }
    if (dw) dw[c] = static_cast<A>(sw);
    if (db) db[c] = static_cast<A>(sb);
  }
}

// ---------------------------------------------------------------------------------- 4. grad input

// Per-row constants of dx = a * dy + coef_x * (x - mean) + coef_1.
template <typename A>
struct RowCoefficients {
  A a, mean, coef_x, coef_1;
};

template <typename A>
__device__ __forceinline__ RowCoefficients<A> row_coefficients(int64_t row, int64_t C, int64_t cpg,
                                                               const A* __restrict__ w,
                                                               const A* __restrict__ mean,
                                                               const A* __restrict__ rstd,
                                                               const A* __restrict__ coef) {
  const int64_t slice = row / cpg;
  const A sigma = rstd[slice];
  return {w ? sigma * w[row % C] : sigma, mean[slice], coef[kCoefs * slice], coef[kCoefs * slice + 1]};
}

// Row path, the chunks of row_channel_sums walked from the last one: what step 1 read last is what L2
// still holds. dx: (rows, HW), written with streaming stores.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) row_grad_input(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
    const typename Acc<T>::type* __restrict__ w, const typename Acc<T>::type* __restrict__ mean,
    const typename Acc<T>::type* __restrict__ rstd, const typename Acc<T>::type* __restrict__ coef,
    int64_t C, int64_t cpg, int64_t HW, int64_t chunk, int64_t splits) {
  using A = typename Acc<T>::type;
  const int64_t cta = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
  const int64_t row = cta / splits;
  const int64_t offset = row * HW;
  const T* xr = x + offset;
  const T* dyr = dy + offset;
  T* dxr = dx + offset;
  const RowCoefficients<A> k = row_coefficients<A>(row, C, cpg, w, mean, rstd, coef);
  const int64_t begin = (cta - row * splits) * chunk;
  const int64_t end = begin + chunk < HW ? begin + chunk : HW;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * VEC;
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
      for (int e = 0; e < VEC; ++e)
        out.v[e] = static_cast<T>(k.a * static_cast<A>(gv[u].v[e]) +
                                  k.coef_x * (static_cast<A>(xv[u].v[e]) - k.mean) + k.coef_1);
      store_vec_streaming<T, VEC>(dxr + j + u * stride, out);
    }
  }
  for (; j < end; j += stride) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + j);
    const Vec<T, VEC> gv = load_vec<T, VEC>(dyr + j);
    Vec<T, VEC> out;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      out.v[e] = static_cast<T>(k.a * static_cast<A>(gv.v[e]) +
                                k.coef_x * (static_cast<A>(xv.v[e]) - k.mean) + k.coef_1);
    store_vec_streaming<T, VEC>(dxr + j, out);
  }
}

// Segment path: `seg` lanes per row, grid-stride over rows (no shuffles, so no warp-uniform loop).
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) segment_grad_input(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
    const typename Acc<T>::type* __restrict__ w, const typename Acc<T>::type* __restrict__ mean,
    const typename Acc<T>::type* __restrict__ rstd, const typename Acc<T>::type* __restrict__ coef,
    I rows, I C, I cpg, I HW, int seg) {
  using A = typename Acc<T>::type;
  const I thread = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  const I segments = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x) / seg;
  const I seg_lane = thread & (seg - 1);
  for (I row = thread / seg; row < rows; row += segments) {
    const RowCoefficients<A> k = row_coefficients<A>(row, C, cpg, w, mean, rstd, coef);
    const I offset = row * HW;
    for (I i = seg_lane; i < HW; i += seg) {
      dx[offset + i] = static_cast<T>(k.a * static_cast<A>(dy[offset + i]) +
                                      k.coef_x * (static_cast<A>(x[offset + i]) - k.mean) + k.coef_1);
    }
  }
}

// ------------------------------------------------------------------------------------------ host

// Multiprocessor count of a device, asked once per device (not through ATen/cuda/CUDAContext.h, whose
// includes need the cuSPARSE/cuBLAS headers that a bare toolkit may lack).
inline int sm_count(int device) {
  static int cached[64] = {0};
  if (device >= 0 && device < 64 && cached[device]) return cached[device];
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < 64) cached[device] = sms;
  return sms;
}

// How steps 1 and 4 cover the (rows, HW) problem.
struct LaunchPlan {
  bool row_path;
  int vec;          // row path: elements per access (1 when rows are not 16-byte aligned)
  int64_t splits;   // row path: CTAs per row
  int64_t chunk;    // row path: elements per CTA, a multiple of 32 * vec
  int seg;          // segment path: lanes per row
  int64_t blocks;   // segment path: grid size
};

inline LaunchPlan make_plan(int64_t rows, int64_t HW, int vec16, bool aligned, int sms) {
  LaunchPlan p{};
  const int64_t target_ctas = static_cast<int64_t>(sms) * 32;  // ~4 waves of 8 resident 256-thread CTAs
  if (HW >= kRowPathMinHW) {
    p.row_path = true;
    p.vec = (aligned && HW % vec16 == 0) ? vec16 : 1;
    // Chunks of ~16K elements keep the grid many waves deep (a short tail), each CTA still streaming
    // 64 KB or more per tensor; with few rows, rows are split further, down to 2K elements per CTA.
    int64_t splits = ceil_div(HW, 16384);
    if (rows * splits < target_ctas) splits = std::max(splits, std::min(ceil_div(target_ctas, rows), HW / 2048));
    splits = std::max<int64_t>(1, splits);
    const int64_t quantum = 32 * p.vec;
    p.chunk = ceil_div(ceil_div(HW, splits), quantum) * quantum;
    p.splits = ceil_div(HW, p.chunk);
  } else {
    p.row_path = false;
    int seg = 1;
    while (seg < 32 && seg * 4 < HW) seg <<= 1;  // about 4 elements per lane, at most 32 lanes
    p.seg = seg;
    p.splits = 1;
    p.blocks = std::max<int64_t>(1, std::min(ceil_div(rows * seg, kThreads), target_ctas));
  }
  return p;
}

template <typename T, int VEC>
void launch_row_sums(const T* x, const T* dy, const typename Acc<T>::type* mean, typename Acc<T>::type* partial,
                     int64_t rows, int64_t cpg, int64_t HW, const LaunchPlan& p, cudaStream_t stream) {
  row_channel_sums<T, VEC><<<static_cast<unsigned>(rows * p.splits), kThreads, 0, stream>>>(
      x, dy, mean, partial, cpg, HW, p.chunk, p.splits);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int VEC>
void launch_row_grad_input(const T* x, const T* dy, T* dx, const typename Acc<T>::type* w,
                           const typename Acc<T>::type* mean, const typename Acc<T>::type* rstd,
                           const typename Acc<T>::type* coef, int64_t rows, int64_t C, int64_t cpg, int64_t HW,
                           const LaunchPlan& p, cudaStream_t stream) {
  row_grad_input<T, VEC><<<static_cast<unsigned>(rows * p.splits), kThreads, 0, stream>>>(
      x, dy, dx, w, mean, rstd, coef, C, cpg, HW, p.chunk, p.splits);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Steps 1 to 4 for one dtype. x, dy: contiguous (N, C, HW); w: (C,) in the compute type or undefined;
// mean, rstd: contiguous (N, G); dx, dw, db: outputs or undefined when not asked for.
template <typename T>
void run_backward(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& w, const at::Tensor& mean,
                  const at::Tensor& rstd, int64_t G, at::Tensor& dx, at::Tensor& dw, at::Tensor& db,
                  cudaStream_t stream) {
  using A = typename Acc<T>::type;
  constexpr int V = gn_inline::vec16<T>();
  const int64_t N = x.size(0), C = x.size(1), cpg = C / G;
  const int64_t rows = N * C, HW = x.numel() / rows, slices = N * G;
  const T* xp = x.data_ptr<T>();
  const T* dyp = dy.data_ptr<T>();
  T* dxp = dx.defined() ? dx.data_ptr<T>() : nullptr;
  const auto is16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool aligned = is16(xp) && is16(dyp) && (dxp == nullptr || is16(dxp));
  const int sms = sm_count(x.get_device());
  const LaunchPlan p = make_plan(rows, HW, V, aligned, sms);
  const A* mp = mean.data_ptr<A>();
  const A* rp = rstd.data_ptr<A>();
  const A* wp = w.defined() ? w.data_ptr<A>() : nullptr;
  at::Tensor partial = at::empty({rows * p.splits * kSums}, x.options().dtype(c10::CppTypeToScalarType<A>::value));
  A* pp = partial.data_ptr<A>();
  // Short-row path indices in int32 (cheaper divisions per row) when every element index fits with room.
  const bool small_tensor = x.numel() < (int64_t(1) << 30);

  // 1. channel sums
  if (p.row_path) {
    if (p.vec == V) launch_row_sums<T, V>(xp, dyp, mp, pp, rows, cpg, HW, p, stream);
    else launch_row_sums<T, 1>(xp, dyp, mp, pp, rows, cpg, HW, p, stream);
  } else if (small_tensor) {
    segment_channel_sums<T, int32_t><<<static_cast<unsigned>(p.blocks), kThreads, 0, stream>>>(
        xp, dyp, mp, pp, static_cast<int32_t>(rows), static_cast<int32_t>(cpg), static_cast<int32_t>(HW), p.seg);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    segment_channel_sums<T, int64_t><<<static_cast<unsigned>(p.blocks), kThreads, 0, stream>>>(
        xp, dyp, mp, pp, rows, cpg, HW, p.seg);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // 2. coefficients (delta is needed by step 3 too)
  at::Tensor coef = at::empty({slices * kCoefs}, partial.options());
  A* cp = coef.data_ptr<A>();
  group_coefficients<A><<<static_cast<unsigned>(ceil_div(slices * 32, kThreads)), kThreads, 0, stream>>>(
      pp, wp, rp, cp, slices, G, cpg, p.splits, static_cast<double>(cpg) * static_cast<double>(HW));
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 3. parameter grads
  if (dw.defined() || db.defined()) {
    parameter_grads<A><<<static_cast<unsigned>(ceil_div(C, 32)), kThreads, 0, stream>>>(
        pp, rp, cp, dw.defined() ? dw.data_ptr<A>() : nullptr, db.defined() ? db.data_ptr<A>() : nullptr, N, C,
        G, cpg, p.splits);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (dxp == nullptr) return;

  // 4. grad input
  if (p.row_path) {
    if (p.vec == V) launch_row_grad_input<T, V>(xp, dyp, dxp, wp, mp, rp, cp, rows, C, cpg, HW, p, stream);
    else launch_row_grad_input<T, 1>(xp, dyp, dxp, wp, mp, rp, cp, rows, C, cpg, HW, p, stream);
  } else if (small_tensor) {
    segment_grad_input<T, int32_t><<<static_cast<unsigned>(p.blocks), kThreads, 0, stream>>>(
        xp, dyp, dxp, wp, mp, rp, cp, static_cast<int32_t>(rows), static_cast<int32_t>(C), static_cast<int32_t>(cpg),
        static_cast<int32_t>(HW), p.seg);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    segment_grad_input<T, int64_t><<<static_cast<unsigned>(p.blocks), kThreads, 0, stream>>>(
        xp, dyp, dxp, wp, mp, rp, cp, rows, C, cpg, HW, p.seg);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t num_groups, std::array<bool, 3> output_mask) {
  TORCH_CHECK(input.is_cuda(), "group_norm_backward_cuda: expected a CUDA input");
  check_backward_args(grad_out, input, mean, rstd, weight, num_groups);
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t N = input.size(0), C = input.size(1);
  const at::ScalarType acc = stats_type(input.scalar_type());
  const at::ScalarType pdt = param_grad_type(input, weight);
  at::Tensor dx = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::empty({0}, input.options());
  at::Tensor dw = at::empty({output_mask[1] ? C : 0}, input.options().dtype(pdt));
  at::Tensor dbias = at::empty({output_mask[2] ? C : 0}, input.options().dtype(pdt));
  if (!output_mask[0] && !output_mask[1] && !output_mask[2]) return {dx, dw, dbias};
  if (input.numel() == 0) {  // no elements: every sum is zero
    dw.zero_();
    dbias.zero_();
    return {dx, dw, dbias};
  }
  const at::Tensor x = input.contiguous();
  const at::Tensor dy = grad_out.contiguous();
  const at::Tensor m = mean.contiguous();
  const at::Tensor r = rstd.contiguous();
  const bool affine = weight.has_value() && weight->defined();
  const at::Tensor w = affine ? weight->to(acc).contiguous() : at::Tensor();
  // dw / db are accumulated in the compute type and converted after when the weight has another dtype.
  at::Tensor dw_acc = output_mask[1] ? (pdt == acc ? dw : at::empty({C}, input.options().dtype(acc))) : at::Tensor();
  at::Tensor db_acc = output_mask[2] ? (pdt == acc ? dbias : at::empty({C}, input.options().dtype(acc))) : at::Tensor();
  at::Tensor dx_out = output_mask[0] ? dx : at::Tensor();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_backward_cuda", [&] {
    run_backward<scalar_t>(x, dy, w, m, r, num_groups, dx_out, dw_acc, db_acc, stream);
  });
  if (output_mask[1] && pdt != acc) dw.copy_(dw_acc);
  if (output_mask[2] && pdt != acc) dbias.copy_(db_acc);
  return {dx, dw, dbias};
}

}  // namespace gn_inline_backward

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("group_norm_backward", &gn_inline_backward::group_norm_backward_cuda);
}
"""
