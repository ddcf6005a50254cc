"""CUDA source: the GroupNorm forward of a channels-last input (NHWC, NDHWC), read in place, output in its layout.

Spliced into the forward's translation unit (group_norm_cuda.py) after the NCHW plans, whose helpers it uses
(ParamRef, SliceNorm, norm_from_sums, write_stats, device_info, make_epilogue). The tensor is (N, HW, C) with
C fastest; tiles and the thread-to-channel mapping are those of channels_last_common_cuda.py. Three steps:

  1 cl_stats     each CTA sums its tile: per thread, per channel of its vector, shifted sums of (x - K) and
                 (x - K)^2, K the first element of the channel's (n, g) group (as the NCHW kernels: no
                 cancellation when |mean| >> std); unrolled batches added in the compute type, folded into
                 double; then the CTA adds its rows per channel and its channels per group, writing one
                 (sum, sum of squares) pair per group it touches: partial (ctas, slots, 2) doubles.
                 Deterministic: fixed order everywhere, no atomics.
  2 cl_finalize  a few lanes per (n, g) (as many as its tiles need, up to a warp): adds the group's partials
                 over its tiles -> mean, rstd (N, G) in the compute type and (K, mean - K, rstd) for step 3.
  3 cl_apply     y = act((x - K) * a[c] + (b[c] - (mean - K) * a[c])), a[c] = rstd * w[c]: three constants per
                 channel held in registers, so the loop is one subtraction and one FMA per element (plus the
                 epilogue). Step 1's grid is one wave, every tile streamed at once, so L2 ends up holding the
                 last rows of every tile (all of x when it fits L2): each thread walks its rows from the last,
                 and the second read of x hits L2 where it can. Streaming stores keep y from evicting x.

One launch where it can: `cl_fused` runs the three steps as one cooperative launch (every CTA resident, grid-wide
barriers between the steps; each CTA then normalises the tile it summed, from the rows it read last). That
saves two launches and the finalize kernel's latency: 32.3 -> 26.1 us of kernel time at (2, 320, 128, 128) fp16
on an H100 (torch.compile's kernels: 27.5 us). It is taken whenever the tiles fit one resident wave of it (the grid
is sized to one wave anyway, so every input but those with more samples x channel tiles than resident CTAs);
the three launches serve the rest and devices without cooperative launches. Where every tile fits the SMs'
shared memory together (inputs up to ~25 MB on an H100), the single launch also keeps each thread's vectors in
shared memory from the statistics to the normalisation, so x is read once (`fused_plan`: kHeld, else kL2).
Predicted from the L2 re-read it removes: (2, 320, 128, 128) fp16 25.5 -> ~21 us; measured 24.6 us, and
(2, 1280, 32, 32) 18.3 -> 17.5, (64, 32, 16, 16) 11.7 -> 11.4: the re-read from L2 was a small part of the
single launch, whose time goes to the statistics pass's loads (fewer CTAs per SM when each holds its tile) and
to the two grid-wide barriers. Larger inputs (kPartial): the same grid as kL2, each thread holding its first rows
in the shared memory its SM's CTAs leave free, so the second read (the rows not held, the ones read last) needs
L2 to keep less of x (of a 64 MB input L2 served ~15 MB of the second read on an H100, by ncu): kernel 74.1 ->
62.2 us at (1, 128, 512, 512) fp16 on an H200, 40.5 -> 35.3 at (8, 320, 64, 64) fp32 (benchmarks/NOTES.md, "Large
channels-last inputs").

Several samples (few tiles a sample): after the first grid barrier each CTA of cl_fused folds the partial sums of
the groups its own tile touches (fold_tile_groups; every CTA in the same order, so all get the same constants) and
normalises at once: one grid barrier instead of two, no finalize round trip. Its L2 reads grow as ctas x tiles a
sample, so it is taken only where a lane's share of a group's partials is one batch of loads (fold_pays): 2-4 us
off (32, 128, 64, 64) fp16 and (16, 640, 32, 32) bf16 on an H200, 4-6 us lost where samples have ~130 tiles.

Loads in flight: a two-pass stream of 64 MB on an H100 takes 1.47x a copy with 2 CTAs of 256 threads per SM,
1.37x with 3, 1.36x with 4, 1.27x with 8 (4 16-byte loads per thread in flight; benchmarks/micro/stream_depth.cu).
The single launch's registers are the most any of its steps needs plus what the compiler keeps live across the
grid barriers; the tile's coordinates are recomputed after them (cl_fused), 124 -> 102 registers for half data,
84 -> 78 for float. Keeping the statistics' running sums in shared memory instead of double registers brought
half data to 80 (3 CTAs per SM instead of 2); at (1, 128, 512, 512) fp16 on H200s that build's kernel took
65.7 us partly held (the default) against 62.2 for the one kept, whose larger held share at 2 CTAs per SM
outweighed it (reading every row twice: 69.6 us against 74.1, on another machine), so the sums stay in registers.

Block plan first: where a channel tile of whole groups of one sample fits one CTA's registers (every row of it,
at most kBlockVecs 16-byte vectors per thread, at most kBlockMaxThreads threads: 32 KB) and all the CTAs are
resident at once (inputs of many small samples), `cl_block` runs a CTA per (sample, tile): it loads the whole
tile at once, sums it per channel, reduces the rows in shared memory, finalises its groups and normalises the
vectors it holds. One launch, no grid-wide barrier, no scratch, x read once. A sample too tall for one CTA is
split over a cluster of 2-16 CTAs, each holding its share of the rows and adding its peers' per-channel sums
through distributed shared memory (the smallest cluster that fits). The tile width is the widest whose CTAs still
cover every SM, else the narrowest. Why: the single cooperative launch spends ~2.3 us on its two grid
barriers alone (benchmarks/micro/sync_costs.cu) and a finalize round trip through global memory on top, 12.1 us of
kernel time at (64, 32, 16, 16) fp16 (a 1 MB input) on an H200, where cl_block takes 5.3 us (benchmarks/NOTES.md, "Block plan").

Traffic: x read twice (the second partly or wholly from L2), y written once; scratch is O(ctas * slots).
Vector accesses are 16 bytes when C is a multiple of 16 bytes and x, y are 16-byte aligned, else scalar.
Indices are 64-bit (offsets of row * C), so tensors over 2^31 elements need no other path.
"""

