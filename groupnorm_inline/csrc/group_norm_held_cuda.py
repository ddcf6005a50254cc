"""CUDA source of the forward's `held` plan: few large slices in one cooperative launch, held in shared memory.

The split plan (group_norm_cuda.py) reads x twice: partial sums of chunks, then the normalisation of the same
chunks, the second read served by L2 where the first read's last chunks are still there. A tensor of more than
about half the L2 (25 MB on an H100) pays most of that second read in HBM traffic. The GPU's shared memory is as
large as half its L2 (132 SMs x 228 KB = 29 MB on an H100 or H200) and idle in that plan. This plan
runs the same items (item = slice * splits + split, `chunk` elements of one slice) as one cooperative launch in
which every CTA stays resident and keeps the vectors it reads first in its shared memory:

  1 statistics  CTA b takes items b, b + grid, ... (its rounds, at most kHeldMaxRounds): shifted sums per item
                into partial (items, 2) doubles; the first `held_vecs` vectors of the CTA's walk are also kept
                in shared memory (read with an L2 evict_first hint: never needed from L2 again), the rest of
                the last items with evict_last (the normalisation reads them first), the others evict_first.
  -- one grid-wide barrier --
  2 constants   each CTA folds the partial sums of its own items' slices (splits <= threads: one load per
                thread and slice, no second barrier); a few slices of many items each (splits > threads) are
                folded once, a CTA per slice, and the grid waits a second time.
  3 normalise   the CTA's items from its last (still in L2) to its first (in its shared memory), streaming
                stores.

Traffic: x read once plus what neither shared memory nor L2 kept; y written once. The host sizes the rounds so
that each CTA's items together are about (tensor bytes / grid), at most kHeldMaxRounds times its shared memory
when forced by name and kHeldAutoMaxRounds in the automatic choice (tensors up to ~4x the GPU's shared memory,
~118 MB); larger ones take the resident plan in waves or the split plan, where the share held would be small.
Items start at multiples of VEC in their slice. Slices whose length is not a multiple of VEC start at another
alignment each (x and y sharing it, which the host checks): each item is cut as in AlignedSplit, its aligned body
moved (and held) in vectors, its head and tail (< VEC elements each) taken one element per thread, summed with
the body and re-read from global memory when normalised. Numerics as the split plan: sums of (x - K), K the
slice's first element, in float per unrolled batch, folded into double, combined in double in a fixed order (no
atomics).
"""

