// Can a channels-last GroupNorm work on column strips of the tensor (a few whole 32-byte sectors of every row)
// at the copy's speed, so that a strip small enough for L2 is read from HBM once and re-read from L2?
// Standalone:
//   nvcc -O3 -std=c++17 -arch=sm_90a -o strip_reads benchmarks/micro/strip_reads.cu && ./strip_reads
//
// A channels-last tensor (N, HW, C) is `rows` rows of R bytes. A strip is S bytes of every row (S a multiple of
// 32: whole sectors), so one strip is rows x S bytes spread over the whole tensor at a stride of R. The rows time,
// each as the sum over all R / S strips (events, median of 15, a 256 MB L2 flush before each):
//   copy / read      the contiguous tensor copied (read + streaming write) / read and summed: the anchors
//   strip copy       a launch per strip, each copying its strip: what strided sector access costs HBM
//   strip 2-pass     a launch per strip reading it (the statistics), then a launch re-reading it back to front
//                    and writing it (the normalisation): the second read should come from L2
//   coop 2-pass      the same in one cooperative launch, a grid barrier between the passes of each strip
// Every kernel is a grid of 4 x 256-thread CTAs per SM, 4 16-byte loads in flight per thread.
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
constexpr int kU = 4;

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

__global__ void read_kernel(const int4* __restrict__ x, long n, int* sink) {
  const long stride = (long)gridDim.x * blockDim.x;
  int acc = 0;
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += v[u].x ^ v[u].w;
  }
  for (; i < n; i += stride) acc += x[i].y;
  if (acc == 0x7fffffff) *sink = acc;
}

// Strip s: vectors [s * sv, (s + 1) * sv) of every row of rv vectors. Vector i of the strip (i < rows * sv) is
// row i / sv, column s * sv + i % sv.
struct Strip {
  long rows;
  int rv, sv, s;
  __device__ long at(long i) const { return i / sv * rv + s * sv + i % sv; }
  __device__ long count() const { return rows * sv; }
};

// pass 1 over the strip: read and sum. Returns the thread's sum.
__device__ int strip_read(const int4* __restrict__ x, Strip st, long tid, long stride) {
  int acc = 0;
  const long n = st.count();
  long i = tid;
  for (; i + (kU - 1) * stride < n; i += kU * stride) {
    int4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = x[st.at(i + u * stride)];
#pragma unroll
    for (int u = 0; u < kU; ++u) acc += v[u].x ^ v[u].w;
  }
  for (; i < n; i += stride) acc += x[st.at(i)].y;
  return acc;
}

// pass 2: the same vectors back to front (last read first), written with streaming stores.
__device__ void strip_write_back(const int4* __restrict__ x, int4* __restrict__ y, Strip st, long tid, long stride,
                                 bool reverse) {
  const long n = st.count();
  if (tid >= n) return;
  const long last = (n - 1 - tid) / stride;  // this thread's vectors: tid + k * stride, k <= last
  for (long k0 = 0; k0 <= last; k0 += kU) {
    int4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const long k = reverse ? last - (k0 + u) : k0 + u;
      if (k0 + u <= last) v[u] = x[st.at(tid + k * stride)];
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const long k = reverse ? last - (k0 + u) : k0 + u;
      if (k0 + u <= last) __stcs(y + st.at(tid + k * stride), v[u]);
    }
  }
}

__global__ void strip_copy_kernel(const int4* __restrict__ x, int4* __restrict__ y, Strip st) {
  strip_write_back(x, y, st, (long)blockIdx.x * blockDim.x + threadIdx.x, (long)gridDim.x * blockDim.x, false);
}

__global__ void strip_read_kernel(const int4* __restrict__ x, Strip st, int* sink) {
  const int acc = strip_read(x, st, (long)blockIdx.x * blockDim.x + threadIdx.x, (long)gridDim.x * blockDim.x);
  if (acc == 0x7fffffff) *sink = acc;
}

__global__ void strip_apply_kernel(const int4* __restrict__ x, int4* __restrict__ y, Strip st) {
  strip_write_back(x, y, st, (long)blockIdx.x * blockDim.x + threadIdx.x, (long)gridDim.x * blockDim.x, true);
}

