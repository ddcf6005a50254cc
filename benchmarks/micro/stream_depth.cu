// How many bytes in flight per SM a two-pass GroupNorm needs to run at the copy's speed, and whether bulk copies
// (TMA, sm_90) into a shared-memory ring get there with fewer threads than register loads do. Standalone:
//   nvcc -O3 -std=c++17 -arch=sm_90a -o stream_depth benchmarks/micro/stream_depth.cu && ./stream_depth
//
// The access pattern is the channels-last forward's (csrc/channels_last_common_cuda.py) when one CTA's channel
// tile spans every channel: CTA b owns a contiguous chunk of the tensor; pass 1 reads it front to back (the
// statistics), the grid waits, pass 2 reads it back to front (what pass 1 read last is likeliest in L2) and writes
// it (the normalisation). Each kernel times one cooperative launch (events, L2 flushed, median of 30):
//   regs<U>  256-thread CTAs, each thread U 16-byte register loads in flight, `per_sm` CTAs per SM
//   bulk     one producer thread issues cp.async.bulk copies of `kStage` bytes into a ring of `stages` slots per
//            CTA; the other threads consume the slots (sum in pass 1; in pass 2 read the slot and store it)
// The copy kernel (read once, write once) is the anchor; the read-only rows show the statistics pass alone.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
namespace cg = cooperative_groups;

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

constexpr int kThreads = 256;
constexpr int kStage = 8192;  // bytes per bulk copy

__global__ void copy_kernel(const int4* __restrict__ x, int4* __restrict__ y, long n) {
  const long stride = (long)gridDim.x * blockDim.x;
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) __stcs(y + i + u * stride, v[u]);
  }
  for (; i < n; i += stride) y[i] = x[i];
}

// chunk: int4 vectors per CTA. write == false: pass 1 only.
template <int U>
__global__ void __launch_bounds__(kThreads) regs_kernel(const int4* __restrict__ x, int4* __restrict__ y, long chunk,
                                                       bool write, int* sink) {
  const int4* xb = x + blockIdx.x * chunk;
  int acc = 0;
  for (long i = threadIdx.x; i < chunk; i += (long)U * kThreads) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = i + u * kThreads < chunk ? xb[i + u * kThreads] : make_int4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc += v[u].x ^ v[u].w;
  }
  if (!write) {
    if (acc == 0x7fffffff) *sink = acc;
    return;
  }
  cg::this_grid().sync();
  int4* yb = y + blockIdx.x * chunk;
  for (long i = (chunk - 1) / (U * kThreads) * (U * kThreads) + threadIdx.x; i >= 0; i -= (long)U * kThreads) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u * kThreads < chunk) v[u] = xb[i + u * kThreads];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * kThreads >= chunk) continue;
      v[u].x += acc & 1;
      __stcs(yb + i + u * kThreads, v[u]);
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)));
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(parity));
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Dynamic shared memory: stages * kStage bytes of ring, then 2 * stages mbarriers (full, empty).
// One pass over `slots` stages of kStage bytes, in the order given by slot(k); every thread calls it.
template <typename Slot, typename Use>
__device__ void bulk_pass(const char* src, int stages, long slots, unsigned char* ring, uint64_t* full,
                          uint64_t* empty, uint32_t& phase_base, Slot slot, Use use) {
  const int consumers = blockDim.x - 32;  // warp 0 produces
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      for (long k = 0; k < slots; ++k) {
        const int s = static_cast<int>((phase_base + k) % stages);
        const long round = (phase_base + k) / stages;
        if (phase_base + k >= stages) mbar_wait(&empty[s], static_cast<uint32_t>((round - 1) & 1));
        mbar_expect_tx(&full[s], kStage);
        bulk_load(ring + s * kStage, src + slot(k) * kStage, kStage, &full[s]);
      }
    }
  } else {
    for (long k = 0; k < slots; ++k) {
      const int s = static_cast<int>((phase_base + k) % stages);
      const long round = (phase_base + k) / stages;
      mbar_wait(&full[s], static_cast<uint32_t>(round & 1));
      use(k, reinterpret_cast<const int4*>(ring + s * kStage), threadIdx.x - 32, consumers);
      mbar_arrive(&empty[s]);
    }
  }
  phase_base += static_cast<uint32_t>(slots);
}