HELD_FORWARD_CUDA = r"""
// (inside namespace gn_inline, after the split plan's kernels and the host helpers of group_norm_cuda)

constexpr int kHeldMaxRounds = 8;  // items per CTA at most (their constants are kept in shared memory)
// The automatic choice takes the plan up to 4 rounds (tensors up to ~4x the GPU's shared memory, ~118 MB on an
// H100 or H200): on an H200 (benchmarks/plan_check.py --rows held,waves,split,one-round) it was 2-19% faster
// than the automatic plan of the time from 14 to 79 MB (<= 3 rounds) and 1% slower at 134 MB (5 rounds), where
// the held share is small and the per-item folds add up.
constexpr int kHeldAutoMaxRounds = 4;
// CTAs per SM, each with an equal share of the SM's shared memory: 3 and 4 measured alike and 1-8% faster
// than 2 where the input exceeds shared memory (more loads in flight per SM); 1 was 10-25% slower everywhere.
constexpr int kHeldCtasPerSm = 3;
// The kernel's launch bounds cap its registers at 80 so that kHeldCtasPerSm CTAs share an SM, in every dtype.
// (bfloat16 once ran 2 per SM: converted element by element it needed 115 registers, and capped at 80 it spilled
// and ran 18-20% slower, H200, 2026-11-28; converted in pairs (vec_to_compute) it fits 80 without a spill.)

// The vectors of one thread in one item, as a count: thread t takes the item's vectors t, t + threads, ...; the
// first `held` of them (k < held) are the ones with a place in shared memory. Loops over them go in batches of
// kUnroll loads in flight, the last batch guarded.
template <typename T, int VEC, typename Load, typename Use, typename Batch>
__device__ __forceinline__ void held_batches(int k0, int k1, Load load, Use use, Batch batch_done) {
  int k = k0;
  for (; k + kUnroll <= k1; k += kUnroll) {
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load(k + u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) use(k + u, v[u]);
    batch_done();
  }
  if (k < k1) {
    Vec<T, VEC> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (k + u < k1) v[u] = load(k + u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (k + u < k1) use(k + u, v[u]);
    batch_done();
  }
}

// One cooperative launch, kThreads threads per CTA, held_vecs * sizeof(Vec<T, VEC>) bytes of dynamic shared
// memory. x, y: (slices, D), x and y at the same offset from a 16-byte boundary; item = slice * splits + split
// covers [split * chunk, min(D, (split + 1) * chunk)) of its slice, chunk a multiple of 32 * VEC, cut into an
// element-wise head, a body of vectors and an element-wise tail (AlignedSplit; head = tail = 0 where the slice
// starts at a 16-byte boundary and D % VEC == 0). partial: (items, 2);
// per_cta_fold: each CTA folds its own slices' partial sums (needs splits <= blockDim.x), else a CTA per slice
// folds it once into norm (slices,) and the grid waits a second time. l2_first: items from it on are read
// evict_last (unless held); < 0: no hints on items not held. hw: HW as a multiply-shift divisor.
// Launch bounds: kHeldCtasPerSm CTAs per SM must fit the registers.
template <typename T, int VEC, bool AFFINE, typename Epi>
__global__ void __launch_bounds__(kThreads, kHeldCtasPerSm) gn_held(
    const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w, ParamRef<T> b,
    typename Compute<T>::type* __restrict__ mean_out, typename Compute<T>::type* __restrict__ rstd_out,
    double* __restrict__ partial, SliceNorm<typename Compute<T>::type>* __restrict__ norm, int64_t slices,
    int splits, int64_t G, int64_t cpg, int HW, int D, int chunk, int held_vecs, int64_t l2_first, double eps,
    bool per_cta_fold, FastDivisor hw, Epi epi) {
  using C = typename Compute<T>::type;
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char gn_held_smem[];
  Vec<T, VEC>* held = reinterpret_cast<Vec<T, VEC>*>(gn_held_smem);
  __shared__ double scratch[64];
  __shared__ SliceNorm<C> norms[kHeldMaxRounds];
  const cg::grid_group grid = cg::this_grid();
  const int64_t ctas = gridDim.x, items = slices * splits;
  const int rounds = static_cast<int>((items - blockIdx.x + ctas - 1) / ctas);  // grid <= items: >= 1
  const int tid = threadIdx.x, threads = blockDim.x, stride = threads * VEC;
  const int chunk_vecs = chunk / VEC;
  const uint64_t first = l2_policy_evict_first(), last = l2_policy_evict_last(), normal = l2_policy_evict_normal();
  // The item of round r, and its slice: every thread of the CTA computes the same (block-uniform).
  auto item_of = [&](int r) { return static_cast<int64_t>(blockIdx.x) + r * ctas; };
  // Round r's item: its slice, the range [begin, end) of the slice, and that range's cut at 16-byte boundaries.
  // Vector k of this thread: slice offset body + tid * VEC + k * stride (body = begin + cut.head); shared-memory
  // index r * chunk_vecs + tid + k * threads (a body has fewer than chunk_vecs vectors where head > 0), held
  // while that is < held_vecs, i.e. for k < held_count(r). edge: the head or tail element this thread takes
  // (-1: none).
  struct Range {
    int64_t slice;
    int body, count, edge;
  };
  auto range_of = [&](int r) {
    Range g;
    const int64_t item = item_of(r);
    g.slice = item / splits;
    const int begin = static_cast<int>(item - g.slice * splits) * chunk;
    const int end = begin + chunk < D ? begin + chunk : D;
    const AlignedSplit<T, int, VEC> cut(x + g.slice * D, begin, end);
    g.body = begin + cut.head;
    g.edge = cut.edge_element(begin, end, tid);
    const int left = cut.body_end - g.body - tid * VEC;
    g.count = left > 0 ? (left + stride - 1) / stride : 0;
    return g;
  };
  auto held_count = [&](int r, int count) {
    const int room = held_vecs - r * chunk_vecs - tid;
    const int n = room > 0 ? (room + threads - 1) / threads : 0;
    return n < count ? n : count;
  };

  // 1. Statistics: the held vectors (read evict_first, stored to shared memory), then the others.
  for (int r = 0; r < rounds; ++r) {
    const Range g = range_of(r);
    const int64_t slice = g.slice;
    const int count = g.count, kept = held_count(r, count);
    const T* xt = x + slice * D + g.body + tid * VEC;
    Vec<T, VEC>* ht = held + r * chunk_vecs + tid;
    const C K = static_cast<C>(x[slice * D]);
    const uint64_t rest = l2_first < 0 ? normal : (item_of(r) >= l2_first ? last : first);
    double s = 0, ss = 0;
    if (g.edge >= 0) {  // a head or tail element, in double as shifted_sums takes them
      const double d = static_cast<double>(static_cast<C>(x[slice * D + g.edge]) - K);
      s += d;
      ss += d * d;
    }
    C ls = 0, lss = 0;
    auto sum = [&](int, const Vec<T, VEC>& v) { add_shifted<T, VEC>(v, K, ls, lss); };
    auto flush = [&] {  // a batch's float sums into double (the split plan's numerics)
      s += ls;
      ss += lss;
      ls = lss = 0;
    };
    held_batches<T, VEC>(
        0, kept, [&](int k) { return load_vec_hinted<T, VEC, true>(xt + k * stride, first); },
        [&](int k, const Vec<T, VEC>& v) {
          ht[k * threads] = v;
          sum(k, v);
        },
        flush);
    held_batches<T, VEC>(
        kept, count, [&](int k) { return load_vec_hinted<T, VEC, true>(xt + k * stride, rest); }, sum, flush);
    block_sum2(s, ss, scratch);
    if (tid == 0) {
      partial[item_of(r) * 2] = s;
      partial[item_of(r) * 2 + 1] = ss;
    }
  }
  grid.sync();

  // 2. The constants of the CTA's items (norms[r] for round r). Partial sums and norm were written by other
  // CTAs before a grid barrier: read through L2 (__ldcg), never from this SM's L1.
  if (per_cta_fold) {
    // Each CTA folds its own slices: thread t loads split t of each round's slice (a round whose slice is the
    // previous round's reuses its constants), all loads issued before the first reduction.
    double s[kHeldMaxRounds], ss[kHeldMaxRounds];
#pragma unroll
    for (int r = 0; r < kHeldMaxRounds; ++r) {
      s[r] = ss[r] = 0.0;
      if (r < rounds && tid < splits) {
        const int64_t slice = item_of(r) / splits;
        if (r == 0 || slice != item_of(r - 1) / splits) {
          s[r] = __ldcg(partial + (slice * splits + tid) * 2);
          ss[r] = __ldcg(partial + (slice * splits + tid) * 2 + 1);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kHeldMaxRounds; ++r) {
      if (r >= rounds) continue;  // block-uniform, as the repeat test below
      const int64_t item = item_of(r), slice = item / splits;
      if (r > 0 && slice == item_of(r - 1) / splits) continue;
      block_sum2(s[r], ss[r], scratch);
      if (tid == 0) {
        const SliceNorm<C> nm = norm_from_sums<C>(s[r], ss[r], static_cast<double>(D),
                                                  static_cast<C>(x[slice * D]), eps);
        norms[r] = nm;
        if (item - slice * splits == 0) write_stats(nm, mean_out, rstd_out, slice);
      }
    }
    if (tid == 0)
      for (int r = 1; r < rounds; ++r)
        if (item_of(r) / splits == item_of(r - 1) / splits) norms[r] = norms[r - 1];
  } else {
    // Few slices of many items: CTA k folds slices k, k + grid, ... once, and the grid waits for them.
    for (int64_t slice = blockIdx.x; slice < slices; slice += ctas) {  // block-uniform bounds
      double s = 0, ss = 0;
      for (int k = tid; k < splits; k += threads) {
        s += __ldcg(partial + (slice * splits + k) * 2);
        ss += __ldcg(partial + (slice * splits + k) * 2 + 1);
      }
      block_sum2(s, ss, scratch);
      if (tid == 0) {
        const SliceNorm<C> nm = norm_from_sums<C>(s, ss, static_cast<double>(D), static_cast<C>(x[slice * D]), eps);
        norm[slice] = nm;
        write_stats(nm, mean_out, rstd_out, slice);
      }
    }
    grid.sync();
    if (tid < rounds) {
      const SliceNorm<C>* src = norm + item_of(tid) / splits;
      norms[tid] = SliceNorm<C>{__ldcg(&src->K), __ldcg(&src->mean_k), __ldcg(&src->rstd)};
    }
  }
  __syncthreads();

  // 3. Normalise the CTA's items from its last round (read last: the likeliest in L2) to its first (held), in
  // each the vectors re-read from global memory first, then the held ones.
  for (int r = rounds - 1; r >= 0; --r) {
    const Range g = range_of(r);
    const int64_t slice = g.slice;
    const int count = g.count, kept = held_count(r, count);
    const SliceNorm<C> nm = norms[r];
    const int j0 = g.body + tid * VEC;  // slice offset of vector 0
    const T* xt = x + slice * D + j0;
    T* yt = y + slice * D + j0;
    const Vec<T, VEC>* ht = held + r * chunk_vecs + tid;
    const int64_t c0 = (slice % G) * cpg;
    const ParamRef<T> wg = AFFINE ? w + c0 : w, bg = AFFINE ? b + c0 : b;
    // Vectors at slice offsets that are multiples of VEC, with HW one too, each lie in one channel.
    const bool channel_per_vec = HW % VEC == 0 && g.body % VEC == 0;
    if (g.edge >= 0) {
      Vec<T, 1> v;
      v.v[0] = x[slice * D + g.edge];
      y[slice * D + g.edge] = normalize_vec<T, int, 1, AFFINE, Epi>(v, g.edge, HW, true, wg, bg, nm, epi).v[0];
    }
    auto store = [&](int k, const Vec<T, VEC>& v) {
      const int j = j0 + k * stride;
      store_vec_streaming<T, VEC>(yt + k * stride,
                                  channel_per_vec
                                      ? normalize_in_channel<T, VEC, AFFINE, Epi>(v, AFFINE ? hw.div(j) : 0, wg, bg, nm, epi)
                                      : normalize_vec<T, int, VEC, AFFINE, Epi>(v, j, HW, false, wg, bg, nm, epi));
    };
    held_batches<T, VEC>(
        kept, count, [&](int k) { return load_vec_hinted<T, VEC, true>(xt + k * stride, first); }, store, [] {});
    held_batches<T, VEC>(0, kept, [&](int k) { return ht[k * threads]; }, store, [] {});
  }
}

struct HeldOptions {
  int ctas_per_sm = kHeldCtasPerSm;
  int l2_keep_pct = kSplitL2KeepPct;  // share of the L2 kept (evict_last) for the items not held; 0: no hints
  int64_t smem_cap = -1;              // bytes of shared memory per CTA at most (tests: partial holds); -1: no cap
  bool grid_finalize = false;         // fold each slice once and wait a second time, whatever splits is (tests)
  int max_rounds = kHeldMaxRounds;    // items per CTA at most (the automatic choice: kHeldAutoMaxRounds)
};

// The held plan's geometry for one problem on one device; ok false where the plan cannot take it.
struct HeldGeometry {
  bool ok = false;
  int64_t grid = 0, per_sm = 0, held_vecs = 0, splits = 0, chunk = 0, items = 0, rounds = 0, l2_first = -1;
  size_t smem = 0;
};

template <typename T, int VEC, bool AFFINE, typename Epi>
HeldGeometry held_geometry(const Problem& pr, const HeldOptions& opt) {
  HeldGeometry g;
  const DeviceInfo& dev = device_info(pr.device);
  if (!dev.cooperative || pr.D >= (int64_t(1) << 30) || opt.ctas_per_sm < 1) return g;
  const void* kernel = reinterpret_cast<const void*>(gn_held<T, VEC, AFFINE, Epi>);
  const int64_t vec_bytes = static_cast<int64_t>(sizeof(Vec<T, VEC>));
  // CTAs per SM: as asked, as far as the kernel's registers allow. max_active_clusters first: it lets the
  // kernel opt into more than 48 KB of dynamic shared memory.
  (void)max_active_clusters(kernel, pr.device, 1, kThreads, 0);
  const int per_sm = std::min(opt.ctas_per_sm, resident_ctas_per_sm(kernel, pr.device, kThreads, 0));
  if (per_sm < 1) return g;
  // An equal share of the SM's shared memory per CTA, less what the driver reserves per CTA and the kernel's
  // static shared memory (~1.2 KB together); backed off until the occupancy query agrees.
  int64_t share = std::min<int64_t>(dev.max_smem_optin, dev.smem_per_sm / per_sm) - 2048;
  if (opt.smem_cap >= 0) share = std::min(share, opt.smem_cap);
  int64_t held_vecs = std::max<int64_t>(0, share / vec_bytes);
  for (;; held_vecs = held_vecs * 7 / 8) {
    const size_t smem = static_cast<size_t>(held_vecs * vec_bytes);
    if (resident_ctas_per_sm(kernel, pr.device, kThreads, smem) >= per_sm) {
      g.smem = smem;
      break;
    }
    if (held_vecs == 0) return g;
  }
  g.per_sm = per_sm;
  g.held_vecs = held_vecs;
  const int64_t resident = g.per_sm * dev.sms;
  // Rounds: the fewest whose items (each about tensor / (rounds * grid)) fit the CTAs' shared memory in their
  // first round; the items are then spread evenly, a whole number of chunks of 32 * VEC elements per slice.
  const int64_t bytes = pr.slices * pr.D * static_cast<int64_t>(sizeof(T));
  const int64_t held_bytes = std::max<int64_t>(1, held_vecs * vec_bytes);
  const int64_t rounds = ceil_div(bytes, resident * held_bytes);
  if (rounds > std::min(opt.max_rounds, kHeldMaxRounds)) return g;
  const int64_t quantum = 32 * VEC;
  int64_t splits = std::max<int64_t>(1, rounds * resident / pr.slices);
  g.chunk = ceil_div(ceil_div(pr.D, splits), quantum) * quantum;
  g.splits = ceil_div(pr.D, g.chunk);
  g.items = pr.slices * g.splits;
  g.grid = std::min(g.items, resident);
  g.rounds = ceil_div(g.items, g.grid);
  if (g.rounds > std::min(opt.max_rounds, kHeldMaxRounds) || g.splits > 0x7fffffff) return g;
  const int64_t item_bytes = g.chunk * static_cast<int64_t>(sizeof(T));
  const int64_t keep_items = std::min<int64_t>(g.items, dev.l2_bytes / 100 * opt.l2_keep_pct / item_bytes);
  g.l2_first = opt.l2_keep_pct > 0 ? g.items - keep_items : -1;
  g.ok = true;
  return g;
}

template <typename T, int VEC, bool AFFINE, typename Epi>
bool try_launch_held(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts, const HeldOptions& opt) {
  using C = typename Compute<T>::type;
  const HeldGeometry g = held_geometry<T, VEC, AFFINE, Epi>(pr, opt);
  if (!g.ok) return false;
  const bool grid_finalize = opt.grid_finalize || g.splits > kThreads;
  if (pr.plan) {
    const int64_t held_kb = g.held_vecs * static_cast<int64_t>(sizeof(Vec<T, VEC>)) / 1024;
    *pr.plan = "held: one cooperative launch of " + std::to_string(g.grid) + " CTAs (" + std::to_string(g.per_sm) +
               " per SM), " + std::to_string(held_kb) + " KB of each CTA's items held in shared memory, " +
               std::to_string(g.rounds) + " round(s) of " + std::to_string(g.splits) + " items per slice, " +
               (grid_finalize ? "constants folded once per slice (two grid barriers)"
                              : "constants folded by each CTA (one grid barrier)") +
               (g.l2_first < 0 ? std::string(", no L2 hints") : std::string(", the rest's last items kept in L2")) +
               " (vec " + std::to_string(VEC) + ")";
    return true;
  }
  at::Tensor partial = at::empty({g.items * 2}, opts.dtype(at::kDouble));
  at::Tensor norm;
  SliceNorm<C>* norm_ptr = nullptr;
  if (grid_finalize) {
    norm = at::empty({static_cast<int64_t>(pr.slices * sizeof(SliceNorm<C>))}, opts.dtype(at::kByte));
    norm_ptr = reinterpret_cast<SliceNorm<C>*>(norm.data_ptr());
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(g.grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = g.smem;
  config.stream = pr.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, gn_held<T, VEC, AFFINE, Epi>, p.x, p.y, p.w, p.b, p.mean, p.rstd,
                                    partial.data_ptr<double>(), norm_ptr, pr.slices, static_cast<int>(g.splits), pr.G,
                                    pr.cpg, static_cast<int>(pr.HW), static_cast<int>(pr.D), static_cast<int>(g.chunk),
                                    static_cast<int>(g.held_vecs), g.l2_first, pr.eps, !grid_finalize,
                                    FastDivisor(std::max<int64_t>(pr.HW, 1)), make_epilogue<Epi>(pr.act)));
  return true;
}
"""
