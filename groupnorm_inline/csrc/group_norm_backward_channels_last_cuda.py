"""CUDA source: `group_norm_backward` of a channels-last input (NHWC, NDHWC), read in place, grad_input in its layout.

Spliced into the backward's translation unit (group_norm_backward_cuda.py), inside its namespace: it reuses the
NCHW steps 2 and 3 (group_coefficients, parameter_grads_block) and the math of `group_norm_backward_cpu`. x, dy
and dx are (N, HW, C) with C fastest, cut into the tiles of channels_last_common_cuda.py (each thread owns one
vector of channels and walks rows, so every per-channel constant sits in registers). Four launches:

  1 cl_sums        per tile and channel: ds = sum dz (x - m), db = sum dz, dm = sum (x - m), dz = dy * act'(z)
                   (dy without an activation); unrolled batches added in the compute type, folded into double,
                   rows of the CTA added per channel. partial: (N, hw_tiles, C, 3) in the compute type.
  2 cl_fold        per (n, c): the hw_tiles partials -> chan (N, C, 3), the layout of the NCHW row path's
                   per-row sums with one split, so steps 3 and 4 are the NCHW kernels.
  3 group_coefficients   per (n, g): delta, coef_x, coef_1.
  4 parameter grads  per channel: dw, db (only when asked for), in the first CTAs of step 5's launch.
  5 cl_grad_input  dx = a[c] dz + coef_x (x - m) + coef_1; each thread walks its rows from the end of the tile
                   (step 1 streams every tile at once, so L2 holds the end of each; all of x and dy when they
                   fit), tiles in reverse order; streaming stores.

Traffic: x and dy read twice (the second time partly or wholly from L2), dx written once; scratch O(ctas * C).
The grid is sized to a few resident CTAs per SM (tiling), enough loads in flight for HBM, while keeping the
per-tile partials a few percent of the data.
"""