__global__ void __launch_bounds__(kThreads) bulk_kernel(const int4* __restrict__ x, int4* __restrict__ y, long chunk,
                                                       bool write, int stages, int* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * kStage);
  uint64_t* empty = full + stages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], blockDim.x - 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const char* xb = reinterpret_cast<const char*>(x + blockIdx.x * chunk);
  const long slots = chunk * 16 / kStage;
  uint32_t phase_base = 0;
  int acc = 0;
  bulk_pass(xb, stages, slots, ring, full, empty, phase_base, [](long k) { return k; },
            [&](long, const int4* v, int t, int n) {
              for (int i = t; i < kStage / 16; i += n) acc += v[i].x ^ v[i].w;
            });
  if (!write) {
    if (acc == 0x7fffffff) *sink = acc;
    return;
  }
  cg::this_grid().sync();
  int4* yb = y + blockIdx.x * chunk;
  bulk_pass(xb, stages, slots, ring, full, empty, phase_base, [&](long k) { return slots - 1 - k; },
            [&](long k, const int4* v, int t, int n) {
              int4* out = yb + (slots - 1 - k) * (kStage / 16);
              for (int i = t; i < kStage / 16; i += n) {
                int4 w = v[i];
                w.x += acc & 1;
                __stcs(out + i, w);
              }
            });
}

template <typename F>
float median_us(F launch, int reps, float* flush, size_t flush_n) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaMemsetAsync(flush, i & 0xff, flush_n * sizeof(float)));
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  const size_t flush_n = 256u << 20 >> 2;
  float* flush;
  CHECK(cudaMalloc(&flush, flush_n * sizeof(float)));
  int* sink;
  CHECK(cudaMalloc(&sink, sizeof(int)));
  for (long mb : {32L, 64L, 256L}) {
    const long n = mb << 20 >> 4;  // int4 vectors
    int4 *x, *y;
    CHECK(cudaMalloc(&x, n * 16));
    CHECK(cudaMalloc(&y, n * 16));
    CHECK(cudaMemset(x, 1, n * 16));
    const float copy = median_us([&] { copy_kernel<<<sms * 8, 256>>>(x, y, n); }, 30, flush, flush_n);
    std::printf("\n%ld MB: copy %.1f us (%.0f GB/s read+write)\n", mb, copy, 2.0 * n * 16 / copy / 1e3);
    std::printf("  %-26s %10s %10s %10s\n", "variant", "read us", "2-pass us", "2-pass/copy");
    auto run = [&](const char* name, auto kernel, int per_sm, size_t smem, auto... extra) {
      const int ctas = sms * per_sm;
      long chunk = n / ctas;
      chunk -= chunk % (kStage / 16);  // whole bulk stages
      if (smem > 48 * 1024) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      int fit = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, kThreads, smem));
      if (fit < per_sm) {
        std::printf("  %-26s does not fit (%d per SM)\n", name, fit);
        return;
      }
      auto launch = [&](bool write) {
        bool w = write;
        void* args[] = {(void*)&x, (void*)&y, (void*)&chunk, (void*)&w, (void*)&extra..., (void*)&sink};
        CHECK(cudaLaunchCooperativeKernel((void*)kernel, ctas, kThreads, args, smem));
      };
      const float r = median_us([&] { launch(false); }, 30, flush, flush_n);
      const float rw = median_us([&] { launch(true); }, 30, flush, flush_n);
      std::printf("  %-26s %10.1f %10.1f %10.2fx  (chunk %.0f KB, %ld MB covered)\n", name, r, rw, rw / copy,
                  chunk * 16 / 1024.0, chunk * ctas * 16 >> 20);
    };
    char name[64];
    for (int per_sm : {1, 2, 3, 4, 8}) {
      std::snprintf(name, sizeof name, "regs<4> %d/SM", per_sm);
      run(name, regs_kernel<4>, per_sm, 0);
      std::snprintf(name, sizeof name, "regs<8> %d/SM", per_sm);
      run(name, regs_kernel<8>, per_sm, 0);
    }
    for (int per_sm : {1, 2, 4}) {
      for (int stages : {4, 8, 12}) {
        const size_t smem = stages * kStage + 2 * stages * 8;
        std::snprintf(name, sizeof name, "bulk %d/SM x %d stages", per_sm, stages);
        run(name, bulk_kernel, per_sm, smem, stages);
      }
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
  }
  return 0;
}
