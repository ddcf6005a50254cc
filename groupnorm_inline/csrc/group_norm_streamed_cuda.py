"""CUDA source of the forward's `streamed` plan: slices too large for 16 SMs' shared memory, one HBM read.

A persistent grid of groups of 16 CTAs (one per SM) walks the (n, g) slices: group k takes slices k, k +
groups, ... CTA rank r of a group owns the part [r * part, (r + 1) * part) of every slice it visits, and holds
that part across the statistics exchange in three places, in this order of offsets:

  shared memory  `smem_elems` (up to ~220 KB), in chunks filled by bulk asynchronous copies (cp.async.bulk on
                 an mbarrier per chunk). Each warp owns every warps-th chunk: it waits for it, sums it, and
                 after normalising it refills it at once with the same chunk of the group's next slice, so
                 the next slice's loads stream in while this one is still being written.
  registers      `reg_vecs` 16-byte vectors per thread (128 KB for 512 threads), loaded with an L2
                 evict-first hint.
  L2 tail        whatever is left: read with an evict-last hint while summing, read again from L2 (evict-
                 first) right after the exchange. The host admits the plan only when the tails of every
                 group in flight fit half the L2, so the second read stays on chip.

Two ways to form a group, and its exchange of the CTA sums:

  groups of a cooperative launch (the automatic choice wherever the device has cooperative launches): the
                 grid is every resident CTA rounded down to whole groups of 16 (8 groups, 128 of an H200's
                 132 SMs), consecutive CTAs form a group, each posts its (s, ss) to global memory and counts
                 itself on the group's arrival word (release), thread 0 polls it (acquire) until the whole
                 group has posted, and every CTA adds the 16 posts in rank order (the same sums everywhere).
  thread-block clusters of 16 (else 8): sums through distributed shared memory and one cluster barrier. A
                 16-CTA cluster must fit inside one GPC, and an H200's GPCs hold only 7 of them at once
                 (112 SMs): the grouped launch was faster for that reason alone (#35 below).

The exchange thus costs the same chain of waits either way (the slowest warp, then the group's slowest CTA:
the 16 CTAs reach it ~3-5 us apart); through global memory that phase took 3.5-4.5 us a round on an H200
against 2.5 us with the cluster barrier.

For #35 in float32 (8 MB slices, 512 KB parts) a CTA holds 225 KB in shared memory, 128 KB in registers and
~160 KB in L2, ~20 MB of tails in L2 for 8 groups; in bfloat16 (256 KB parts) 96 KB, 128 KB and 32 KB
(see streamed_geometry for the rule and the measurements behind it).

Where a round's time goes (H100, #35 float32, ~51 us per round against ~38 us of data movement at copy
speed; `benchmarks/plan_check.py --trace streamed`): waiting for the refilled chunks ~9 us, the L2 tail's
first read ~7 us (latency-bound), waiting for the CTA's slowest warp ~4 us and for the cluster's slowest CTA
~3-4 us (the 16 CTAs reach the barrier ~5 us apart), then ~23 us of writes. An SM issues no memory traffic
while it waits at the exchange; clusters run out of phase, so others fill part of that gap, not all of it.

When it pays (the automatic choice): the plan saves one read of the input against the split plan and pays
that exchange per round. Measured on an H100 (copy of the tensor 4.97 ms fp32 / 2.49 ms bf16), with clusters:
#35 float32 6.50 ms streamed, 7.85 ms split; bfloat16 3.28 ms streamed, 3.95 ms split. On an H200 (copy 3.52 /
1.78 ms, torch.compile 5.34-5.55 / 3.37-3.42, two machines, benchmarks/results/nvidia-h200-2026-12-03-streamed-
groups.txt): float32 clusters 5.44-5.47 ms, groups of 16 5.14-5.23, split 5.62-5.68; bfloat16 2.87-2.88, 2.60-
2.64, 2.84-2.90. The same groups with other sizes were slower (float32 groups of 22 on all 132 SMs 5.76 ms,
18: 5.56, 33: 5.62; bfloat16 groups of 8: 2.83, 11-12: 3.47-3.51): the 16-CTA parts are the measured best
split of a slice, and the grouped launch only removes the placement rule that idled 20 SMs. It is taken for
parts of at least 256 KB per CTA (smaller slices fit the resident plan, or are few enough that the persistent
grid would idle), and only while the L2 tails of all groups fit half the L2.

Numerics as in the other plans: shifted sums (K = the slice's first element) in float per chunk, folded
into double per thread, combined in double.
"""

