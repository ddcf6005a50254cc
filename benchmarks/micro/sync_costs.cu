// What one launch of a few-MB GroupNorm pays besides its data: launch, grid-wide barriers (cooperative launch)
// against cluster barriers, and how fast a few SMs alone stream a few MB. Standalone (nvcc only):
//   nvcc -O3 -arch=sm_90a -o sync_costs benchmarks/micro/sync_costs.cu && ./sync_costs
// Each figure: median of 200 single launches timed with CUDA events (the launch's own latency included).
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
namespace cg = cooperative_groups;

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

__global__ void empty_kernel(int* sink) { if (sink && threadIdx.x == 9999) *sink = 1; }

__global__ void grid_sync_kernel(int syncs, int* sink) {
  cg::grid_group grid = cg::this_grid();
  for (int i = 0; i < syncs; ++i) grid.sync();
  if (threadIdx.x == 9999) *sink = 1;
}

__global__ void cluster_sync_kernel(int syncs, int* sink) {
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = 0; i < syncs; ++i) cluster.sync();
  if (threadIdx.x == 9999) *sink = 1;
}

// Reads `bytes` with `gridDim.x` CTAs (16-byte loads, 4 in flight per thread) and, if y, writes them back.
__global__ void stream_kernel(const int4* __restrict__ x, int4* __restrict__ y, long n, int* sink) {
  const long stride = (long)gridDim.x * blockDim.x;
  int acc = 0;
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (y) __stcs(y + i + u * stride, v[u]);
      acc ^= v[u].x;
    }
  }
  for (; i < n; i += stride) {
    int4 v = x[i];
    if (y) y[i] = v;
    acc ^= v.x;
  }
  if (acc == 0x7fffffff) *sink = acc;
}

// Median of `reps` single launches, each between two CUDA events; before(i) runs ahead of the i-th timed launch,
// outside the events (e.g. an L2 flush).
template <typename F, typename B>
float median_ms(F launch, int reps, B before) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) launch();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    before(i);
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename F>
float median_ms(F launch, int reps = 200) {
  return median_ms(launch, reps, [](int) {});
}

int main() {
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, sms);
  int* sink;
  CHECK(cudaMalloc(&sink, 4));
  std::printf("plain launch, 1 CTA: %.2f us\n", 1e3 * median_ms([&] { empty_kernel<<<1, 256>>>(sink); }));
  std::printf("plain launch, %d CTAs: %.2f us\n", 4 * sms, 1e3 * median_ms([&] { empty_kernel<<<4 * sms, 256>>>(sink); }));
  for (int per_sm : {1, 2, 4}) {
    for (int syncs : {0, 1, 2, 4}) {
      const int grid = per_sm * sms;
      auto launch = [&] {
        void* args[] = {&syncs, &sink};
        CHECK(cudaLaunchCooperativeKernel((void*)grid_sync_kernel, grid, 256, args, 0, 0));
      };
      std::printf("cooperative, %d CTAs x 256, %d grid syncs: %.2f us\n", grid, syncs, 1e3 * median_ms(launch));
    }
  }
  for (int cluster : {2, 4, 8, 16}) {
    if (cluster == 16) CHECK(cudaFuncSetAttribute(cluster_sync_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int syncs : {0, 2, 4}) {
      const int grid = (2 * sms / cluster) * cluster;
      auto launch = [&] {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(grid);
        config.blockDim = dim3(256);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = cluster;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        config.attrs = attr;
        config.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&config, cluster_sync_kernel, syncs, sink));
      };
      std::printf("clusters of %d, %d CTAs x 256, %d cluster syncs: %.2f us\n", cluster, grid, syncs,
                  1e3 * median_ms(launch));
    }
  }
  // Streaming a few MB with few SMs: is a cluster per sample (16 SMs for one sample) fast enough?
  int4 *x, *y;
  const size_t max_bytes = 64u << 20;
  CHECK(cudaMalloc(&x, max_bytes));
  CHECK(cudaMalloc(&y, max_bytes));
  CHECK(cudaMemset(x, 1, max_bytes));
  char* flush;
  CHECK(cudaMalloc(&flush, 256u << 20));
  for (size_t mb : {1, 3, 6, 12}) {
    const long n = (long)(mb << 20) / 16;
    for (int ctas : {16, 32, 64, sms, 2 * sms, 4 * sms}) {
      for (int write : {0, 1}) {
        auto launch = [&] { stream_kernel<<<ctas, 256>>>(x, write ? y : nullptr, n, sink); };
        // L2 flushed before each timed launch: the data comes from DRAM, as a GroupNorm's first read does.
        const float ms = median_ms(launch, 50, [&](int i) { CHECK(cudaMemsetAsync(flush, i, 256u << 20)); });
        std::printf("stream %2zu MB %s with %3d CTAs x 256: %7.2f us (%.0f GB/s read)\n", mb,
                    write ? "read+write" : "read      ", ctas, 1e3 * ms, (mb << 20) / (1e-3 * ms) / 1e9);
      }
    }
  }
  return 0;
}
