"""CUDA helpers shared by every kernel source of the package: vector access and block reductions.

Kept as a source string that the kernel modules prepend to their own, so each extension is a single
translation unit with no header files to install.
"""

COMMON_CUDA_HEADER = r"""
// Guarded: several kernel sources of one extension each prepend this header, and load_inline joins
// them into one translation unit.
#ifndef GN_INLINE_COMMON_CUDA_HEADER
#define GN_INLINE_COMMON_CUDA_HEADER
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <cuda_bf16.h>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <ATen/core/Tensor.h>
#include <cooperative_groups.h>

namespace gn_inline {

// The GPU's global nanosecond timer (%globaltimer, every arch), for the kernels' diagnostic phase traces.
__device__ __forceinline__ int64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<int64_t>(t);
}
// The same, read only once `after` is computed (an input of the asm): a stamp that marks the end of a phase
// whose result is `after` cannot be scheduled above the work that produces it.
__device__ __forceinline__ int64_t global_timer_ns_after(double after) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "d"(after));
  return static_cast<int64_t>(t);
}

// The calling CTA's thread-block cluster, in calls that compile for every target arch: on sm_90+ the
// cooperative-groups cluster; below sm_90 (no clusters: cooperative_groups declares no this_cluster there, so a
// multi-arch build such as "8.0;9.0" would not compile) a cluster of one CTA. The host launches a kernel as
// clusters only on sm_90+ devices, so the one-CTA view is only compiled, never run in place of a real cluster.
struct ClusterView {
  __device__ __forceinline__ static int rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
    return 0;
#endif
  }
  __device__ __forceinline__ static int size() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return static_cast<int>(cooperative_groups::this_cluster().num_blocks());
#else
    return 1;
#endif
  }
  // Every thread of every CTA of the cluster arrives (shared memory writes before it visible cluster-wide).
  __device__ __forceinline__ static void sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __syncthreads();
#endif
  }
  // `p` (this CTA's shared memory) as seen in the shared memory of the CTA of rank q.
  template <typename P>
  __device__ __forceinline__ static P* peer(P* p, int q) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, q);
#else
    (void)q;
    return p;
#endif
  }
};

// CTAs of `kernel` (`threads` threads, `smem` bytes of dynamic shared memory) resident per SM of `device` (the
// current device), asked once per (kernel, device, threads, smem) and kept: launch plans ask on every call,
// and the driver's occupancy query costs microseconds of host time each, as much as a small launch.
inline int resident_ctas_per_sm(const void* kernel, int device, int threads, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, size_t>, int> answers;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, threads, smem);
  if (const auto it = answers.find(key); it != answers.end()) return it->second;
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  answers[key] = per_sm;
  return per_sm;
}

// A device attribute of `device`, asked once per (attribute, device) and kept: launch plans ask on every call.
template <cudaDeviceAttr ATTR>
inline int device_attribute(int device) {
  static int cached[64] = {0};
  if (device >= 0 && device < 64 && cached[device]) return cached[device];
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, ATTR, device));
  if (device >= 0 && device < 64) cached[device] = value;
  return value;
}

// The compute type of an input of type T: float for float/half/bfloat16, double for double.
template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

// weight or bias as the kernels read it: (C,) contiguous, in the compute type, or (`narrow`) in a
// float16/bfloat16 input's own dtype, converted as it is read. A half model's parameters thus need no
// conversion kernels around the launch (a launch and an allocation each, as long as the whole kernel on a
// few-MB diffusion input). The branch is uniform across the grid. Null (`!ref`): no affine.
template <typename T>
struct ParamRef {
  using C = typename Compute<T>::type;
  const void* ptr = nullptr;
  bool narrow = false;

  static ParamRef of(const at::Tensor& t) {
    const bool narrow = t.scalar_type() != c10::CppTypeToScalarType<C>::value;
    TORCH_INTERNAL_ASSERT(!narrow || t.scalar_type() == c10::CppTypeToScalarType<T>::value);
    return {t.data_ptr(), narrow};
  }
  __host__ __device__ explicit operator bool() const { return ptr != nullptr; }
  __host__ __device__ ParamRef operator+(int64_t i) const {
    return {narrow ? static_cast<const void*>(static_cast<const T*>(ptr) + i)
                   : static_cast<const void*>(static_cast<const C*>(ptr) + i), narrow};
  }
  __device__ __forceinline__ C operator[](int64_t i) const {
    if constexpr (std::is_same_v<T, C>) return static_cast<const C*>(ptr)[i];
    else return narrow ? static_cast<C>(static_cast<const T*>(ptr)[i]) : static_cast<const C*>(ptr)[i];
  }
};

// The gradient of a weight or bias as the kernels write it: (C,) contiguous in the compute type, or
// (`narrow`) in a half input's dtype, rounded once as it is stored (the sums stay in double until then).
// Null: not asked for.
template <typename T>
struct ParamGradRef {
  using C = typename Compute<T>::type;
  void* ptr = nullptr;
  bool narrow = false;

  static ParamGradRef of(at::Tensor& t) {
    const bool narrow = t.scalar_type() != c10::CppTypeToScalarType<C>::value;
    TORCH_INTERNAL_ASSERT(!narrow || t.scalar_type() == c10::CppTypeToScalarType<T>::value);
    return {t.data_ptr(), narrow};
  }
  __host__ __device__ explicit operator bool() const { return ptr != nullptr; }
  __device__ __forceinline__ void store(int64_t i, double v) const {
    if constexpr (std::is_same_v<T, C>) static_cast<C*>(ptr)[i] = static_cast<C>(v);
    else if (narrow) static_cast<T*>(ptr)[i] = static_cast<T>(static_cast<C>(v));
    else static_cast<C*>(ptr)[i] = static_cast<C>(v);
  }
};

// n / d for 0 <= n < 2^31 and a divisor 1 <= d < 2^31 fixed for a launch, as a multiply-high, an add and a
// shift (the round-up method of Granlund and Montgomery: shift = ceil(log2 d), magic = floor(2^32 (2^shift - d) /
// d) + 1 < 2^32; umulhi(n, magic) < n, so the add cannot wrap for n < 2^31). A 32-bit division by a runtime value
// is ~20 instructions; the normalisation loops take one per vector to find its channel.
struct FastDivisor {
  uint32_t magic = 1, shift = 0;  // d = 1: (0 + n) >> 0

  FastDivisor() = default;
  explicit FastDivisor(int64_t d) {
    TORCH_INTERNAL_ASSERT(d >= 1 && d < (int64_t(1) << 31), "FastDivisor: divisor out of range");
    while ((int64_t(1) << shift) < d) ++shift;
    magic = static_cast<uint32_t>((((uint64_t(1) << shift) - static_cast<uint64_t>(d)) << 32) /
                                      static_cast<uint64_t>(d) + 1);
  }
  __device__ __forceinline__ int div(int n) const {
    return static_cast<int>((__umulhi(static_cast<uint32_t>(n), magic) + static_cast<uint32_t>(n)) >> shift);
  }
};

// VEC elements of T moved as one 16-byte (or narrower) access.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// Elements per 16-byte access: 4 float, 8 half/bfloat16, 2 double.
template <typename T>
constexpr int vec16() { return static_cast<int>(16 / sizeof(T)); }

template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, VEC>*>(p);
}

// A vector in the compute type, and back. bfloat16 goes in pairs, from and to the 32-bit words a 16-byte load
// fills: element by element, each element is first moved to a 16-bit register of its own with the word kept
// alive beside it (the bfloat16 held kernel needed 115 registers so, more than 3 CTAs per SM allow). bfloat16 ->
// float is exact (the bits shifted up); float -> bfloat16 rounds to nearest even, as static_cast<T> does. Other
// types element by element (float16 in pairs raised its split-plan apply kernel's registers: see normalize_vec).
template <typename T, int VEC>
__device__ __forceinline__ void vec_to_compute(const Vec<T, VEC>& v, typename Compute<T>::type (&out)[VEC]) {
  using C = typename Compute<T>::type;
  if constexpr (std::is_same_v<T, c10::BFloat16> && VEC % 2 == 0) {
    uint32_t words[VEC / 2];
    memcpy(words, &v, sizeof(words));
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = static_cast<C>(v.v[k]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> vec_from_compute(const typename Compute<T>::type (&z)[VEC]) {
  Vec<T, VEC> out;
  if constexpr (std::is_same_v<T, c10::BFloat16> && VEC % 2 == 0) {
    __nv_bfloat162 pairs[VEC / 2];
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) pairs[i] = __floats2bfloat162_rn(z[2 * i], z[2 * i + 1]);
    memcpy(&out, pairs, sizeof(pairs));
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = static_cast<T>(z[k]);
  }
  return out;
}

// Streaming store: the output is not read again by this kernel, so keep it from evicting the input in L2.
template <typename T, int VEC>
__device__ __forceinline__ void store_vec_streaming(T* p, const Vec<T, VEC>& v) {
  if constexpr (sizeof(Vec<T, VEC>) == 16) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
  } else {
    *reinterpret_cast<Vec<T, VEC>*>(p) = v;
  }
}

// A range [begin, end) of a slice (or row) cut at 16-byte boundaries: `head` elements before the first aligned one,
// the aligned body [begin + head, body_end) of whole VEC-element vectors, and the < VEC elements from body_end.
// A slice whose length is not a multiple of VEC starts at another alignment in every slice (D = 2 * 94230
// bf16 elements: slice s starts 8 s bytes past a boundary); its head and tail go element by element, one
// element per thread, and the body still moves in 16-byte vectors. For aligned ranges head = tail = 0.
template <typename T, typename I, int VEC>
struct AlignedSplit {
  I head, body_end;
  __device__ __forceinline__ AlignedSplit(const T* xs, I begin, I end) {
    head = I(0);
    if constexpr (VEC > 1) {
      const unsigned misaligned = static_cast<unsigned>(reinterpret_cast<uintptr_t>(xs + begin) % 16) / sizeof(T);
      if (misaligned != 0) head = static_cast<I>(VEC - static_cast<int>(misaligned));
      if (head > end - begin) head = end - begin;
    }
    body_end = begin + head + (end - begin - head) / VEC * VEC;
  }
  // Slice offset of the element thread t takes from the head and tail (none: -1).
  __device__ __forceinline__ I edge_element(I begin, I end, I t) const {
    if (t < head) return begin + t;
    if (t - head < end - body_end) return body_end + (t - head);
    return I(-1);
  }
};

// GROUPNORM_INLINE_EDGE_VECTORS=0 (read on every call that could use them, for benchmarks): ranges that do not
// start at 16-byte boundaries (NCHW forward slices, backward row-path rows) go one element at a time instead of
// in vectors with element-wise heads and tails.
inline bool edge_vectors_enabled() {
  const char* env = std::getenv("GROUPNORM_INLINE_EDGE_VECTORS");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of two values over the block; every thread gets the result. `scratch` holds 2 * 32 values.
// Ends with a barrier, so scratch may be reused right after.
template <typename T>
__device__ __forceinline__ void block_sum2(T& a, T& b, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) { scratch[warp] = a; scratch[32 + warp] = b; }
  __syncthreads();
  a = lane < warps ? scratch[lane] : T(0);
  b = lane < warps ? scratch[32 + lane] : T(0);
  a = warp_sum(a);
  b = warp_sum(b);
  __syncthreads();
}

}  // namespace gn_inline
#endif  // GN_INLINE_COMMON_CUDA_HEADER
"""