// Every strip in one cooperative launch: pass 1, grid barrier, pass 2 (back to front), next strip.
__global__ void coop_kernel(const int4* __restrict__ x, int4* __restrict__ y, long rows, int rv, int sv, int* sink) {
  const long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
  int acc = 0;
  for (int s = 0; s < rv / sv; ++s) {
    const Strip st{rows, rv, sv, s};
    acc += strip_read(x, st, tid, stride);
    cg::this_grid().sync();
    strip_write_back(x, y, st, tid, stride, true);
  }
  if (acc == 0x7fffffff) *sink = acc;
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const int grid = sms * 4;
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  const long max_bytes = 256L << 20;
  int4 *x, *y, *flush;
  int* sink;
  CHECK(cudaMalloc(&x, max_bytes));
  CHECK(cudaMalloc(&y, max_bytes));
  CHECK(cudaMalloc(&flush, 256L << 20));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(x, 1, max_bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time = [&](auto&& launch) {
    std::vector<float> ms;
    for (int r = 0; r < 18; ++r) {
      CHECK(cudaMemsetAsync(flush, r, 256L << 20));
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (r >= 3) ms.push_back(t * 1000.f);
    }
    CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  int coop_per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&coop_per_sm, coop_kernel, kThreads, 0));
  const int coop_grid = sms * std::min(coop_per_sm, 4);
  struct Case { long mb; int row_bytes; };
  const Case cases[] = {{256, 256}, {64, 256}, {64, 640}, {32, 256}, {256, 2560}};
  std::printf("%7s %6s %6s | %8s %8s | %9s %9s %9s %9s | ratios to copy: strip copy, 2-pass, coop\n", "MB", "row B",
              "strip", "copy us", "read us", "stripcp", "strip rd", "2-pass", "coop");
  for (const Case& c : cases) {
    const long bytes = c.mb << 20;
    const int rv = c.row_bytes / 16;
    const long rows = bytes / c.row_bytes;
    const long n = rows * rv;
    const float t_copy = time([&] { copy_kernel<<<grid, kThreads>>>(x, y, n); });
    const float t_read = time([&] { read_kernel<<<grid, kThreads>>>(x, n, sink); });
    for (int strip_bytes : {32, 64, 128, 256, 512}) {
      if (strip_bytes >= c.row_bytes || c.row_bytes % strip_bytes) continue;
      const int sv = strip_bytes / 16, strips = rv / sv;
      const float t_sc = time([&] {
        for (int s = 0; s < strips; ++s) strip_copy_kernel<<<grid, kThreads>>>(x, y, Strip{rows, rv, sv, s});
      });
      const float t_sr = time([&] {
        for (int s = 0; s < strips; ++s) strip_read_kernel<<<grid, kThreads>>>(x, Strip{rows, rv, sv, s}, sink);
      });
      const float t_2p = time([&] {
        for (int s = 0; s < strips; ++s) {
          strip_read_kernel<<<grid, kThreads>>>(x, Strip{rows, rv, sv, s}, sink);
          strip_apply_kernel<<<grid, kThreads>>>(x, y, Strip{rows, rv, sv, s});
        }
      });
      const float t_coop = time([&] {
        long rows_ = rows;
        int rv_ = rv, sv_ = sv;
        void* args[] = {&x, &y, &rows_, &rv_, &sv_, &sink};
        CHECK(cudaLaunchCooperativeKernel((void*)coop_kernel, coop_grid, kThreads, args, 0, 0));
      });
      std::printf("%7ld %6d %6d | %8.1f %8.1f | %9.1f %9.1f %9.1f %9.1f | %.2f %.2f %.2f (strip %.1f MB)\n", c.mb,
                  c.row_bytes, strip_bytes, t_copy, t_read, t_sc, t_sr, t_2p, t_coop, t_sc / t_copy, t_2p / t_copy,
                  t_coop / t_copy, double(rows) * strip_bytes / (1 << 20));
    }
  }
  return 0;
}