CHANNELS_LAST_BACKWARD_CUDA = r"""
namespace cl_backward {

using gn_cl::Tiling;
using gn_cl::Tile;
using gn_cl::kUnroll;

// Step 1. x, dy: (N, HW, C); mean, rstd: (N * G,); w, b: (C,) or null (read only to form z with an activation);
// partial: (N, hw_tiles, C, kSums). Dynamic shared memory: blockDim.x * VEC * kSums values of A.
template <typename T, int VEC, typename Epi>
__global__ void __launch_bounds__(gn_cl::kMaxThreads) cl_sums(
    const T* __restrict__ x, const T* __restrict__ dy, const typename Acc<T>::type* __restrict__ mean,
    const typename Acc<T>::type* __restrict__ rstd, Param<T> w, Param<T> b,
    typename Acc<T>::type* __restrict__ partial, Tiling t, int64_t G,
    int64_t cpg, Epi epi) {
  using A = typename Acc<T>::type;
  extern __shared__ __align__(16) unsigned char cl_sums_smem[];
  A* red = reinterpret_cast<A*>(cl_sums_smem);  // (rows, cw, kSums)
  const Tile p = gn_cl::tile_of(t, blockIdx.x);
  const int col = static_cast<int>(threadIdx.x) % t.tc, r0 = static_cast<int>(threadIdx.x) / t.tc;
  const int64_t tile_c0 = p.c_tile * t.cw;
  const int64_t tile_c1 = tile_c0 + t.cw < t.C ? tile_c0 + t.cw : t.C;
  const int64_t c = tile_c0 + static_cast<int64_t>(col) * VEC;
  double ds[VEC], db[VEC], dm[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) ds[k] = db[k] = dm[k] = 0.0;
  if (c < tile_c1) {
    A mu[VEC], za[VEC], zb[VEC];  // z = (x - mu) * za + zb
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const int64_t slice = p.n * G + (c + k) / cpg;
      mu[k] = mean[slice];
      za[k] = A(1);
      zb[k] = A(0);
      if constexpr (!Epi::kIsIdentity) {
        za[k] = rstd[slice] * (w ? w[c + k] : A(1));
        zb[k] = b ? b[c + k] : A(0);
      }
    }
    const int64_t step = static_cast<int64_t>(t.rows) * t.C;
    int64_t r = p.row0 + r0;
    const int64_t offset = (p.n * t.HW + r) * t.C + c;
    const T* xp = x + offset;
    const T* gp = dy + offset;
    for (; r + (kUnroll - 1) * t.rows < p.row1; r += kUnroll * t.rows, xp += kUnroll * step, gp += kUnroll * step) {
      Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        xv[u] = load_vec<T, VEC>(xp + u * step);
        gv[u] = load_vec<T, VEC>(gp + u * step);
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        A ls = 0, lb = 0, lm = 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const A d = static_cast<A>(xv[u].v[k]) - mu[k];
          const A g = grad_z(epi, static_cast<A>(gv[u].v[k]), d, za[k], zb[k]);
          ls += g * d;
          lb += g;
          lm += d;
        }
        ds[k] += ls;
        db[k] += lb;
        dm[k] += lm;
      }
    }
    if (r < p.row1) {  // fewer than kUnroll rows left: one batch of guarded loads, not a chain of single ones
      Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (r + u * t.rows < p.row1) {
          xv[u] = load_vec<T, VEC>(xp + u * step);
          gv[u] = load_vec<T, VEC>(gp + u * step);
        }
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        A ls = 0, lb = 0, lm = 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (r + u * t.rows >= p.row1) continue;
          const A d = static_cast<A>(xv[u].v[k]) - mu[k];
          const A g = grad_z(epi, static_cast<A>(gv[u].v[k]), d, za[k], zb[k]);
          ls += g * d;
          lb += g;
          lm += d;
        }
        ds[k] += ls;
        db[k] += lb;
        dm[k] += lm;
      }
    }
  }
  const int64_t cw = t.cw;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    A* cell = red + kSums * (static_cast<int64_t>(r0) * cw + static_cast<int64_t>(col) * VEC + k);
    cell[0] = static_cast<A>(ds[k]);
    cell[1] = static_cast<A>(db[k]);
    cell[2] = static_cast<A>(dm[k]);
  }
  __syncthreads();
  const int64_t width = tile_c1 - tile_c0;
  A* out = partial + ((p.n * t.hw_tiles + p.hw_tile) * t.C + tile_c0) * kSums;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    double a = 0, bb = 0, m = 0;
    for (int rr = 0; rr < t.rows; ++rr) {
      const A* cell = red + kSums * (rr * cw + j);
      a += static_cast<double>(cell[0]);
      bb += static_cast<double>(cell[1]);
      m += static_cast<double>(cell[2]);
    }
    out[kSums * j] = static_cast<A>(a);
    out[kSums * j + 1] = static_cast<A>(bb);
    out[kSums * j + 2] = static_cast<A>(m);
  }
}

// Step 2. CTA (n, channel block): 32 channels x 8 lanes over the hw tiles, met in shared memory.
// partial: (N, hw_tiles, C, kSums) -> chan: (N, C, kSums).
template <typename A>
__global__ void __launch_bounds__(256) cl_fold(const A* __restrict__ partial, A* __restrict__ chan, int64_t C,
                                               int64_t hw_tiles, int64_t c_blocks) {
  __shared__ double sums[kSums][8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t n = blockIdx.x / c_blocks;
  const int64_t c = (blockIdx.x - n * c_blocks) * 32 + tx;
  double s[kSums] = {0.0, 0.0, 0.0};
  if (c < C) {
    for (int64_t h = ty; h < hw_tiles; h += 8) {
      const A* q = partial + ((n * hw_tiles + h) * C + c) * kSums;
#pragma unroll
      for (int e = 0; e < kSums; ++e) s[e] += static_cast<double>(q[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < kSums; ++e) sums[e][ty][tx] = s[e];
  __syncthreads();
  if (ty == 0 && c < C) {
#pragma unroll
    for (int e = 0; e < kSums; ++e) {
      double v = sums[e][0][tx];
      for (int k = 1; k < 8; ++k) v += sums[e][k][tx];
      chan[(n * C + c) * kSums + e] = static_cast<A>(v);
    }
  }
}

// Step 5. dx = a dz + coef_x (x - m) + coef_1 per channel, rows from the end of the tile. coef: (N * G, kCoefs).
// The first job.shape.ctas CTAs compute step 4's parameter gradients instead (no launch of their own).
template <typename T, int VEC, typename Epi>
__global__ void __launch_bounds__(gn_cl::kMaxThreads) cl_grad_input(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, Param<T> w, Param<T> b,
    const typename Acc<T>::type* __restrict__ mean,
    const typename Acc<T>::type* __restrict__ rstd, const typename Acc<T>::type* __restrict__ coef, Tiling t,
    int64_t G, int64_t cpg, Epi epi, ParamJob<T> job) {
  using A = typename Acc<T>::type;
  if (static_cast<int64_t>(blockIdx.x) < job.shape.ctas) {  // CTA-uniform
    __shared__ double param_sums[2 * gn_cl::kMaxThreads];
    parameter_grads_block<T>(job, blockIdx.x, param_sums);
    return;
  }
  const Tile p = gn_cl::tile_of(t, static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x);
  const int col = static_cast<int>(threadIdx.x) % t.tc, r0 = static_cast<int>(threadIdx.x) / t.tc;
  const int64_t c = p.c_tile * t.cw + static_cast<int64_t>(col) * VEC;
  if (c >= t.C) return;  // no barriers below
  A mu[VEC], a[VEC], zb[VEC], cx[VEC], c1[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int64_t slice = p.n * G + (c + k) / cpg;
    const A sigma = rstd[slice];
    mu[k] = mean[slice];
    a[k] = w ? sigma * w[c + k] : sigma;
    zb[k] = (!Epi::kIsIdentity && b) ? b[c + k] : A(0);
    cx[k] = coef[kCoefs * slice];
    c1[k] = coef[kCoefs * slice + 1];
  }
  // This thread's rows of the tile, walked from the last (what L2 still holds after step 1's one wave).
  const int64_t first = p.row0 + r0;
  const int64_t count = first < p.row1 ? (p.row1 - first + t.rows - 1) / t.rows : 0;
  if (count == 0) return;
  const int64_t step = -static_cast<int64_t>(t.rows) * t.C;
  const int64_t offset = (p.n * t.HW + first + (count - 1) * t.rows) * t.C + c;
  const T* xp = x + offset;
  const T* gp = dy + offset;
  T* op = dx + offset;
  auto grad = [&](const Vec<T, VEC>& xv, const Vec<T, VEC>& gv) {
    Vec<T, VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const A d = static_cast<A>(xv.v[k]) - mu[k];
      o.v[k] = static_cast<T>(a[k] * grad_z(epi, static_cast<A>(gv.v[k]), d, a[k], zb[k]) + cx[k] * d + c1[k]);
    }
    return o;
  };
  int64_t i = 0;
  for (; i + kUnroll <= count; i += kUnroll, xp += kUnroll * step, gp += kUnroll * step, op += kUnroll * step) {
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      xv[u] = load_vec<T, VEC>(xp + u * step);
      gv[u] = load_vec<T, VEC>(gp + u * step);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store_vec_streaming<T, VEC>(op + u * step, grad(xv[u], gv[u]));
  }
  if (i < count) {  // the last < kUnroll rows: one batch of guarded loads
    Vec<T, VEC> xv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u < count) {
        xv[u] = load_vec<T, VEC>(xp + u * step);
        gv[u] = load_vec<T, VEC>(gp + u * step);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u < count) store_vec_streaming<T, VEC>(op + u * step, grad(xv[u], gv[u]));
  }
}

// Rows per thread below which a tile would not amortise its per-channel partial sums (3 values per channel).
constexpr int kMinRowsPerThread = 8;
// CTAs per SM the sums pass is sized for, at most: each keeps 2 x kUnroll 16-byte loads per thread in flight
// (~32 KB per 256-thread CTA), so three per SM cover HBM latency, and fewer CTAs mean fewer partials.
constexpr int kCtasPerSm = 3;

template <typename T, int VEC, typename Epi>
void run(const Problem<T>& pr, int sms, const at::TensorOptions& acc_opts, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  // Threads per CTA depend on C only; the grid is one wave of the sums kernel (its registers bound occupancy).
  Tiling t = gn_cl::make_tiling(pr.N, pr.HW, pr.C, VEC, 1, kMinRowsPerThread);
  const int per_sm = gn_inline::resident_ctas_per_sm(
      reinterpret_cast<const void*>(cl_sums<T, VEC, Epi>), c10::cuda::current_device(), t.threads(),
      static_cast<size_t>(t.threads()) * VEC * kSums * sizeof(A));
  t = gn_cl::make_tiling(pr.N, pr.HW, pr.C, VEC, static_cast<int64_t>(sms) * std::min(std::max(per_sm, 1), kCtasPerSm),
                         kMinRowsPerThread);
  TORCH_CHECK(t.ctas() + pr.C <= 0x7fffffff,  // step 5's grid: the tiles and step 4's CTAs
              gn_inline_msg::cat("group_norm_backward_cuda: channels-last input of ", pr.N,
                                 " samples needs more CTAs than one launch takes"));
  const Epi epi = backward_epilogue<Epi>(pr.act);
  at::Tensor partial = at::empty({t.ctas() / t.c_tiles * pr.C * kSums}, acc_opts);  // (N, hw_tiles, C, kSums)
  at::Tensor chan = at::empty({pr.N * pr.C * kSums}, acc_opts);                     // (N, C, kSums)
  at::Tensor coef = at::empty({pr.N * pr.G * kCoefs}, acc_opts);                    // (N * G, kCoefs)
  A* pp = partial.data_ptr<A>();
  A* cp = chan.data_ptr<A>();
  A* kp = coef.data_ptr<A>();
  const size_t smem = static_cast<size_t>(t.threads()) * VEC * kSums * sizeof(A);
  cl_sums<T, VEC, Epi><<<static_cast<unsigned>(t.ctas()), t.threads(), smem, stream>>>(
      pr.x, pr.dy, pr.mean, pr.rstd, pr.w, pr.b, pp, t, pr.G, pr.cpg, epi);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t c_blocks = ceil_div(pr.C, 32);
  cl_fold<A><<<static_cast<unsigned>(pr.N * c_blocks), 256, 0, stream>>>(pp, cp, pr.C, t.hw_tiles, c_blocks);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_coefficients<T>(pr, cp, /*weighted=*/true, pr.cpg, 1, kp, stream);
  if (pr.dx == nullptr) {
    launch_parameter_grads<T>(param_job<T>(cp, pr.rstd, kp, pr.dw, pr.db, pr.N, pr.C, pr.G, 1, kThreads, sms), stream);
    return;
  }
  const ParamJob<T> job = param_job<T>(cp, pr.rstd, kp, pr.dw, pr.db, pr.N, pr.C, pr.G, 1, t.threads(), sms);
  cl_grad_input<T, VEC, Epi><<<static_cast<unsigned>(job.shape.ctas + t.ctas()), t.threads(), 0, stream>>>(
      pr.x, pr.dy, pr.dx, pr.w, pr.b, pr.mean, pr.rstd, kp, t, pr.G, pr.cpg, epi, job);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, typename Epi>
void run_typed(const Problem<T>& pr, int sms, const at::TensorOptions& acc_opts, cudaStream_t stream) {
  constexpr int V = gn_inline::vec16<T>();
  const auto is16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool vectorised = pr.C % V == 0 && is16(pr.x) && is16(pr.dy) && (pr.dx == nullptr || is16(pr.dx));
  if (vectorised) run<T, V, Epi>(pr, sms, acc_opts, stream);
  else run<T, 1, Epi>(pr, sms, acc_opts, stream);
}

}  // namespace cl_backward

// x, dy: (N, C, *) channels-last contiguous (both); dx: channels-last or undefined; the rest as run_backward.
template <typename T>
void run_backward_channels_last(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& w, const at::Tensor& bias,
                                const at::Tensor& mean, const at::Tensor& rstd, int64_t G, at::Tensor& dx,
                                at::Tensor& dw, at::Tensor& db, const gn_act::Params& act, cudaStream_t stream) {
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
  const int sms = sm_count(x.get_device());
  const at::TensorOptions acc_opts = x.options().dtype(c10::CppTypeToScalarType<A>::value);
  if (act.kind == gn_act::kNone) cl_backward::run_typed<T, gn_act::Identity>(pr, sms, acc_opts, stream);
  else cl_backward::run_typed<T, gn_act::Runtime>(pr, sms, acc_opts, stream);
}
"""