STREAMED_FORWARD_CUDA = r"""
// (inside namespace gn_inline, after the host helpers of group_norm_cuda)

constexpr int kStreamThreads = 512;
constexpr int kStreamRegVecs = 16;     // register-held vectors per thread (64 registers for 16-byte vectors)
constexpr int kStreamMaxChunks = 64;   // mbarriers, one per shared-memory chunk
constexpr int64_t kStreamMinPartBytes = 256 * 1024;  // smaller parts: not measured (see above)
constexpr int64_t kStreamMinRounds = 16;                // slices per resident cluster (see try_launch_streamed)
// CTAs per slice of the automatic grouped launch: the 16-CTA cluster's parts, without the cluster's placement
// rule (all 16 CTAs inside one GPC), which left 20 of an H200's 132 SMs idle (see the module docstring).
constexpr int kStreamGroupCtas = 16;
// Phase trace (plan option trace=1; the diagnostics operator group_norm_streamed_trace): thread 0 of every
// CTA stamps %globaltimer at these points of its first kTraceRounds rounds.
constexpr int kTraceRounds = 256;
constexpr int kTracePoints = 9;  // start, chunks summed, registers summed, tail summed, CTA sums reduced,
                                 // slice sums exchanged, tail written, registers written, chunks written

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Arms the barrier for one phase that completes when `bytes` have landed (this thread's arrival included).
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global into this CTA's
// shared memory, counted on `bar`.
__device__ __forceinline__ void bulk_copy_to_smem(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                  uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
// The grouped exchange's arrival counter: a release add (orders this thread's partial-sum stores before it) and
// an acquire load (the partials of every CTA counted are visible after it).
__device__ __forceinline__ void red_add_release_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
#endif

// The exchange of a launch without clusters (`group` > 0): the grid's CTAs in groups of `group` consecutive
// ones, one slice per group at a time, CTA sums through global memory. group == 0: thread-block clusters,
// CTA sums through distributed shared memory.
struct StreamGroups {
  int group = 0;
  unsigned* arrivals = nullptr;  // (grid / group,), zero at launch: the group's CTAs that have posted, all rounds
  double* partials = nullptr;    // (grid / group, 2 round parities, group, 2): each CTA's (s, ss) of a round
};

// x, y: (slices, D) contiguous, D < 2^30, 16-byte vectors (VEC * sizeof(T) == 16), D % VEC == 0.
// part, smem_elems, chunk_elems: multiples of VEC. Grid: (clusters or groups) * CS CTAs of kStreamThreads.
// PER_VEC_CHANNEL: the affine coefficients are looked up per vector (a CTA's part spans channels). Otherwise
// they are fixed for the round: no weight (w == nullptr), or every CTA's part lies in one channel (#35: half
// a channel per CTA); per-vector lookups cost ~5% of the round there, mostly through register pressure.
// TRACE: stamp the phases into `trace` (the diagnostics operator's own instantiation).
template <typename T, int VEC, bool PER_VEC_CHANNEL, bool TRACE, typename Epi>
__global__ void __launch_bounds__(kStreamThreads, 1) gn_streamed(
    const T* __restrict__ x, T* __restrict__ y, ParamRef<T> w,
    ParamRef<T> b, typename Compute<T>::type* __restrict__ mean_out,
    typename Compute<T>::type* __restrict__ rstd_out, int64_t slices, int64_t G, int channels_per_group, int HW,
    int D, int part, int smem_elems, int chunk_elems, int reg_vecs, double eps, int64_t* __restrict__ trace,
    StreamGroups groups, Epi epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using C = typename Compute<T>::type;
  using V = Vec<T, VEC>;
  cg::cluster_group cluster = cg::this_cluster();
  // A group's CTAs play the part of a cluster's: `rank` owns part `rank` of the slice, `cluster_size` per slice.
  const bool grouped = groups.group > 0;
  const int rank = grouped ? static_cast<int>(blockIdx.x % groups.group) : static_cast<int>(cluster.block_rank());
  const int cluster_size = grouped ? groups.group : static_cast<int>(cluster.num_blocks());
  const int64_t clusters = gridDim.x / cluster_size;
  extern __shared__ __align__(128) unsigned char streamed_smem[];
  T* buf = reinterpret_cast<T*>(streamed_smem);
  __shared__ uint64_t chunk_full[kStreamMaxChunks];
  __shared__ double scratch[64];
  __shared__ double cta_sums[2][2];  // by iteration parity: a peer may still read the previous one
  __shared__ double slice_sums[2];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const int begin = rank * part;
  const int end = min(D, begin + part);
  const int n = max(0, end - begin);
  const int ns = min(n, smem_elems);                                   // [begin, begin + ns): shared memory
  const int reg_begin = begin + ns;
  const int tail_begin = reg_begin + min(n - ns, static_cast<int>(blockDim.x) * VEC * reg_vecs);  // registers
  const int nchunks = (ns + chunk_elems - 1) / chunk_elems;            // [tail_begin, end): L2
  const uint64_t evict_first = l2_policy_evict_first();
  const uint64_t evict_last = l2_policy_evict_last();

  // Lane 0 of each warp copies the warp's chunks of `slice` into shared memory.
  auto fill_chunk = [&](int k, int64_t slice) {
    const int off = k * chunk_elems;
    const uint32_t bytes = static_cast<uint32_t>(min(chunk_elems, ns - off)) * sizeof(T);
    mbarrier_expect_bytes(&chunk_full[k], bytes);
    bulk_copy_to_smem(buf + off, x + slice * static_cast<int64_t>(D) + begin + off, bytes, &chunk_full[k],
                      evict_first);
  };

  // Thread 0's view of the phases.
  auto stamp = [&](uint32_t it, int point) {
    if constexpr (TRACE) {
      if (tid == 0 && it < kTraceRounds)
        trace[(static_cast<int64_t>(blockIdx.x) * kTraceRounds + it) * kTracePoints + point] = global_timer_ns();
    }
  };

  if (tid == 0) {
    for (int k = 0; k < nchunks; ++k) mbarrier_init(&chunk_full[k], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int64_t slice = blockIdx.x / cluster_size;
  if (lane == 0 && slice < slices)
    for (int k = warp; k < nchunks; k += warps) fill_chunk(k, slice);

  for (uint32_t it = 0; slice < slices; slice += clusters, ++it) {
    const T* xs = x + slice * static_cast<int64_t>(D);
    T* ys = y + slice * static_cast<int64_t>(D);
    const C K = static_cast<C>(xs[0]);
    const int64_t next = slice + clusters;
    stamp(it, 0);

    // 1. statistics: issue the register loads, sum the shared-memory chunks while they fly, then the
    //    registers, then stream the tail through L2 (kept there for the second read).
    uint4 r[kStreamRegVecs];
#pragma unroll
    for (int u = 0; u < kStreamRegVecs; ++u) {
      const int j = reg_begin + (u * static_cast<int>(blockDim.x) + tid) * VEC;
      if (u < reg_vecs && j < tail_begin) r[u] = load16_policy(xs + j, evict_first);
    }
    double s = 0, ss = 0;
    for (int k = warp; k < nchunks; k += warps) {
      mbarrier_wait_parity(&chunk_full[k], it & 1u);
      const int off = k * chunk_elems, len = min(chunk_elems, ns - off);
      C ls = 0, lss = 0;
      for (int e = lane * VEC; e < len; e += 32 * VEC)
        add_shifted<T, VEC>(*reinterpret_cast<const V*>(buf + off + e), K, ls, lss);
      s += ls;
      ss += lss;
    }
    stamp(it, 1);
    {
      C ls = 0, lss = 0;
#pragma unroll
      for (int u = 0; u < kStreamRegVecs; ++u) {
        const int j = reg_begin + (u * static_cast<int>(blockDim.x) + tid) * VEC;
        if (u < reg_vecs && j < tail_begin) add_shifted<T, VEC>(as_vec<T, VEC>(r[u]), K, ls, lss);
      }
      s += ls;
      ss += lss;
    }
    stamp(it, 2);
    const int stride = static_cast<int>(blockDim.x) * VEC;
    for (int j = tail_begin + tid * VEC; j < end; j += kUnroll * stride) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (j + u * stride < end) v[u] = load16_policy(xs + j + u * stride, evict_last);
      C ls = 0, lss = 0;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (j + u * stride < end) add_shifted<T, VEC>(as_vec<T, VEC>(v[u]), K, ls, lss);
      s += ls;
      ss += lss;
    }

    stamp(it, 3);

    // 2. exchange: CTA sums -> shared (cluster) or global (group) memory -> wait for all -> every CTA adds them
    block_sum2(s, ss, scratch);
    stamp(it, 4);
    if (grouped) {
      // Post (s, ss), count the arrival, wait for the group's. A parity's slots are rewritten two rounds on,
      // by which time every CTA of the group has read them (it posted the round between after reading).
      const int64_t group_id = blockIdx.x / cluster_size;
      double* round_partials = groups.partials + ((group_id * 2 + (it & 1u)) * cluster_size) * 2;
      if (tid == 0) {
        __stcg(round_partials + 2 * rank, s);
        __stcg(round_partials + 2 * rank + 1, ss);
        red_add_release_gpu(groups.arrivals + group_id, 1u);
        const unsigned target = (it + 1u) * static_cast<unsigned>(cluster_size);
        while (ld_acquire_gpu(groups.arrivals + group_id) < target) __nanosleep(32);
      }
      __syncthreads();
      if (warp == 0) {
        double rs = 0, rss = 0;
        for (int q = lane; q < cluster_size; q += 32) {  // L2 reads: this SM's L1 may hold the last use's lines
          rs += __ldcg(round_partials + 2 * q);
          rss += __ldcg(round_partials + 2 * q + 1);
        }
        rs = warp_sum(rs);
        rss = warp_sum(rss);
        if (lane == 0) {
          slice_sums[0] = rs;
          slice_sums[1] = rss;
        }
      }
    } else {
      if (tid == 0) {
        cta_sums[it & 1u][0] = s;
        cta_sums[it & 1u][1] = ss;
      }
      cluster.sync();
    }
    if (!grouped && warp == 0) {
      double rs = 0, rss = 0;
      if (lane < cluster_size) {
        const double* remote = cluster.map_shared_rank(&cta_sums[it & 1u][0], lane);
        rs = remote[0];
        rss = remote[1];
      }
      rs = warp_sum(rs);
      rss = warp_sum(rss);
      if (lane == 0) {
        slice_sums[0] = rs;
        slice_sums[1] = rss;
      }
    }
    __syncthreads();
    stamp(it, 5);
    const SliceNorm<C> nrm = norm_from_sums<C>(slice_sums[0], slice_sums[1], static_cast<double>(D), K, eps);
    if (rank == 0 && tid == 0) write_stats(nrm, mean_out, rstd_out, slice);
    const int64_t c0 = (slice % G) * channels_per_group;
    const ParamRef<T> wg = w ? w + c0 : w;
    const ParamRef<T> bg = b ? b + c0 : b;
    const bool channel_per_vec = (HW % VEC) == 0;

    // 3. normalise: the L2 tail first (shortest stay in L2), the registers, then the shared-memory chunks,
    //    each refilled with the next slice as soon as its warp has read it.
    C a = nrm.rstd, shift = -nrm.mean_k * nrm.rstd;  // y = (x - K) * a + shift (fixed coefficients)
    if (!PER_VEC_CHANNEL && wg && n > 0) {
      const int c = begin / HW;
      a = nrm.rstd * wg[c];
      shift = bg[c] - nrm.mean_k * a;
    }
    {
      auto norm = [&](const V& v, int j) -> V {
        if constexpr (PER_VEC_CHANNEL) {
          return normalize_vec<T, int, VEC, true, Epi>(v, j, HW, channel_per_vec, wg, bg, nrm, epi);
        } else {
          C z[VEC];
#pragma unroll
          for (int k = 0; k < VEC; ++k) z[k] = (static_cast<C>(v.v[k]) - nrm.K) * a + shift;
          epi.apply(z);
          V out;
#pragma unroll
          for (int k = 0; k < VEC; ++k) out.v[k] = static_cast<T>(z[k]);
          return out;
        }
      };
      for (int j = tail_begin + tid * VEC; j < end; j += kUnroll * stride) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (j + u * stride < end) v[u] = load16_policy(xs + j + u * stride, evict_first);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (j + u * stride < end) store_vec_streaming<T, VEC>(ys + j + u * stride, norm(as_vec<T, VEC>(v[u]), j + u * stride));
      }
      stamp(it, 6);
#pragma unroll
      for (int u = 0; u < kStreamRegVecs; ++u) {
        const int j = reg_begin + (u * static_cast<int>(blockDim.x) + tid) * VEC;
        if (u < reg_vecs && j < tail_begin) store_vec_streaming<T, VEC>(ys + j, norm(as_vec<T, VEC>(r[u]), j));
      }
      stamp(it, 7);
      for (int k = warp; k < nchunks; k += warps) {
        const int off = k * chunk_elems, len = min(chunk_elems, ns - off);
        for (int e = lane * VEC; e < len; e += 32 * VEC)
          store_vec_streaming<T, VEC>(ys + begin + off + e, norm(*reinterpret_cast<const V*>(buf + off + e), begin + off + e));
        __syncwarp();  // every lane has read the chunk: it may be overwritten
        if (lane == 0 && next < slices) {
          // The refill is written by the async proxy: order the warp's generic-proxy reads before it.
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          fill_chunk(k, next);
        }
      }
      stamp(it, 8);
    }
  }
  if (!grouped) cluster.sync();  // shared memory must outlive every peer's read of cta_sums
#endif
}

// ---- host side -----------------------------------------------------------------------------------------
struct StreamedGeometry {
  int cluster = 0, part = 0, smem_elems = 0, chunk_elems = 0, reg_vecs = 0;
  bool grouped = false;  // CTAs per slice `cluster` in groups of a cooperative launch, not thread-block clusters
  int64_t clusters = 0, tail_bytes_per_cta = 0;
  size_t smem_bytes = 0;
};

// Whether every CTA's part [r * part, (r + 1) * part) of a slice lies in one channel (HW elements).
inline bool parts_in_one_channel(int64_t D, int64_t HW, int cluster, int vec) {
  const int64_t part = ceil_div(ceil_div(D, cluster), vec) * vec;
  for (int64_t begin = 0; begin < D; begin += part)
    if (begin / HW != (std::min(D, begin + part) - 1) / HW) return false;
  return true;
}

// Fills `g` for `kernel` and `cluster` CTAs per slice (a thread-block cluster, or with `grouped` a group of a
// cooperative launch); false when no such cluster or group can be resident.
// Split of a part (automatic, smem_cap_bytes < 0): registers full, shared memory for what they leave except
// an eighth of the part, which streams through L2. The registers and the tail are loaded at the start of a
// round with every load in flight at once; the chunks are refilled during the previous round's writes. On an
// H100, #35 bfloat16 (256 KB parts) ran 3.24 ms with 96 KB of shared memory (a 32 KB tail), 3.42 ms with
// 128 KB (no tail) and 3.86 ms with 225 KB (registers mostly idle); for float32 (512 KB parts) the tail is
// large anyway, and more shared memory was faster up to the device limit (225 KB 6.78 ms, 160 KB 6.98 ms).
template <typename T, int VEC>
bool streamed_geometry(const void* kernel, int device, const DeviceInfo& dev, int64_t D, int64_t slices, int cluster,
                       bool grouped, int64_t smem_cap_bytes, int reg_vecs, StreamedGeometry& g,
                       cudaLaunchConfig_t& config, cudaLaunchAttribute* attr) {
  g.cluster = cluster;
  g.grouped = grouped;
  g.part = static_cast<int>(ceil_div(ceil_div(D, cluster), VEC) * VEC);
  const int64_t reg_elems = static_cast<int64_t>(kStreamThreads) * VEC * reg_vecs;
  const int64_t device_limit = (dev.max_smem_optin - 2048) / 16 * 16 / static_cast<int64_t>(sizeof(T));
  const int64_t wanted = smem_cap_bytes < 0 ? std::max<int64_t>(32 * VEC, g.part - reg_elems - g.part / 8)
                                            : smem_cap_bytes / 16 * 16 / static_cast<int64_t>(sizeof(T));
  g.smem_elems = static_cast<int>(std::min<int64_t>({g.part, wanted / VEC * VEC, device_limit}));
  // About two chunks per warp, whole warp footprints, at most kStreamMaxChunks.
  const int64_t quantum = 32 * VEC;
  int64_t chunk = ceil_div(ceil_div(g.smem_elems, 2 * (kStreamThreads / 32)), quantum) * quantum;
  chunk = std::max(chunk, ceil_div(ceil_div(g.smem_elems, kStreamMaxChunks), quantum) * quantum);
  g.chunk_elems = static_cast<int>(std::max<int64_t>(chunk, quantum));
  g.reg_vecs = reg_vecs;
  const int64_t on_chip = static_cast<int64_t>(g.smem_elems) + reg_elems;
  g.tail_bytes_per_cta = std::max<int64_t>(0, g.part - on_chip) * static_cast<int64_t>(sizeof(T));
  g.smem_bytes = static_cast<size_t>(g.smem_elems) * sizeof(T);

  // Sets the kernel's shared-memory and cluster attributes the first time (and answers for clusters).
  int active = max_active_clusters(kernel, device, grouped ? 1 : cluster, kStreamThreads, g.smem_bytes);
  if (grouped)
    active = dev.cooperative ? resident_ctas_per_sm(kernel, device, kStreamThreads, g.smem_bytes) * dev.sms / cluster : 0;
  if (active < 1) return false;
  config = {};
  config.blockDim = dim3(kStreamThreads);
  config.dynamicSmemBytes = g.smem_bytes;
  if (grouped) {  // every CTA of a group waits for the others: all resident at once
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
  } else {
    attr[0] = cluster_dim_attribute(cluster);
  }
  config.attrs = attr;
  config.numAttrs = 1;
  g.clusters = std::min<int64_t>(active, slices);
  config.gridDim = dim3(static_cast<unsigned>(g.clusters * cluster));
  return true;
}

// Knobs of the streamed plan; the defaults are what the automatic choice uses.
struct StreamedOptions {
  int cluster = 0;           // clusters of this many CTAs (no groups); 0: 16 where it fits, else 8
  int groups = -1;           // > 0: no clusters; this many slices at a time, each on (resident CTAs) / groups CTAs;
                             // 0: clusters; -1: groups of kStreamGroupCtas CTAs where cooperative launches exist
                             // and no cluster size is asked for, else clusters
  int64_t smem_cap = -1;     // bytes of shared memory per CTA (the device limit applies); -1: streamed_geometry's rule
  int reg_vecs = kStreamRegVecs;
  bool forced = false;       // a forced plan skips the L2 admission rule
};

template <typename T, int VEC, bool AFFINE, typename Epi>
bool try_launch_streamed(const Pointers<T>& p, const Problem& pr, const at::TensorOptions& opts,
                         const StreamedOptions& opt) {
  if constexpr (sizeof(T) * VEC != 16) {
    return false;
  } else {
    const DeviceInfo& dev = device_info(pr.device);
    if (dev.major < 9 || pr.D >= (int64_t(1) << 30) || pr.slices < 1) return false;
    StreamedGeometry g;
    cudaLaunchConfig_t config;
    cudaLaunchAttribute attr[1];
    bool ok = false;
    using Kernel = decltype(&gn_streamed<T, VEC, false, false, Epi>);
    Kernel kernel = nullptr;
    // CTAs per slice to try: a cluster of 16 where it fits, else 8; or the groups' share of the resident CTAs
    // (one per SM: the kernel's 512 threads take the register file whole).
    std::vector<int> sizes = {16, 8};
    const bool auto_groups = opt.groups < 0 && opt.cluster == 0 && dev.cooperative;
    const bool grouped = opt.groups > 0 || auto_groups;
    if (opt.groups > 0 && !dev.cooperative) return false;
    if (grouped) {
      const int per_sm = resident_ctas_per_sm(reinterpret_cast<const void*>(&gn_streamed<T, VEC, false, false, Epi>),
                                              pr.device, kStreamThreads, 0);
      sizes = {auto_groups ? kStreamGroupCtas : per_sm * dev.sms / opt.groups};
      if (sizes[0] < 1 || sizes[0] > per_sm * dev.sms) return false;
    }
    for (int cluster : sizes) {
      if (opt.cluster != 0 && !grouped && cluster != opt.cluster) continue;
      // Per-vector coefficients only where a part spans channels (it depends on the part, so on the cluster).
      const bool per_vec_channel = AFFINE && !parts_in_one_channel(pr.D, pr.HW, cluster, VEC);
      kernel = per_vec_channel ? gn_streamed<T, VEC, true, false, Epi> : gn_streamed<T, VEC, false, false, Epi>;
      if (pr.trace != nullptr) {
        kernel = nullptr;
        if constexpr ((std::is_same_v<T, float> || std::is_same_v<T, c10::BFloat16>) && Epi::kIsIdentity)
          if (!per_vec_channel) kernel = gn_streamed<T, VEC, false, true, Epi>;
        TORCH_CHECK(kernel != nullptr, "group_norm_streamed_trace: float32 and bfloat16 inputs only, without weight");
      }
      ok = streamed_geometry<T, VEC>(reinterpret_cast<const void*>(kernel), pr.device, dev, pr.D, pr.slices, cluster,
                                     grouped, opt.smem_cap, opt.reg_vecs, g, config, attr);
      if (ok) break;
    }
    if (!ok) return false;
    // The grouped exchange counts arrivals in 32 bits: rounds * CTAs per slice.
    if (g.grouped && (ceil_div(pr.slices, g.clusters) + 1) * g.cluster >= (int64_t(1) << 31)) return false;
    // The second read of every tail must hit L2: admit the plan while the tails in flight fit half of it.
    if (!opt.forced && g.clusters * g.cluster * g.tail_bytes_per_cta > dev.l2_bytes / 2) return false;
    if (!opt.forced && static_cast<int64_t>(g.part) * static_cast<int64_t>(sizeof(T)) < kStreamMinPartBytes)
      return false;
    // Persistence pays where a cluster refills with its next slice while it writes the last, and where the
    // first round (nothing to overlap yet) and a last round that leaves clusters idle are a small share of
    // all: at least kStreamMinRounds slices per resident cluster. With one round every cluster loads, then
    // exchanges, then writes, and the split plan (all SMs streaming both reads) was faster (H200,
    // benchmarks/plan_check.py --rows one-round: (8,64,38555) G1 fp32 streamed 0.112 ms, split 0.071;
    // (1,32,564,606) G4 fp16 0.042, 0.029); with 4.6 rounds too ((1,128,1024,1024) G32 fp16, 32 slices on 7
    // clusters, --rows held: streamed 0.250 ms without weight and bias, split 0.229 with them). #35 makes 128
    // rounds: streamed 5.39 ms, split 5.60 (float32, same H200 run).
    if (!opt.forced && pr.slices < kStreamMinRounds * g.clusters) return false;
    if (pr.plan) {
      *pr.plan = "streamed: " + std::to_string(g.clusters) +
                 (g.grouped ? " persistent groups of " + std::to_string(g.cluster) +
                                  " CTAs (one cooperative launch, sums exchanged through global memory)"
                            : " persistent clusters of " + std::to_string(g.cluster) + " CTAs") +
                 ", per CTA " + std::to_string(g.smem_bytes / 1024) + " KB in shared memory + " +
                 std::to_string(static_cast<int64_t>(kStreamThreads) * 16 * g.reg_vecs / 1024) +
                 " KB in registers + " + std::to_string(g.tail_bytes_per_cta / 1024) +
                 " KB re-read from L2 of each slice's part (vec " + std::to_string(VEC) + ")";
      return true;
    }
    StreamGroups groups;
    at::Tensor arrivals, partials;
    if (g.grouped) {
      arrivals = at::empty({g.clusters}, opts.dtype(at::kInt));
      partials = at::empty({g.clusters * 2 * g.cluster * 2}, opts.dtype(at::kDouble));
      groups.group = g.cluster;
      groups.arrivals = reinterpret_cast<unsigned*>(arrivals.data_ptr<int32_t>());
      groups.partials = partials.data_ptr<double>();
      C10_CUDA_CHECK(cudaMemsetAsync(groups.arrivals, 0, static_cast<size_t>(g.clusters) * sizeof(unsigned), pr.stream));
    }
    config.stream = pr.stream;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p.x, p.y, AFFINE ? p.w : ParamRef<T>{}, AFFINE ? p.b : ParamRef<T>{}, p.mean, p.rstd,
                                      pr.slices, pr.G, static_cast<int>(pr.cpg), static_cast<int>(pr.HW),
                                      static_cast<int>(pr.D), g.part, g.smem_elems, g.chunk_elems, g.reg_vecs,
                                      pr.eps, pr.trace, groups, make_epilogue<Epi>(pr.act)));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return true;
  }
}

"""