CHANNELS_LAST_FORWARD_CUDA = r"""
namespace cl_forward {

using gn_cl::Tiling;
using gn_cl::Tile;
using gn_cl::kUnroll;

// Channels [lo, hi) of group g inside the channel tile [tile_c0, tile_c1), relative to tile_c0.
__device__ __forceinline__ int64_t group_lo(int64_t g, int64_t cpg, int64_t tile_c0) {
  return (g * cpg > tile_c0 ? g * cpg : tile_c0) - tile_c0;
}
__device__ __forceinline__ int64_t group_hi(int64_t g, int64_t cpg, int64_t tile_c0, int64_t tile_c1) {
  return ((g + 1) * cpg < tile_c1 ? (g + 1) * cpg : tile_c1) - tile_c0;
}

// Step 1. x: (N, HW, C); partial: (ctas, slots, 2) doubles, slot = group - first group of the CTA's channel
// tile. Dynamic shared memory: stats_smem(t).
// The CTA's work on tile `cta`; every thread of the CTA calls it (it has block barriers). red: the dynamic
// shared memory, VEC planes of sums then VEC of sums of squares (gn_cl::sums_plane doubles each). HOLD: the
// vectors of the thread's first `held_steps` rows of the tile are also kept in shared memory,
// held[step * blockDim.x + threadIdx.x] for its step-th row, for apply_tile to normalise without reading them
// again (all of them when the tile fits, else the first ones: the rest, read last, are the likeliest to be still
// in L2).
// loads_done (the phase trace, cl_fused): where set, thread 0 stamps it once its own loads and sums are done.
// (kUnroll loads per thread in flight. Eight instead of four changed nothing: the phase trace of the single launch
// on an H200 put its statistics at 9.5 us either way at (2, 320, 128, 128) fp16 and 24.3 at (1, 128, 512, 512):
// benchmarks/NOTES.md, "The channels-last single launch, phase by phase".)
template <typename T, int VEC, bool HOLD = false>
__device__ __forceinline__ void stats_tile(const T* __restrict__ x, double* __restrict__ partial, const Tiling& t,
                                           int64_t cpg, int slots, int64_t cta, double* red,
                                           Vec<T, VEC>* held = nullptr, int64_t held_steps = 0,
                                           int64_t* loads_done = nullptr) {
  using C = typename Compute<T>::type;
  const Tile p = gn_cl::tile_of(t, cta);
  const int col = static_cast<int>(threadIdx.x) % t.tc, r0 = static_cast<int>(threadIdx.x) / t.tc;
  const int64_t tile_c0 = p.c_tile * t.cw;
  const int64_t tile_c1 = tile_c0 + t.cw < t.C ? tile_c0 + t.cw : t.C;
  const int64_t c = tile_c0 + static_cast<int64_t>(col) * VEC;  // this thread's first channel
  const bool active = c < tile_c1 && r0 < t.rows;
  const T* xn = x + p.n * t.HW * t.C;
  double s[VEC], ss[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) s[k] = ss[k] = 0.0;
  if (active) {
    C K[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) K[k] = static_cast<C>(xn[(c + k) / cpg * cpg]);  // row 0 of the group
    const int64_t step = static_cast<int64_t>(t.rows) * t.C;
    int64_t r = p.row0 + r0;
    const T* ptr = xn + r * t.C + c;
    int j = 0;  // this thread's row step within the tile
    for (; r + (kUnroll - 1) * t.rows < p.row1; r += kUnroll * t.rows, ptr += kUnroll * step, j += kUnroll) {
      Vec<T, VEC> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load_vec<T, VEC>(ptr + u * step);
      if constexpr (HOLD) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (j + u < held_steps) held[(j + u) * blockDim.x + threadIdx.x] = v[u];
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        C ls = 0, lss = 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const C d = static_cast<C>(v[u].v[k]) - K[k];
          ls += d;
          lss += d * d;
        }
        s[k] += ls;
        ss[k] += lss;
      }
    }
    if (r < p.row1) {  // fewer than kUnroll rows left: one batch of guarded loads, not a chain of single ones
      Vec<T, VEC> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (r + u * t.rows < p.row1) v[u] = load_vec<T, VEC>(ptr + u * step);
      if constexpr (HOLD) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (r + u * t.rows < p.row1 && j + u < held_steps) held[(j + u) * blockDim.x + threadIdx.x] = v[u];
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        C ls = 0, lss = 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (r + u * t.rows >= p.row1) continue;
          const C d = static_cast<C>(v[u].v[k]) - K[k];
          ls += d;
          lss += d * d;
        }
        s[k] += ls;
        ss[k] += lss;
      }
    }
  }
  if (loads_done != nullptr && threadIdx.x == 0) *loads_done = global_timer_ns();
  // Rows of the CTA per channel: plane k holds element k of every thread's vector (channel col * VEC + k).
  const int plane = gn_cl::sums_plane(t.rows, t.tc);
  double* red_ss = red + VEC * plane;
  if (r0 < t.rows) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      red[k * plane + threadIdx.x] = s[k];
      red_ss[k * plane + threadIdx.x] = ss[k];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < VEC * t.tc; e += blockDim.x) {  // row slot 0 <- the sums over the row slots
    const int at = e / t.tc * plane + e % t.tc;
    double a = red[at], b = red_ss[at];
    for (int rr = 1; rr < t.rows; ++rr) {
      a += red[at + rr * t.tc];
      b += red_ss[at + rr * t.tc];
    }
    red[at] = a;
    red_ss[at] = b;
  }
  __syncthreads();
  // Channel j of the tile (relative to tile_c0): element j % VEC of column j / VEC, row slot 0.
  auto cell = [&](int64_t j) { return static_cast<int>(j % VEC) * plane + static_cast<int>(j / VEC); };
  // Channels of the CTA per group: slot q is group g0 + q, channels [max(tile_c0, g cpg), min(tile_c1, (g+1) cpg)).
  const int64_t g0 = tile_c0 / cpg;
  const int here = static_cast<int>((tile_c1 - 1) / cpg - g0 + 1);
  double* out = partial + cta * slots * 2;
  if (cpg <= 32) {  // narrow groups: a thread per slot
    for (int q = threadIdx.x; q < here; q += blockDim.x) {
      const int64_t lo = group_lo(g0 + q, cpg, tile_c0);
      const int64_t hi = group_hi(g0 + q, cpg, tile_c0, tile_c1);
      double a = 0, b = 0;
      for (int64_t j = lo; j < hi; ++j) {
        a += red[cell(j)];
        b += red_ss[cell(j)];
      }
      out[2 * q] = a;
      out[2 * q + 1] = b;
    }
  } else {  // wide groups: a warp per slot, whole warps only
    // blockDim.x = tc * rows need not be a multiple of 32 (tc = 214 for float64 with C = 1280): the partial
    // last warp's shuffles would read lanes that do not exist. At least 4 whole warps (tc * rows >= 128).
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int q = warp < warps ? warp : here; q < here; q += warps) {
      const int64_t lo = group_lo(g0 + q, cpg, tile_c0);
      const int64_t hi = group_hi(g0 + q, cpg, tile_c0, tile_c1);
      double a = 0, b = 0;
      for (int64_t j = lo + lane; j < hi; j += 32) {
        a += red[cell(j)];
        b += red_ss[cell(j)];
      }
      a = warp_sum(a);
      b = warp_sum(b);
      if (lane == 0) {
        out[2 * q] = a;
        out[2 * q + 1] = b;
      }
    }
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(gn_cl::kMaxThreads) cl_stats(const T* __restrict__ x, double* __restrict__ partial,
                                                             Tiling t, int64_t cpg, int slots) {
  extern __shared__ __align__(16) unsigned char cl_stats_smem[];
  stats_tile<T, VEC>(x, partial, t, cpg, slots, blockIdx.x, reinterpret_cast<double*>(cl_stats_smem));
}

// Step 2: L lanes of a warp per (n, g) (L a power of two <= 32, 32 / L slices per warp). Group g's partials are
// in the CTAs (n, hw_tile, c_tile) for every hw_tile and the channel tiles that hold its channels, at slot
// g - (first group of the tile). norm: (N * G,). Lanes per slice: enough to read the hw_tiles partials in a few
// steps, no more, so that inputs of many small groups (where a tile holds a whole sample) finalise every slice
// at once instead of queuing them on few warps (measured: 2048 slices at one warp each, 16 warps per CTA over
// 64 CTAs, cost ~5 us of a 16 us call).
inline int finalize_lanes(const Tiling& t) {
  int lanes = 1;
  while (lanes < 32 && lanes < t.hw_tiles) lanes *= 2;
  return lanes;
}

constexpr int kPartialBatch = 8;  // partial-sum pairs a lane loads at once (group_partial_sums)

// Lane `sub` of the `lanes` lanes given to group g of sample n adds its share of the group's partial sums (the
// items: its tiles' (sum, sum of squares) pairs, tile by tile over the hw_tiles rows of tiles and the channel
// tiles cts that hold the group), into s, ss. Every caller with the same `lanes` adds in the same order, so the
// finalize kernel and every CTA that folds the group itself (cl_fused, fold) get the same sums.
__device__ __forceinline__ void group_partial_sums(const double* __restrict__ partial, const Tiling& t, int64_t cpg,
                                                   int slots, int64_t n, int64_t g, int sub, int lanes, double& s,
                                                   double& ss) {
  const int64_t ct0 = g * cpg / t.cw, ct1 = ((g + 1) * cpg - 1) / t.cw;  // channel tiles holding the group
  const int64_t cts = ct1 - ct0 + 1;
  const int64_t items = t.hw_tiles * cts;
  const int64_t q0 = g - ct0 * t.cw / cpg;  // the group's slot in its first channel tile (every one, if cts = 1)
  // kBatch items' pairs loaded as 16-byte vectors, all in flight, then added in item order (the order of a loop
  // over them one by one, so the same sums): one load latency per batch instead of one per item. Loaded one
  // by one, each add waited for its load (Nsight Compute on the three-launch finalize: the warps' stalls sat on
  // those adds); batched, the single launch's kernel time fell 3-8% at (2, 640, 64, 64), (2, 320, 128, 128),
  // (1, 512, 128, 128) fp16, (1, 128, 8, 128, 128) bf16 and (1, 128, 512, 512) fp16 on an H200 (20.3 -> 19.6,
  // 26.8 -> 25.7, 25.6 -> 23.6, 35.4 -> 33.5, 62.7 -> 60.8 us).
  constexpr int kBatch = kPartialBatch;
  for (int64_t i0 = sub; i0 < items; i0 += kBatch * lanes) {
    double2 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = i0 + u * lanes;
      v[u] = make_double2(0.0, 0.0);
      if (i < items) {
        // (Divisions only where the group spans channel tiles: a 64-bit division per item otherwise.)
        const int64_t hw_tile = cts == 1 ? i : i / cts, d = cts == 1 ? 0 : i - hw_tile * cts;
        const int64_t cta = (n * t.hw_tiles + hw_tile) * t.c_tiles + ct0 + d;
        const int64_t q = d == 0 ? q0 : g - (ct0 + d) * t.cw / cpg;
        v[u] = *reinterpret_cast<const double2*>(partial + (cta * slots + q) * 2);  // 16-byte aligned pairs
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      s += v[u].x;
      ss += v[u].y;
    }
  }
}

// The sums of the `lanes` lanes (a power of two, aligned within the warp) that share a group, in every one of
// them. Every lane of the warp calls it (full-mask shuffles).
__device__ __forceinline__ void lanes_sum(double& s, double& ss, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, offset);
    ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  }
}

// Warp `warp` of `warps` (grid-wide, whole warps only; every lane calls it) finalises slices
// (warp + k * warps) * (32 / lanes) + lane / lanes.
template <typename T>
__device__ __forceinline__ void finalize_slices(const T* __restrict__ x, const double* __restrict__ partial,
                                                const Tiling& t, int64_t G, int64_t cpg, int slots, double eps,
                                                typename Compute<T>::type* __restrict__ mean_out,
                                                typename Compute<T>::type* __restrict__ rstd_out,
                                                SliceNorm<typename Compute<T>::type>* __restrict__ norm,
                                                int64_t warp, int64_t warps, int lanes) {
  using C = typename Compute<T>::type;
  const int lane = threadIdx.x & 31, sub = lane % lanes;
  const int64_t per_warp = 32 / lanes, slices = t.N * G;
  for (int64_t base = warp * per_warp; base < slices; base += warps * per_warp) {  // warp-uniform bound
    const int64_t slice = base + lane / lanes;
    double s = 0, ss = 0;
    C K = C(0);
    if (slice < slices) {
      const int64_t n = slice / G, g = slice - n * G;
      // The shift first, so that its load overlaps the partials' instead of following them.
      if (sub == 0) K = static_cast<C>(x[n * t.HW * t.C + g * cpg]);
      group_partial_sums(partial, t, cpg, slots, n, g, sub, lanes, s, ss);
    }
    lanes_sum(s, ss, lanes);
    if (slice < slices && sub == 0) {
      const SliceNorm<C> nm = norm_from_sums<C>(s, ss, static_cast<double>(cpg) * static_cast<double>(t.HW), K, eps);
      write_stats(nm, mean_out, rstd_out, slice);
      norm[slice] = nm;
    }
  }
}

// cl_fused's fold: CTA `cta` finalises the groups its own tile touches (slots q = 0 .. here - 1, groups g0 + q of
// sample n) from the grid's partial sums, into folded[q] (shared memory), instead of warps across the grid
// finalising every group once and the grid waiting a second time for them. `lanes` lanes per group (whole warps
// only), the same in every CTA, so every CTA touching a group computes the same constants; the group's first
// tile (hw_tile 0, its first channel tile) writes mean and rstd. Every thread calls it (a block barrier ends it).
template <typename T>
__device__ __forceinline__ void fold_tile_groups(const T* __restrict__ x, const double* __restrict__ partial,
                                                 const Tiling& t, int64_t G, int64_t cpg, int slots, double eps,
                                                 typename Compute<T>::type* __restrict__ mean_out,
                                                 typename Compute<T>::type* __restrict__ rstd_out,
                                                 SliceNorm<typename Compute<T>::type>* folded, int lanes,
                                                 int64_t cta) {
  using C = typename Compute<T>::type;
  const Tile p = gn_cl::tile_of(t, cta);
  const int64_t tile_c0 = p.c_tile * t.cw;
  const int64_t tile_c1 = tile_c0 + t.cw < t.C ? tile_c0 + t.cw : t.C;
  const int64_t g0 = tile_c0 / cpg;
  const int here = static_cast<int>((tile_c1 - 1) / cpg - g0 + 1);
  const int lane = threadIdx.x & 31, sub = lane % lanes;
  const int warps = static_cast<int>(blockDim.x >> 5), warp = static_cast<int>(threadIdx.x >> 5);
  const int per_warp = 32 / lanes;
  if (warp < warps) {
    for (int base = warp * per_warp; base < here; base += warps * per_warp) {  // warp-uniform bound
      const int q = base + lane / lanes;
      double s = 0, ss = 0;
      C K = C(0);
      if (q < here) {
        if (sub == 0) K = static_cast<C>(x[p.n * t.HW * t.C + (g0 + q) * cpg]);
        group_partial_sums(partial, t, cpg, slots, p.n, g0 + q, sub, lanes, s, ss);
      }
      lanes_sum(s, ss, lanes);
      if (q < here && sub == 0) {
        const SliceNorm<C> nm =
            norm_from_sums<C>(s, ss, static_cast<double>(cpg) * static_cast<double>(t.HW), K, eps);
        folded[q] = nm;
        if (p.hw_tile == 0 && p.c_tile == (g0 + q) * cpg / t.cw) write_stats(nm, mean_out, rstd_out, p.n * G + g0 + q);
      }
    }
  }
  __syncthreads();
}

// Lanes per group of the fold: as many as the CTA's whole warps give every slot of the widest tile at once (a
// power of two, at most a warp). A function of the tiling alone, so the same in every CTA.
inline int fold_lanes(const Tiling& t, int slots) {
  const int lanes_total = (t.threads() / 32) * 32;
  int lanes = 1;
  while (lanes < 32 && 2 * lanes * slots <= lanes_total) lanes *= 2;
  return lanes;
}

template <typename T>
__global__ void __launch_bounds__(256) cl_finalize(const T* __restrict__ x, const double* __restrict__ partial,
                                                   Tiling t, int64_t G, int64_t cpg, int slots, double eps,
                                                   typename Compute<T>::type* __restrict__ mean_out,
                                                   typename Compute<T>::type* __restrict__ rstd_out,
                                                   SliceNorm<typename Compute<T>::type>* __restrict__ norm,
                                                   int lanes) {
  finalize_slices<T>(x, partial, t, G, cpg, slots, eps, mean_out, rstd_out, norm,
                     (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5,
                     static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5), lanes);
}

// Step 3: y = act((x - K) * a + shift) per channel, rows walked from the end of the tile (module docstring).
// The CTA's work on tile `cta` (no block barriers: threads without work return at once). HOLD: the thread's
// first `held_steps` rows come from the shared memory stats_tile<HOLD> filled, the others from x. norm: the
// (N * G,) constants, or (tile_local) the tile's own groups' (fold_tile_groups: slot q is group g0 + q).
template <typename T, int VEC, bool AFFINE, typename Epi, bool HOLD = false>
__device__ __forceinline__ void apply_tile(const T* __restrict__ x, T* __restrict__ y, const ParamRef<T>& w,
                                           const ParamRef<T>& bias,
                                           const SliceNorm<typename Compute<T>::type>* __restrict__ norm,
                                           const Tiling& t, int64_t G, int64_t cpg, const Epi& epi, int64_t cta,
                                           const Vec<T, VEC>* held = nullptr, int64_t held_steps = 0,
                                           bool tile_local = false) {
  using C = typename Compute<T>::type;
  const Tile p = gn_cl::tile_of(t, cta);
  const int col = static_cast<int>(threadIdx.x) % t.tc, r0 = static_cast<int>(threadIdx.x) / t.tc;
  const int64_t tile_c0 = p.c_tile * t.cw;
  const int64_t c = tile_c0 + static_cast<int64_t>(col) * VEC;
  if (c >= t.C || r0 >= t.rows) return;  // no barriers below
  const int64_t group_at = tile_local ? -(tile_c0 / cpg) : p.n * G;  // norm's index of group g: group_at + g
  C K[VEC], a[VEC], shift[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const SliceNorm<C> nm = norm[group_at + (c + k) / cpg];
    const C ak = AFFINE ? nm.rstd * w[c + k] : nm.rstd;
    K[k] = nm.K;
    a[k] = ak;
    shift[k] = (AFFINE ? bias[c + k] : C(0)) - nm.mean_k * ak;
  }
  // This thread's rows of the tile, walked from the last: the statistics pass ran every tile at once, so what L2
  // still holds is the end of every tile.
  const int64_t first = p.row0 + r0;
  const int64_t count = first < p.row1 ? (p.row1 - first + t.rows - 1) / t.rows : 0;
  if (count == 0) return;
  const int64_t step = -static_cast<int64_t>(t.rows) * t.C;
  const int64_t offset = (p.n * t.HW + first + (count - 1) * t.rows) * t.C + c;
  const T* xp = x + offset;
  T* yp = y + offset;
  auto normalize = [&](const Vec<T, VEC>& v) {
    C z[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) z[k] = (static_cast<C>(v.v[k]) - K[k]) * a[k] + shift[k];
    epi.apply(z);
    Vec<T, VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o.v[k] = static_cast<T>(z[k]);
    return o;
  };
  // Rows i0 .. i1 - 1 of the walk (row step count - 1 - i), from x or (FROM_HELD) from shared memory.
  auto walk = [&](auto from_held, int64_t i0, int64_t i1) {
    constexpr bool FROM_HELD = decltype(from_held)::value;
    const T* xq = xp + i0 * step;
    T* yq = yp + i0 * step;
    // Index into `held` (an index, not a pointer: `held` is null in the kernels that hold nothing).
    int64_t held_i = (count - 1 - i0) * blockDim.x + threadIdx.x;
    const int64_t hstep = -static_cast<int64_t>(blockDim.x);
    auto load = [&](int u) {
      if constexpr (FROM_HELD) return held[held_i + u * hstep];
      else return load_vec<T, VEC>(xq + u * step);
    };
    int64_t i = i0;
    for (; i + kUnroll <= i1; i += kUnroll, xq += kUnroll * step, yq += kUnroll * step, held_i += kUnroll * hstep) {
      Vec<T, VEC> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load(u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) store_vec_streaming<T, VEC>(yq + u * step, normalize(v[u]));
    }
    if (i < i1) {  // the last < kUnroll rows: one batch of guarded loads
      Vec<T, VEC> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i + u < i1) v[u] = load(u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i + u < i1) store_vec_streaming<T, VEC>(yq + u * step, normalize(v[u]));
    }
  };
  // The rows not held first (read last by the statistics: the likeliest in L2), then the held ones.
  const int64_t from_x = HOLD ? count - (held_steps < count ? held_steps : count) : count;
  walk(std::false_type{}, 0, from_x);
  if constexpr (HOLD) walk(std::true_type{}, from_x, count);
}

// CTAs in reverse order: the statistics pass's last CTAs ran last, so their tiles are the likeliest in L2.
template <typename T, int VEC, bool AFFINE, typename Epi>
__global__ void __launch_bounds__(gn_cl::kMaxThreads) cl_apply(const T* __restrict__ x, T* __restrict__ y,
                                                             ParamRef<T> w, ParamRef<T> bias,
                                                             const SliceNorm<typename Compute<T>::type>* __restrict__ norm,
                                                             Tiling t, int64_t G, int64_t cpg, Epi epi) {
  apply_tile<T, VEC, AFFINE, Epi>(x, y, w, bias, norm, t, G, cpg, epi, static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x);
}

// Phase trace of the single launches (the diagnostics operator group_norm_channels_last_trace): where `trace` is
// set, thread 0 of CTA b stamps %globaltimer (ns) into trace[b * kClTracePoints + point] at each point, in kernel
// order. cl_fused:
//   0 entry, 1 its own loads and sums done, 2 the CTA's partial sums written, 3 past the first grid barrier,
//   4 finalize (or fold) done, 5 past the second grid barrier (fold: = 4), 6 the whole CTA's normalisation done.
// cl_block: 0 entry, 1 its own rows loaded and summed, 2 every thread's sums in shared memory (block barrier),
//   3 the CTA's per-channel sums done and past the first cluster barrier (block barrier without a cluster),
//   4 its groups finalised (thread 0's share), 5 past the second cluster barrier, 6 every thread's stores issued.
// Off (null) it costs a uniform branch per point.
constexpr int kClTracePoints = 7;
constexpr int kClTraceMaxCtasPerSm = 32;  // the trace's rows: this many per SM (2048 threads of 64)

// Steps 1-3 in one cooperative launch (every CTA resident; the host checks): the CTA sums its tile, the grid
// waits, warps across the grid finalise the (n, g) slices, the grid waits, and the CTA normalises the tile it
// summed, from its last row back, so the rows it read last (still in L2) come first. Saves the two launches
// and the finalize kernel's latency that dominate inputs of a few MB.
template <typename T, int VEC, bool AFFINE, typename Epi, bool HOLD>
__global__ void __launch_bounds__(gn_cl::kMaxThreads) cl_fused(const T* __restrict__ x, T* __restrict__ y,
                                                             ParamRef<T> w, ParamRef<T> bias,
                                                             double* __restrict__ partial,
                                                             SliceNorm<typename Compute<T>::type>* __restrict__ norm,
                                                             typename Compute<T>::type* __restrict__ mean_out,
                                                             typename Compute<T>::type* __restrict__ rstd_out,
                                                             Tiling t, int64_t G, int64_t cpg, int slots, double eps,
                                                             int lanes, int64_t held_steps, bool fold,
                                                             int64_t* __restrict__ trace, Epi epi) {
  namespace cg = cooperative_groups;
  using CT = typename Compute<T>::type;
  extern __shared__ __align__(16) unsigned char cl_fused_smem[];
  const cg::grid_group grid = cg::this_grid();
  int64_t* const stamps = trace != nullptr ? trace + static_cast<int64_t>(blockIdx.x) * kClTracePoints : nullptr;
  auto stamp = [&](int point) {
    if (stamps != nullptr && threadIdx.x == 0) stamps[point] = global_timer_ns();
  };
  auto stamp_end = [&] {  // after every thread's normalisation
    if (stamps != nullptr) {
      __syncthreads();
      stamp(6);
    }
  };
  stamp(0);
  double* red = reinterpret_cast<double*>(cl_fused_smem);  // stats_tile's planes, then the held rows (HOLD)
  Vec<T, VEC>* held = reinterpret_cast<Vec<T, VEC>*>(red + 2 * VEC * gn_cl::sums_plane(t.rows, t.tc));
  stats_tile<T, VEC, HOLD>(x, partial, t, cpg, slots, blockIdx.x, red, held, held_steps,
                           stamps != nullptr ? stamps + 1 : nullptr);
  stamp(2);
  grid.sync();
  stamp(3);
  // The tile index passed through an empty asm: without it the compiler keeps the tile's coordinates (computed
  // in stats_tile) live across the grid barriers, registers the statistics' peak pays for (124 -> 102 for half
  // data, still 2 CTAs per SM; 84 -> 78 for float: 3 CTAs per SM instead of 2).
  int64_t cta = blockIdx.x;
  if (fold) {  // grid-uniform: the CTA finalises its own groups into the reduction space, no second grid barrier
    asm volatile("" : "+l"(cta));
    SliceNorm<CT>* folded = reinterpret_cast<SliceNorm<CT>*>(red);
    fold_tile_groups<T>(x, partial, t, G, cpg, slots, eps, mean_out, rstd_out, folded, lanes, cta);
    stamp(4);
    stamp(5);
    apply_tile<T, VEC, AFFINE, Epi, HOLD>(x, y, w, bias, folded, t, G, cpg, epi, cta, held, held_steps, true);
    stamp_end();
    return;
  }
  const int64_t warps = static_cast<int64_t>(blockDim.x) >> 5, warp = threadIdx.x >> 5;  // whole warps only
  if (warp < warps)
    finalize_slices<T>(x, partial, t, G, cpg, slots, eps, mean_out, rstd_out, norm,
                       static_cast<int64_t>(blockIdx.x) * warps + warp, static_cast<int64_t>(gridDim.x) * warps,
                       lanes);
  stamp(4);
  grid.sync();
  stamp(5);
  asm volatile("" : "+l"(cta));
  apply_tile<T, VEC, AFFINE, Epi, HOLD>(x, y, w, bias, norm, t, G, cpg, epi, cta, held, held_steps);
  stamp_end();
}

// Groups that one channel tile touches, at most (the `slots` of cl_stats' partial layout).
inline int max_slots(const Tiling& t, int64_t cpg) {
  int64_t most = 1;
  for (int64_t ct = 0; ct < t.c_tiles; ++ct) {
    const int64_t c0 = ct * t.cw, c1 = std::min(t.C, c0 + t.cw);
    most = std::max(most, (c1 - 1) / cpg - c0 / cpg + 1);
  }
  return static_cast<int>(most);
}

// Resident CTAs of `threads` threads and `smem` bytes of `kernel` on the device, at least one per SM.
template <typename Kernel>
int64_t resident_ctas(Kernel kernel, int threads, size_t smem, int device) {
  const int per_sm = resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), device, threads, smem);
  return static_cast<int64_t>(std::max(per_sm, 1)) * device_info(device).sms;
}

// Rows per thread below which a tile would not amortise its partial sums and per-channel constants.
constexpr int kMinRowsPerThread = 8;
// CTAs of the statistics pass per SM at most: each keeps kUnroll 16-byte loads per thread in flight, so four
// 256-thread CTAs hold ~64 KB per SM in flight, more than an H100 SM needs to saturate its share of HBM.
constexpr int kStatsCtasPerSm = 4;

inline size_t stats_smem(const Tiling& t) {
  return static_cast<size_t>(gn_cl::sums_plane(t.rows, t.tc)) * t.vec * 2 * sizeof(double);
}

// The tiling of both passes: threads per CTA depend on C only; the grid is one wave of the statistics kernel.
template <typename T, int VEC>
Tiling forward_tiling(int64_t N, int64_t HW, int64_t C, int device) {
  const Tiling one = gn_cl::make_tiling(N, HW, C, VEC, 1, kMinRowsPerThread);
  const int64_t resident = std::min<int64_t>(resident_ctas(cl_stats<T, VEC>, one.threads(), stats_smem(one), device),
                                             static_cast<int64_t>(device_info(device).sms) * kStatsCtasPerSm);
  return gn_cl::make_tiling(N, HW, C, VEC, resident, kMinRowsPerThread);
}

// The single cooperative launch (cl_fused): which variant, its tiling and its dynamic shared memory.
enum class FusedKind { kNone, kHeld, kPartial, kL2 };
struct FusedPlan {
  FusedKind kind = FusedKind::kNone;
  Tiling t;
  size_t smem = 0;
  int64_t held_steps = 0;  // rows per thread kept in shared memory (cl_fused<HOLD>), from the first
};

// GROUPNORM_INLINE_CL_FOLD (read per call; benchmarks and tests): 0 never folds, 1 folds wherever the
// constants fit the reduction space; unset: the rule of fold_pays.
inline int fold_override() {
  const char* v = std::getenv("GROUPNORM_INLINE_CL_FOLD");
  if (v == nullptr) return -1;
  return std::strcmp(v, "0") == 0 ? 0 : 1;
}

// Partial-sum pairs of one group, at most: its tiles over every row of tiles.
inline int64_t group_items(const Tiling& t, int64_t cpg) {
  // Channel tiles one group spans, at most: one where tiles hold whole groups, cpg / cw where groups hold whole
  // tiles, else one more than cpg covers.
  const int64_t cts = t.cw % cpg == 0 ? 1 : cpg % t.cw == 0 ? cpg / t.cw : (cpg + t.cw - 1) / t.cw + 1;
  return t.hw_tiles * cts;
}

// Whether cl_fused folds: every CTA re-reads its groups' partial sums from L2 in place of the second grid barrier
// and the finalize's round trip. That costs L2 reads in proportion to ctas x hw_tiles (each group's partials are
// read by each of its hw_tiles CTAs) and one load latency per batch of a lane's share. Measured on an H200
// (kernel times, fold / finalize, us): one batch per lane, (4, 64, 64, 64) fp32 (32 tiles a sample, 8 per lane)
// 11.4 / 13.5, (32, 64, 32, 32) fp16 13.2 / 14.8, (64, 32, 16, 16) fp16 10.9 / 11.8; three batches and more,
// (1, 320, 64, 64) fp16 (76 tiles, 19 per lane) 16.6 / 15.5, (2, 640, 64, 64) fp16 23.2 / 19.8,
// (2, 320, 128, 128) fp16 29.9 / 25.8, (1, 128, 512, 512) fp16 66.1 / 60.4. So: one batch per lane.
template <typename CT>
bool fold_pays(const Tiling& t, int64_t cpg, int slots) {
  if (static_cast<size_t>(slots) * sizeof(SliceNorm<CT>) > stats_smem(t)) return false;  // folded constants' room
  if (t.threads() < 32) return false;  // the fold's lanes are whole warps
  const int force = fold_override();
  if (force >= 0) return force == 1;
  return group_items(t, cpg) <= int64_t{kPartialBatch} * fold_lanes(t, slots);
}

// Row steps of a thread in a tile (every thread of a full tile has this many).
inline int64_t tile_steps(const Tiling& t) { return (t.tile_rows + t.rows - 1) / t.rows; }

// Shared memory of cl_fused<HOLD> keeping `steps` rows per thread: the statistics' reduction space, then the
// held vectors.
inline size_t held_smem(const Tiling& t, size_t vec_bytes, int64_t steps) {
  return stats_smem(t) + static_cast<size_t>(steps) * t.threads() * vec_bytes;
}

// GROUPNORM_INLINE_CL_PARTIAL_HOLD=0 (read per call) turns the kPartial plan off (kL2 instead), for benchmarks.
inline bool partial_hold_enabled() {
  const char* v = std::getenv("GROUPNORM_INLINE_CL_PARTIAL_HOLD");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// The grid is at most kStatsCtasPerSm CTAs per SM and never more than are resident at once (cooperative launch).
//   kHeld  the tile stays in shared memory between the statistics and the normalisation: one read of x. Tried
//          with 4, 3, 2, then 1 CTA per SM (fewer CTAs: taller tiles, more shared memory each), so it serves
//          inputs up to about the GPU's total shared memory (~29 MB on an H100).
//   kPartial  larger inputs: kL2's tiling (for the holding kernel's occupancy), and each thread keeps its first
//          rows in the shared memory its SM's CTAs leave free (all of it but the statistics' reduction space);
//          the normalisation reads the others again, from L2 where they still are (they were read last).
//   kL2    the tile is read again (no shared memory to spare, or GROUPNORM_INLINE_CL_PARTIAL_HOLD=0).
//   kNone  N * c_tiles tiles alone exceed the resident CTAs, or no cooperative launches: three launches.
// force_partial (tests): kPartial wherever the kL2 grid fits, holding at most half of each thread's rows.
template <typename T, int VEC, bool AFFINE, typename Epi>
FusedPlan fused_plan(int64_t N, int64_t HW, int64_t C, int device, bool force_partial = false) {
  FusedPlan plan;
  const DeviceInfo& dev = device_info(device);
  if (!dev.cooperative) return plan;
  const int sms = dev.sms;
  for (int per_sm = force_partial ? 0 : kStatsCtasPerSm; per_sm >= 1; --per_sm) {
    const Tiling t = gn_cl::make_tiling(N, HW, C, VEC, int64_t{sms} * per_sm, kMinRowsPerThread);
    const size_t smem = held_smem(t, sizeof(Vec<T, VEC>), tile_steps(t));
    if (static_cast<int64_t>(smem) > dev.max_smem_optin - 1024) continue;
    const void* kernel = reinterpret_cast<const void*>(cl_fused<T, VEC, AFFINE, Epi, true>);
    // max_active_clusters first: it lets the kernel opt into more than 48 KB of dynamic shared memory.
    if (max_active_clusters(kernel, device, 1, t.threads(), smem) < 1) continue;
    const int64_t resident = int64_t{resident_ctas_per_sm(kernel, device, t.threads(), smem)} * sms;
    if (t.ctas() <= resident) {
      plan.kind = FusedKind::kHeld;
      plan.t = t;
      plan.smem = smem;
      plan.held_steps = tile_steps(t);
      return plan;
    }
  }
  const Tiling one = gn_cl::make_tiling(N, HW, C, VEC, 1, kMinRowsPerThread);
  const int64_t resident = resident_ctas(cl_fused<T, VEC, AFFINE, Epi, false>, one.threads(), stats_smem(one), device);
  const Tiling t = gn_cl::make_tiling(N, HW, C, VEC, std::min<int64_t>(resident, int64_t{sms} * kStatsCtasPerSm),
                                      kMinRowsPerThread);
  if (t.ctas() > resident) return plan;
  plan.kind = FusedKind::kL2;
  plan.t = t;
  plan.smem = stats_smem(t);
  if (!force_partial && !partial_hold_enabled()) return plan;
  // kPartial: the grid as kL2's, sized by the holding kernel's own occupancy (its registers may differ), each
  // CTA given an equal share of its SM's shared memory (less the bytes the driver reserves per CTA and the
  // kernel's static shared memory, ~1 KB each), as many rows held as it takes.
  const void* kernel = reinterpret_cast<const void*>(cl_fused<T, VEC, AFFINE, Epi, true>);
  const int64_t hold_resident =
      resident_ctas(cl_fused<T, VEC, AFFINE, Epi, true>, one.threads(), stats_smem(one), device);
  const Tiling tp = gn_cl::make_tiling(N, HW, C, VEC, std::min<int64_t>(hold_resident, int64_t{sms} * kStatsCtasPerSm),
                                       kMinRowsPerThread);
  if (tp.ctas() > hold_resident) return plan;
  const int64_t per_sm = (tp.ctas() + sms - 1) / sms;
  const int64_t share = std::min<int64_t>(dev.max_smem_optin, dev.smem_per_sm / per_sm) - 2048;
  const size_t vec_bytes = sizeof(Vec<T, VEC>);
  const int64_t row_bytes = tp.threads() * static_cast<int64_t>(vec_bytes);  // one row step of the CTA
  int64_t held = std::min<int64_t>(force_partial ? std::max<int64_t>(1, tile_steps(tp) / 2) : tile_steps(tp) - 1,
                                   (share - static_cast<int64_t>(stats_smem(tp))) / row_bytes);
  for (; held >= 1; held = held * 7 / 8) {  // the share's estimate of the reserved bytes may be short: back off
    const size_t smem = held_smem(tp, vec_bytes, held);
    if (max_active_clusters(kernel, device, 1, tp.threads(), smem) < 1) continue;
    if (int64_t{resident_ctas_per_sm(kernel, device, tp.threads(), smem)} * sms < tp.ctas()) continue;
    plan.kind = FusedKind::kPartial;
    plan.t = tp;
    plan.smem = smem;
    plan.held_steps = held;
    return plan;
  }
  return plan;
}

// ---- The block plan: one CTA per (sample, channel tile of whole groups), the tile held in registers ----
// An input of many small samples ((64, 32, 16, 16): 16 KB a sample) needs neither the grid-wide barriers of
// cl_fused nor a second read: a CTA loads every row of its channel tile (at most kBlockVecs vectors per
// thread, all loads in flight at once), sums them per channel, reduces the rows in shared memory, finalises
// its groups, and normalises the vectors it holds. One launch, x read once, no scratch in global memory.
// The kernel is a chain of dependent steps (load, three block barriers, a double-precision finalize) with
// little work per thread, so its cost is latency, paid once per wave of CTAs: the plan takes only inputs whose
// CTAs are all resident at once (module docstring, "block plan").
constexpr int kBlockVecs = 8;         // vectors held per thread at most: 32 registers at 16 bytes
constexpr int kBlockHoldMinVecs = 4;  // 16-byte vectors per tile row, at least, for rows held in shared memory
constexpr int kBlockMaxHeld = 2 * kBlockVecs;  // rows per thread held in shared memory, at most
constexpr int kBlockMaxThreads = 256;  // 512 lost to cl_fused: 14.1 vs 11.4 us at (4,64,64,64) fp32 (H200 kernels)
constexpr int kBlockMinCtasPerSm = 2;  // __launch_bounds__: at most 128 registers (a 64 bound measured slower)

struct BlockPlan {
  bool ok = false;
  int cw = 0;        // channels per tile: whole groups and whole vectors; divides C
  int tc = 0;        // vector columns per tile (cw / vec)
  int rows = 0;      // ceil(HW / kBlockVecs): thread t holds rows t / tc + i * rows (i < kBlockVecs) of column t % tc
  int threads = 0;   // tc * rows rounded up to whole warps (the extra threads hold nothing)
  int lanes = 1;     // lanes that add one channel's row partials (a power of two, at most 32)
  int cluster = 1;   // CTAs per (sample, tile), each holding its share of the rows (1: no cluster)
  int held = 0;      // rows per thread held in shared memory beside its kBlockVecs in registers (16-byte vectors)
  int64_t ctas = 0;  // N * (C / cw) * cluster
  size_t smem = 0;
};

// Dynamic shared memory of cl_block: per-channel totals (cw pairs of double), per-channel constants (K, a,
// shift: cw each, compute type), then every thread's per-channel partial sums (2 * vec planes of
// gn_cl::sums_plane(rows, tc) values).
// With rows held in shared memory (held > 0): then, from the next 16-byte boundary, held vectors of 16 bytes per
// thread, held_vecs[i * blockDim.x + thread] for the thread's (kBlockVecs + i)-th row (conflict-free accesses).
template <typename CT>
__host__ __device__ __forceinline__ size_t block_held_offset(int rows, int tc, int vec, int cw) {
  const size_t bytes = static_cast<size_t>(cw) * 2 * sizeof(double) + static_cast<size_t>(cw) * 3 * sizeof(CT) +
                       static_cast<size_t>(gn_cl::sums_plane(rows, tc)) * vec * 2 * sizeof(CT);
  return (bytes + 15) / 16 * 16;
}
template <typename CT>
inline size_t block_smem(int rows, int tc, int vec, int cw, int threads = 0, int held = 0) {
  return block_held_offset<CT>(rows, tc, vec, cw) + static_cast<size_t>(held) * threads * 16;
}

// 16-byte copies global -> shared that need no registers (sm_80 and later; plain loads and stores before):
// every held row of a thread is in flight at once while it sums the rows in its registers.
__device__ __forceinline__ void copy16_async(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}
// Waits for this thread's copies (each thread reads back only the vectors it copied: no block barrier).
__device__ __forceinline__ void copy16_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// x, y: (N, HW, C); grid: N * (C / cw) * S CTAs of p.threads, S = the cluster size (1 unless CLUSTERED): cluster
// (blockIdx.x / S) takes tile (blockIdx.x / S) % (C / cw) of sample (blockIdx.x / S) / (C / cw), and its CTA of
// rank q the rows [q * rows * kBlockVecs, (q + 1) * rows * kBlockVecs). CLUSTERED: each CTA adds its peers'
// per-channel sums through distributed shared memory (every CTA in the same order, so all get the same
// statistics), then normalises its own rows. mean_out, rstd_out: (N, G). Channel indices are 32-bit (the host
// checks C <= 2^30): the 64-bit divisions they would otherwise take were most of the instructions of a CTA whose
// threads hold one vector.
template <typename T, int VEC, bool AFFINE, typename Epi, bool CLUSTERED>
__global__ void __launch_bounds__(kBlockMaxThreads, kBlockMinCtasPerSm)
    cl_block(const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w, ParamRef<T> bias,
             typename Compute<T>::type* __restrict__ mean_out, typename Compute<T>::type* __restrict__ rstd_out,
             int64_t HW, int C, int G, int cpg, int cw, int tc, int rows, int lanes, int held, double eps,
             int64_t* __restrict__ trace, Epi epi) {
  using CT = typename Compute<T>::type;
  // Rows held in shared memory are copied as 16-byte vectors: only where a vector is 16 bytes (the host's plan).
  constexpr bool kCanHold = sizeof(Vec<T, VEC>) == 16;
  extern __shared__ __align__(16) unsigned char cl_block_smem[];
  // The phase trace (kClTracePoints; null: a uniform branch per point).
  int64_t* const stamps = trace != nullptr ? trace + static_cast<int64_t>(blockIdx.x) * kClTracePoints : nullptr;
  auto stamp = [&](int point, double after) {
    if (stamps != nullptr && threadIdx.x == 0) stamps[point] = global_timer_ns_after(after);
  };
  stamp(0, 0.0);
  double* chan = reinterpret_cast<double*>(cl_block_smem);  // (cw, 2): the tile's sums per channel
  CT* cK = reinterpret_cast<CT*>(chan + 2 * cw);             // (VEC, tc) each: the channel's group shift K,
  CT* ca = cK + cw;                                          // its scale a = rstd * w
  CT* cshift = ca + cw;                                      // and shift b - (mean - K) * a, at cell(channel)
  const int plane = gn_cl::sums_plane(rows, tc);             // each thread's partial sums, VEC planes,
  CT* part = cshift + cw;
  CT* part_ss = part + VEC * plane;                          // then its sums of squares, VEC planes
  const int c_tiles = C / cw;
  const int rank = CLUSTERED ? ClusterView::rank() : 0, ranks = CLUSTERED ? ClusterView::size() : 1;
  const int tile = static_cast<int>(blockIdx.x) / ranks;
  const int n = tile / c_tiles;
  const int tile_c0 = (tile - n * c_tiles) * cw;
  const int tid = static_cast<int>(threadIdx.x), col = tid % tc;
  const int r0 = tid / tc;  // row slot; this thread's rows are row0 + r0 + i * rows
  const bool active = r0 < rows;
  const int per = kBlockVecs + (kCanHold ? held : 0);  // rows per thread: kBlockVecs in registers, then held
  const int64_t row0 = static_cast<int64_t>(rank) * rows * per;
  Vec<T, VEC>* held_vecs =
      reinterpret_cast<Vec<T, VEC>*>(cl_block_smem + block_held_offset<CT>(rows, tc, VEC, cw)) + tid;
  const int c = tile_c0 + col * VEC;  // this thread's first channel
  const T* xs = x + static_cast<int64_t>(n) * HW * C + c;
  T* ys = y + static_cast<int64_t>(n) * HW * C + c;
  Vec<T, VEC> v[kBlockVecs];
  CT s[VEC], ss[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) s[k] = ss[k] = CT(0);
  if (active) {
    if constexpr (kCanHold) {  // the held rows first: all in flight while the register rows are loaded and summed
      for (int i = 0; i < held; ++i) {
        const int64_t r = row0 + r0 + static_cast<int64_t>(kBlockVecs + i) * rows;
        if (r >= HW) break;
        copy16_async(held_vecs + static_cast<int64_t>(i) * blockDim.x, xs + r * C);
      }
    }
#pragma unroll
    for (int i = 0; i < kBlockVecs; ++i) {
      const int64_t r = row0 + r0 + static_cast<int64_t>(i) * rows;
      if (r < HW) v[i] = load_vec<T, VEC>(xs + r * C);
    }
    // K: row 0 of each channel's group (c + k's group starts at `start`; one division for the thread).
    CT K[VEC];
    int start = c / cpg * cpg;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      if (c + k >= start + cpg) start += cpg;
      K[k] = static_cast<CT>(xs[start - c]);
    }
    if (r0 == 0) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) cK[k * tc + col] = K[k];
    }
#pragma unroll
    for (int i = 0; i < kBlockVecs; ++i) {
      if (row0 + r0 + static_cast<int64_t>(i) * rows >= HW) continue;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const CT d = static_cast<CT>(v[i].v[k]) - K[k];
        s[k] += d;
        ss[k] += d * d;
      }
    }
    if constexpr (kCanHold) {
      if (held > 0) copy16_async_wait();
#pragma unroll 4
      for (int i = 0; i < held; ++i) {
        if (row0 + r0 + static_cast<int64_t>(kBlockVecs + i) * rows >= HW) break;
        const Vec<T, VEC> h = held_vecs[static_cast<int64_t>(i) * blockDim.x];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const CT d = static_cast<CT>(h.v[k]) - K[k];
          s[k] += d;
          ss[k] += d * d;
        }
      }
    }
  }
  stamp(1, static_cast<double>(s[0] + ss[0]));
  // Plane k, element r0 * tc + col (gn_cl::sums_plane). Threads past the last row slot (whole warps) hold
  // nothing and store nothing.
  if (active) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      part[k * plane + tid] = s[k];
      part_ss[k * plane + tid] = ss[k];
    }
  }
  __syncthreads();
  stamp(2, 0.0);
  // Column e = k * tc + col (channel j = col * VEC + k) down every row slot. `lanes` consecutive lanes add
  // interleaved row slots, then a shuffle tree; lanes * cw <= blockDim.x when lanes > 1 (the host's choice), so
  // every warp takes part whole (blockDim.x is a multiple of 32).
  auto channel_of = [&](int e) { return e % tc * VEC + e / tc; };
  auto column_at = [&](int e) { return e / tc * plane + e % tc; };  // column e's element in row slot 0
  auto cell = [&](int j) { return j % VEC * tc + j / VEC; };  // channel j's place in cK, ca, cshift: (VEC, tc)
  if (lanes > 1) {
    const int e = tid / lanes, sub = tid % lanes;
    double a = 0, b = 0;
    if (e < cw) {
      const int at = column_at(e);
      for (int r = sub; r < rows; r += lanes) {
        a += static_cast<double>(part[at + r * tc]);
        b += static_cast<double>(part_ss[at + r * tc]);
      }
    }
    for (int offset = lanes / 2; offset > 0; offset >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, offset);
      b += __shfl_xor_sync(0xffffffffu, b, offset);
    }
    if (e < cw && sub == 0) {
      const int j = channel_of(e);
      chan[2 * j] = a;
      chan[2 * j + 1] = b;
    }
  } else {
    for (int e = tid; e < cw; e += blockDim.x) {
      double a = 0, b = 0;
      const int at = column_at(e);
      for (int r = 0; r < rows; ++r) {
        a += static_cast<double>(part[at + r * tc]);
        b += static_cast<double>(part_ss[at + r * tc]);
      }
      const int j = channel_of(e);
      chan[2 * j] = a;
      chan[2 * j + 1] = b;
    }
  }
  if constexpr (CLUSTERED) ClusterView::sync();  // every CTA's chan complete and visible
  else __syncthreads();
  stamp(3, 0.0);
  // The sums of channel j over the whole tile: this CTA's, or (CLUSTERED) every rank's in rank order.
  auto channel_sums = [&](int j, double& a, double& b) {
    if constexpr (CLUSTERED) {
      for (int q = 0; q < ranks; ++q) {
        const double* peer = ClusterView::peer(chan, q);
        a += peer[2 * j];
        b += peer[2 * j + 1];
      }
    } else {
      a += chan[2 * j];
      b += chan[2 * j + 1];
    }
  };
  // The tile's groups: its channels' sums -> mean, rstd -> every channel's constants. A thread per group when
  // groups are narrow (a warp per group would queue the many groups of a wide tile on few warps), else a warp.
  const int g0 = tile_c0 / cpg, groups = cw / cpg;
  const double count = static_cast<double>(cpg) * static_cast<double>(HW);
  auto finish_group = [&](int q, double a, double b, int first, int stride) {
    const SliceNorm<CT> nm = norm_from_sums<CT>(a, b, count, cK[cell(q * cpg)], eps);
    if (first == 0 && rank == 0) write_stats(nm, mean_out, rstd_out, static_cast<int64_t>(n) * G + g0 + q);
    for (int j = q * cpg + first; j < (q + 1) * cpg; j += stride) {
      const CT aj = AFFINE ? nm.rstd * w[tile_c0 + j] : nm.rstd;
      ca[cell(j)] = aj;
      cshift[cell(j)] = (AFFINE ? bias[tile_c0 + j] : CT(0)) - nm.mean_k * aj;
    }
  };
  if (cpg <= 8) {
    for (int q = tid; q < groups; q += blockDim.x) {
      double a = 0, b = 0;
      for (int j = q * cpg; j < (q + 1) * cpg; ++j) channel_sums(j, a, b);
      finish_group(q, a, b, 0, 1);
    }
  } else {
    const int lane = tid & 31, warp = tid >> 5, warps = static_cast<int>(blockDim.x >> 5);
    for (int q = warp; q < groups; q += warps) {
      double a = 0, b = 0;
      for (int j = q * cpg + lane; j < (q + 1) * cpg; j += 32) channel_sums(j, a, b);
      finish_group(q, warp_sum(a), warp_sum(b), lane, 32);
    }
  }
  stamp(4, 0.0);
  // CLUSTERED: no CTA may leave (its shared memory with it) while a peer still reads its sums.
  if constexpr (CLUSTERED) ClusterView::sync();
  else __syncthreads();
  stamp(5, 0.0);
  if (active) {
    CT K[VEC], a[VEC], shift[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      K[k] = cK[k * tc + col];
      a[k] = ca[k * tc + col];
      shift[k] = cshift[k * tc + col];
    }
#pragma unroll
    for (int i = 0; i < kBlockVecs; ++i) {
      const int64_t r = row0 + r0 + static_cast<int64_t>(i) * rows;
      if (r >= HW) continue;
      CT z[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) z[k] = (static_cast<CT>(v[i].v[k]) - K[k]) * a[k] + shift[k];
      epi.apply(z);
      Vec<T, VEC> o;
#pragma unroll
      for (int k = 0; k < VEC; ++k) o.v[k] = static_cast<T>(z[k]);
      store_vec_streaming<T, VEC>(ys + r * C, o);
    }
    if constexpr (kCanHold) {
#pragma unroll 4
      for (int i = 0; i < held; ++i) {
        const int64_t r = row0 + r0 + static_cast<int64_t>(kBlockVecs + i) * rows;
        if (r >= HW) break;
        const Vec<T, VEC> h = held_vecs[static_cast<int64_t>(i) * blockDim.x];
        CT z[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) z[k] = (static_cast<CT>(h.v[k]) - K[k]) * a[k] + shift[k];
        epi.apply(z);
        Vec<T, VEC> o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = static_cast<T>(z[k]);
        store_vec_streaming<T, VEC>(ys + r * C, o);
      }
    }
  }
  if (stamps != nullptr) {  // once every thread has issued its stores
    __syncthreads();
    stamp(6, 0.0);
  }
}

// GROUPNORM_INLINE_CL_BLOCK_HOLD: `0` keeps the block plan's tiles in registers only (the plan before rows were
// held in shared memory), `waves` lets a plan that holds rows in shared memory take more clusters than are
// resident at once (benchmarks), `force` holds rows in shared memory wherever vectors are 16 bytes, on any number
// of CTAs (tests: small inputs reach the held rows); unset, the rule below. Read on every call (a getenv and a
// compare).
enum class BlockHold { kAuto, kOff, kWaves, kForce };
inline BlockHold block_hold_override() {
  const char* v = std::getenv("GROUPNORM_INLINE_CL_BLOCK_HOLD");
  if (v == nullptr) return BlockHold::kAuto;
  if (std::strcmp(v, "0") == 0) return BlockHold::kOff;
  if (std::strcmp(v, "waves") == 0) return BlockHold::kWaves;
  if (std::strcmp(v, "force") == 0) return BlockHold::kForce;
  return BlockHold::kAuto;
}

// GROUPNORM_INLINE_CL_BLOCK_MIN_CLUSTER: the smallest cluster size the block plan tries (benchmarks: compare a
// plan with its wider-tiled, larger-cluster neighbour); unset or not a power of two up to 16, 1.
inline int block_min_cluster() {
  const char* v = std::getenv("GROUPNORM_INLINE_CL_BLOCK_MIN_CLUSTER");
  if (v == nullptr) return 1;
  const int s = std::atoi(v);
  return s >= 1 && s <= 16 && (s & (s - 1)) == 0 ? s : 1;
}

// The block plan for this input, if it fits. Cluster sizes S = 1, 2, 4, ... (up to the device's largest
// cluster), the first that fits: each CTA holds ceil(HW / S) rows of a tile of cw channels (multiples of
// lcm(cpg, vec) dividing C), each thread kBlockVecs of them in registers, in tc * ceil(ceil(HW / S) / kBlockVecs)
// threads, at most kBlockMaxThreads (each thread holds as many rows as it can: the most of the tensor on chip per
// CTA, the fewest rows to reduce), and every cluster is resident at once (one wave). Among the widths that fit,
// the widest whose N * C / cw * S CTAs still cover every SM, else the narrowest (the most CTAs).
// Where the rows of a CTA outnumber kBlockVecs per thread of a full CTA (16-byte vectors only), the thread holds
// the rest in shared memory (`held` rows each, copied asynchronously): the tile stays on chip and is read once,
// with no grid-wide barrier and no global scratch (the cooperative launch's ~5 us of barriers and finalize at a
// few MB: benchmarks/NOTES.md, "The channels-last single launch, phase by phase"). Such a plan is taken only when
// its CTAs cover all but 1/8 of the SMs at most (a tile per cluster reads at the rate of the SMs it runs on), its
// tile rows are 64 bytes or more (kBlockHoldMinVecs), a thread holds kBlockMaxHeld rows at most, and never in place of a registers-only plan of the same
// cluster size.
template <typename T, int VEC, bool AFFINE, typename Epi>
BlockPlan block_plan(int64_t N, int64_t HW, int64_t C, int64_t cpg, int device) {
  using CT = typename Compute<T>::type;
  BlockPlan plan;
  if (N <= 0 || HW <= 0 || C <= 0 || C > (int64_t{1} << 30) || N * C > 0x7fffffff) return plan;
  const DeviceInfo& dev = device_info(device);
  const BlockHold hold = block_hold_override();
  const bool can_hold = sizeof(Vec<T, VEC>) == 16 && hold != BlockHold::kOff;
  const bool force = can_hold && hold == BlockHold::kForce;
  const int max_cluster = dev.major >= 9 ? 16 : 1;
  const int64_t unit = std::lcm(cpg, static_cast<int64_t>(VEC));
  for (int cluster = std::min(block_min_cluster(), max_cluster); cluster <= max_cluster && !plan.ok; cluster *= 2) {
    const void* kernel = cluster == 1 ? reinterpret_cast<const void*>(cl_block<T, VEC, AFFINE, Epi, false>)
                                      : reinterpret_cast<const void*>(cl_block<T, VEC, AFFINE, Epi, true>);
    const int64_t cta_rows = (HW + cluster - 1) / cluster;  // rows of the tile per CTA, at most
    for (int64_t cw = unit; cw <= C; cw += unit) {
      if (C % cw != 0) continue;
      const int64_t tc = cw / VEC;
      if (tc > kBlockMaxThreads) break;
      int64_t rows = (cta_rows + kBlockVecs - 1) / kBlockVecs;  // row slots: thread rows r0 + i * rows
      int held = 0;
      if (tc * rows > kBlockMaxThreads || force) {  // more rows than registers hold: the rest in shared memory,
        if (!can_hold || plan.ok) break;             // or wider tiles need more threads still
        // Rows of 4 vectors (64 bytes, two sectors) and up only: narrower tiles give each thread a long chain of
        // scattered 16-byte copies per row, and measured slower held than not (benchmarks/NOTES.md).
        if (tc < kBlockHoldMinVecs && !force) break;
        const int64_t slots = kBlockMaxThreads / tc;
        const int64_t per = std::max<int64_t>((cta_rows + slots - 1) / slots, force ? kBlockVecs + 1 : 0);
        if (per - kBlockVecs > (int64_t{1} << 16)) break;
        // At most kBlockMaxHeld rows per thread: every plan measured slower held than not had 24 (NOTES.md).
        if (per - kBlockVecs > kBlockMaxHeld && !force) break;
        rows = (cta_rows + per - 1) / per;
        held = static_cast<int>(per - kBlockVecs);
      }
      const int64_t per = kBlockVecs + held;
      if (cluster > 1 && (static_cast<int64_t>(cluster) - 1) * rows * per >= HW) continue;  // a rank of no rows
      const int threads = static_cast<int>((tc * rows + 31) / 32 * 32);
      const int64_t tiles = N * (C / cw), ctas = tiles * cluster;
      // Held plans cover all but at most 1/8 of the SMs (128 CTAs of an H200's 132: a tile of 1024 rows x 80
      // channels per CTA), or wider tiles only make fewer CTAs.
      if (held > 0 && ctas * 8 < int64_t{dev.sms} * 7 && !force) break;
      const size_t smem =
          block_smem<CT>(static_cast<int>(rows), static_cast<int>(tc), VEC, static_cast<int>(cw), threads, held);
      if (static_cast<int64_t>(smem) > dev.max_smem_optin - 1024) break;
      // Also opts the kernel into the shared memory and (cluster > 1) the non-portable cluster sizes.
      const int resident_clusters = max_active_clusters(kernel, device, cluster, threads, smem);
      if (resident_clusters < 1) break;
      const int64_t resident = cluster == 1 ? int64_t{resident_ctas_per_sm(kernel, device, threads, smem)} * dev.sms
                                            : int64_t{resident_clusters};
      const bool waves = held > 0 && hold == BlockHold::kWaves;
      if (tiles > resident && !waves) continue;  // more than one wave: wider tiles make fewer
      if (plan.ok && ctas < dev.sms) break;  // narrower tiles were already enough to cover the SMs
      int lanes = 1;
      while (lanes < 32 && lanes * 2 <= rows && cw * lanes * 2 <= threads) lanes *= 2;
      plan.ok = true;
      plan.cw = static_cast<int>(cw);
      plan.tc = static_cast<int>(tc);
      plan.rows = static_cast<int>(rows);
      plan.threads = threads;
      plan.lanes = lanes;
      plan.cluster = cluster;
      plan.held = held;
      plan.ctas = ctas;
      plan.smem = smem;
      if (ctas < dev.sms || held > 0) break;  // the SMs are not all covered already: wider tiles only make fewer
    }
  }
  return plan;
}

// Launches the block plan's kernel (a cluster launch when bp.cluster > 1).
template <typename T, int VEC, bool AFFINE, typename Epi>
void launch_block(const BlockPlan& bp, const T* x, T* y, ParamRef<T> w, ParamRef<T> bias,
                  typename Compute<T>::type* mean, typename Compute<T>::type* rstd, int64_t HW, int64_t C, int64_t G,
                  int64_t cpg, double eps, const gn_act::Params& act, cudaStream_t stream, int64_t* trace) {
  if (bp.cluster == 1) {
    cl_block<T, VEC, AFFINE, Epi, false><<<static_cast<unsigned>(bp.ctas), bp.threads, bp.smem, stream>>>(
        x, y, w, bias, mean, rstd, HW, static_cast<int>(C), static_cast<int>(G), static_cast<int>(cpg), bp.cw, bp.tc,
        bp.rows, bp.lanes, bp.held, eps, trace, make_epilogue<Epi>(act));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(bp.ctas));
  config.blockDim = dim3(static_cast<unsigned>(bp.threads));
  config.dynamicSmemBytes = bp.smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1] = {cluster_dim_attribute(bp.cluster)};
  config.attrs = attr;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, cl_block<T, VEC, AFFINE, Epi, true>, x, y, w, bias, mean, rstd, HW,
                                    static_cast<int>(C), static_cast<int>(G), static_cast<int>(cpg), bp.cw, bp.tc,
                                    bp.rows, bp.lanes, bp.held, eps, trace, make_epilogue<Epi>(act)));
}

// GROUPNORM_INLINE_CL_FORWARD_PLAN: `block` (the default rule), `fused` (never the block plan: the single
// cooperative launch where it fits, else three launches), `partial` (the single launch holding part of each
// tile, on inputs whose tiles would fit whole: for tests) or `three` (three launches always). Read on every call
// (a getenv and a compare) so that tests reach every plan and benchmarks alternate them call by call.
enum class ClPlanOverride { kAuto, kFused, kPartial, kThree };
inline ClPlanOverride cl_plan_override() {
  const char* v = std::getenv("GROUPNORM_INLINE_CL_FORWARD_PLAN");
  if (v == nullptr) return ClPlanOverride::kAuto;
  if (std::strcmp(v, "fused") == 0) return ClPlanOverride::kFused;
  if (std::strcmp(v, "three") == 0) return ClPlanOverride::kThree;
  if (std::strcmp(v, "partial") == 0) return ClPlanOverride::kPartial;
  return ClPlanOverride::kAuto;
}

template <typename T, int VEC, bool AFFINE, typename Epi>
void launch(const T* x, T* y, ParamRef<T> w, ParamRef<T> bias, typename Compute<T>::type* mean,
            typename Compute<T>::type* rstd, int64_t N, int64_t C, int64_t HW, int64_t G, double eps,
            const gn_act::Params& act, int device, cudaStream_t stream, const at::TensorOptions& opts,
            int64_t* trace) {
  using CT = typename Compute<T>::type;
  const int64_t cpg = C / G;
  const ClPlanOverride force = cl_plan_override();
  if (force == ClPlanOverride::kAuto) {
    const BlockPlan bp = block_plan<T, VEC, AFFINE, Epi>(N, HW, C, cpg, device);
    if (bp.ok) {
      TORCH_CHECK(trace == nullptr || bp.ctas <= int64_t{kClTraceMaxCtasPerSm} * device_info(device).sms,
                  "group_norm_channels_last_trace: more CTAs than the trace has rows");
      launch_block<T, VEC, AFFINE, Epi>(bp, x, y, w, bias, mean, rstd, HW, C, G, cpg, eps, act, stream, trace);
      return;
    }
  }
  const FusedPlan fp = force == ClPlanOverride::kThree
                           ? FusedPlan{}
                           : fused_plan<T, VEC, AFFINE, Epi>(N, HW, C, device, force == ClPlanOverride::kPartial);
  const bool fused = fp.kind != FusedKind::kNone;
  TORCH_CHECK(trace == nullptr || fused,
              "group_norm_channels_last_trace: this input takes the three-launch plan, which is not traced");
  TORCH_CHECK(trace == nullptr || fp.t.ctas() <= int64_t{kClTraceMaxCtasPerSm} * device_info(device).sms,
              "group_norm_channels_last_trace: more CTAs than the trace has rows");
  const Tiling t = fused ? fp.t : forward_tiling<T, VEC>(N, HW, C, device);
  const size_t smem = fused ? fp.smem : stats_smem(t);
  TORCH_CHECK(t.ctas() <= 0x7fffffff, gn_inline_msg::cat("group_norm_forward_cuda: channels-last input of ", N,
                                                          " samples needs more CTAs than one launch takes"));
  const int slots = max_slots(t, cpg);
  const bool fold = fused && fold_pays<CT>(t, cpg, slots);
  const int lanes = fold ? fold_lanes(t, slots) : finalize_lanes(t);
  at::Tensor partial = at::empty({t.ctas() * slots * 2}, opts.dtype(at::kDouble));
  at::Tensor norm = at::empty({static_cast<int64_t>(N * G * sizeof(SliceNorm<CT>))}, opts.dtype(at::kByte));
  auto* norm_ptr = reinterpret_cast<SliceNorm<CT>*>(norm.data_ptr());
  if (fused) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(t.ctas()));
    config.blockDim = dim3(static_cast<unsigned>(t.threads()));
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    if (fp.kind == FusedKind::kHeld || fp.kind == FusedKind::kPartial)
      C10_CUDA_CHECK(cudaLaunchKernelEx(&config, cl_fused<T, VEC, AFFINE, Epi, true>, x, y, w, bias,
                                        partial.data_ptr<double>(), norm_ptr, mean, rstd, t, G, cpg, slots, eps,
                                        lanes, fp.held_steps, fold, trace, make_epilogue<Epi>(act)));
    else
      C10_CUDA_CHECK(cudaLaunchKernelEx(&config, cl_fused<T, VEC, AFFINE, Epi, false>, x, y, w, bias,
                                        partial.data_ptr<double>(), norm_ptr, mean, rstd, t, G, cpg, slots, eps,
                                        lanes, int64_t{0}, fold, trace, make_epilogue<Epi>(act)));
    return;
  }
  cl_stats<T, VEC><<<static_cast<unsigned>(t.ctas()), t.threads(), smem, stream>>>(x, partial.data_ptr<double>(), t,
                                                                                 cpg, slots);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  cl_finalize<T><<<static_cast<unsigned>(ceil_div(N * G * lanes, 256)), 256, 0, stream>>>(
      x, partial.data_ptr<double>(), t, G, cpg, slots, eps, mean, rstd, norm_ptr, lanes);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  cl_apply<T, VEC, AFFINE, Epi><<<static_cast<unsigned>(t.ctas()), t.threads(), 0, stream>>>(
      x, y, w, bias, norm_ptr, t, G, cpg, make_epilogue<Epi>(act));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// x, y: (N, HW, C) channels-last. Epilogue instantiations as forward_typed: Identity without an activation,
// Fixed<kSilu> for SiLU on 16-byte vectors of float/half data, Runtime otherwise.
template <typename T, bool AFFINE>
void forward_typed(const at::Tensor& input, at::Tensor& y, const gn_inline_forward::AffineParams& params,
                   at::Tensor& mean, at::Tensor& rstd, int64_t G, int64_t HW, double eps, const gn_act::Params& act,
                   cudaStream_t stream, int64_t* trace) {
  using CT = typename Compute<T>::type;
  constexpr int V = vec16<T>();
  const int64_t N = input.size(0), C = input.size(1);
  const T* x = input.data_ptr<T>();
  T* out = y.data_ptr<T>();
  const ParamRef<T> w = AFFINE ? ParamRef<T>::of(params.w) : ParamRef<T>{};
  const ParamRef<T> b = AFFINE ? ParamRef<T>::of(params.b) : ParamRef<T>{};
  const auto is16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vectorised = C % V == 0 && is16(x) && is16(out);
  const int device = input.get_device();
  CT* m = mean.data_ptr<CT>();
  CT* r = rstd.data_ptr<CT>();
  const at::TensorOptions opts = input.options();
  if (act.kind == gn_act::kNone) {
    if (vectorised) launch<T, V, AFFINE, gn_act::Identity>(x, out, w, b, m, r, N, C, HW, G, eps, act, device, stream, opts, trace);
    else launch<T, 1, AFFINE, gn_act::Identity>(x, out, w, b, m, r, N, C, HW, G, eps, act, device, stream, opts, trace);
  } else if (act.kind == gn_act::kSilu && vectorised && !std::is_same_v<T, double>) {
    if constexpr (!std::is_same_v<T, double>)
      launch<T, V, AFFINE, gn_act::Silu>(x, out, w, b, m, r, N, C, HW, G, eps, act, device, stream, opts, trace);
  } else {
    if (vectorised) launch<T, V, AFFINE, gn_act::Runtime>(x, out, w, b, m, r, N, C, HW, G, eps, act, device, stream, opts, trace);
    else launch<T, 1, AFFINE, gn_act::Runtime>(x, out, w, b, m, r, N, C, HW, G, eps, act, device, stream, opts, trace);
  }
}

// What the forward does for a channels-last input of this shape (group_norm_forward_plan); launches nothing.
template <typename T>
std::string describe(const at::Tensor& input, int64_t G) {
  constexpr int V = vec16<T>();
  const int64_t N = input.size(0), C = input.size(1), HW = input.numel() / (N * C);
  const bool vectorised = C % V == 0 && reinterpret_cast<uintptr_t>(input.data_ptr()) % 16 == 0;
  const int device = input.get_device();
  const ClPlanOverride force = cl_plan_override();
  const BlockPlan bp = force != ClPlanOverride::kAuto ? BlockPlan{}
                       : vectorised ? block_plan<T, V, true, gn_act::Identity>(N, HW, C, C / G, device)
                                    : block_plan<T, 1, true, gn_act::Identity>(N, HW, C, C / G, device);
  if (bp.ok)
    return "channels_last block (one launch, " +
           (bp.cluster == 1 ? std::string("a CTA") : "a cluster of " + std::to_string(bp.cluster) + " CTAs") +
           " per sample and tile of " + std::to_string(bp.cw) +
           " channels, the tile held in registers" +
           (bp.held > 0 ? " and shared memory (" + std::to_string(bp.held) + " rows per thread)" : std::string()) +
           ", one read): " + std::to_string(bp.ctas) + " CTAs of " +
           std::to_string(bp.threads) + " threads, " + std::to_string(bp.rows) + " rows per step (vec " +
           std::to_string(vectorised ? V : 1) + ")";
  const bool partial = force == ClPlanOverride::kPartial;
  const FusedPlan fp = force == ClPlanOverride::kThree ? FusedPlan{}
                       : vectorised ? fused_plan<T, V, true, gn_act::Identity>(N, HW, C, device, partial)
                                    : fused_plan<T, 1, true, gn_act::Identity>(N, HW, C, device, partial);
  const Tiling t = fp.kind != FusedKind::kNone
                       ? fp.t
                       : (vectorised ? forward_tiling<T, V>(N, HW, C, device) : forward_tiling<T, 1>(N, HW, C, device));
  const char* kind = fp.kind == FusedKind::kHeld ? "channels_last fused (one cooperative launch, tiles held in shared "
                                                   "memory, one read): "
                     : fp.kind == FusedKind::kPartial
                         ? "channels_last fused (one cooperative launch, tiles partly held in shared memory): "
                     : fp.kind == FusedKind::kL2 ? "channels_last fused (one cooperative launch): "
                                                 : "channels_last (three launches): ";
  const int slots = max_slots(t, C / G);
  const bool fold = fp.kind != FusedKind::kNone && fold_pays<typename Compute<T>::type>(t, C / G, slots);
  const std::string held = fp.kind == FusedKind::kPartial
                               ? std::to_string(fp.held_steps) + " of " + std::to_string(tile_steps(t)) +
                                     " rows per thread held in shared memory, "
                               : std::string();
  return std::string(kind) + held +
         "statistics over " + std::to_string(t.ctas()) + " tiles of " + std::to_string(t.tile_rows) +
         " rows x " + std::to_string(t.cw) + " channels, " + std::to_string(t.threads()) + " threads each, " +
         (fold ? std::string("each CTA finalising its own groups (one grid barrier), ")
               : "finalize of " + std::to_string(N * G) + " groups, ") +
         "normalisation from the end of each tile (two reads, the second " +
         "from L2 where it holds; vec " + std::to_string(t.vec) + ")";
}

}  // namespace cl_forward

// input, y: (N, C, *) channels-last contiguous; params: (C,) affine (in the compute type or a half input's own
// dtype) or none; mean, rstd: (N, G).
void launch_forward_channels_last(const at::Tensor& input, at::Tensor& y, const gn_inline_forward::AffineParams& params,
                                  at::Tensor& mean, at::Tensor& rstd, int64_t G, int64_t HW, double eps,
                                  const gn_act::Params& act, cudaStream_t stream, int64_t* trace = nullptr) {
  TORCH_CHECK_NOT_IMPLEMENTED(gn_inline_forward::dispatched_type(input.scalar_type()),
                              gn_inline_msg::not_implemented_for("group_norm_forward_cuda", input.scalar_type()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "group_norm_forward_cuda", [&] {
    if (params.affine()) cl_forward::forward_typed<scalar_t, true>(input, y, params, mean, rstd, G, HW, eps, act, stream, trace);
    else cl_forward::forward_typed<scalar_t, false>(input, y, params, mean, rstd, G, HW, eps, act, stream, trace);
  });
}
"""
