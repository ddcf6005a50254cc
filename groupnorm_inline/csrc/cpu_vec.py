"""C++ source: vector building blocks of the CPU kernels (forward and backward), on ATen's `at::vec`.

CPU translation unit only (never seen by nvcc). What it provides:

  Pack<T>         kWidth consecutive elements of T (float, double, Half, BFloat16) held as two vectors of the
                  compute type (float; double for double data): loads and stores that convert, and partial
                  loads/stores for the tail of a run (lanes past the end read as 0).
  epilogue        the fused activation applied to a vector (Identity compiles away; Runtime branches once per
                  vector on the activation's kind), and its derivative for the backward.
  Moments         (count, mean, M2) of a set of values in double, merged exactly (Chan et al.'s pairwise
                  formula), so statistics of parts computed on different threads combine without loss.
  run_moments     the moments of a contiguous run: blocks of kBlock elements, each summed in the compute type
                  about a pivot close to the data (the first element, then the running mean), so nothing
                  cancels when |mean| >> std (float32 E[x^2] - E[x]^2 would lose every digit at 1e4 std).
  split_parts     how many parts to cut each unit of work (a slice, a sample) into so that all threads get
                  the same share when the units alone would leave some idle or unbalanced.

ISA: the extension is compiled on the machine that runs it, for the vector level ATen dispatches its own kernels
to there (AVX-512, AVX2 or the portable default; see jit/env.py cpu_vec_flags, whose flags are part of the build
key). With AVX-512 `Vectorized<float>` holds 16 floats, so a Pack of half data is one 32-half load converted by
two vcvtph2ps. At the portable default (no CPU_CAPABILITY_* macro) it is ATen's 32-byte array type that gcc
vectorises with the baseline SSE2 of x86-64 (or NEON on aarch64); the kernels are written so that even this is
enough: one read of the data for the statistics with 3-4 vector operations per element (shifted sums, no
Welford division chain), one read and one write to normalise (a multiply-add per element), conversions of
half types as whole vectors, and all threads busy whatever the number of (n, g) slices.
"""

from .activation import ACTIVATION_HEADER

CPU_VEC_HEADER = ACTIVATION_HEADER + r"""
#ifndef GN_INLINE_CPU_VEC
#define GN_INLINE_CPU_VEC
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <tuple>
#include <type_traits>
#if defined(__unix__)
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

// The vector helpers below are forced inline: in a translation unit this large, gcc's inliner otherwise leaves
// some of them (and at::vec::fmadd) as calls that pass 32-byte vectors through memory, 10x slower.
#if defined(__GNUC__) || defined(__clang__)
#define GN_CPU_INLINE inline __attribute__((always_inline))
#else
#define GN_CPU_INLINE inline
#endif

namespace gn_cpu {

using at::vec::Vectorized;

// Outputs written with non-temporal stores (Pack::store_stream): those whose share per thread is at least a core's
// L2, which a normal store first reads in from memory (the write-allocate read: a quarter of the traffic of a pass
// that reads two tensors and writes one) only to overwrite it, and which would not stay in L2 anyway. Smaller
// shares keep normal stores, so that a consumer right after the kernel may still find them in cache. The
// backward's grad_input pass (2-core AVX-512 machine, in-process A/B call by call, whole backward, streamed from
// 4 MB then): (2,320,64,64) float64 channels-last 3.34 -> 2.62 ms (PyTorch 2.84), NCHW 1.53 -> 1.15 (1.69);
// (4,64,128,128) float32 NCHW 1.15 -> 0.76 (1.19), channels-last 2.05 -> 1.72. A fixed bound fits no machine:
// 2-core AMD EPYC (AVX2, 512 KB L2 a core), 2 threads, (16,640,32) and (16,640,64) G32 float32 backward (1.3 and
// 2.6 MB) went 1.04-1.26x -> 0.96-1.00x and 0.88-1.23x -> 0.81-0.86x PyTorch's time streamed (4 MB bound -> 512
// KB; the kernels alone, called alternately, medians and 10th percentiles of 600 calls, two runs), while on a
// 16-core Xeon (2 MB L2) at 16 threads a 1 MB bound took (8,64,32,32) float32 and (4,64,32,32) float64 backward
// (2 MB) from 0.78x and 0.84x to 0.88x and 0.95x PyTorch's (cpu_rows_ab, 2026-12-07): 128 KB a thread fits L2.
// Where the system does not give L2's size (sysconf), 1 MB.
inline int64_t l2_bytes_per_core() {
  static const int64_t bytes = [] {
#if defined(__unix__) && defined(_SC_LEVEL2_CACHE_SIZE)
    const long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (size > 0) return static_cast<int64_t>(size);
#endif
    return int64_t(1) << 20;
  }();
  return bytes;
}

// Orders this thread's non-temporal stores (Pack::store_stream) before its later stores and the pool's join.
GN_CPU_INLINE void stream_fence() {
#if (defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)) && defined(__SSE2__)
  _mm_sfence();
#endif
}

// stream_vector(p, v): one whole float or double register of the build's vector ISA written to p (aligned to
// kStreamAlign) with a non-temporal store. kStreamAlign == 0: no such store here (the portable build), and
// Pack::store_stream stores normally. Not for Half/BFloat16 data, and not for the forward's output: with them the
// same A/B as above mostly lost (16-bit backward: channels-last 0.71-0.97x, NCHW 0.95-1.17x; forward, 32 rows of
// 4-64 MB outputs, all four dtypes and both layouts: 25 slower at 0.67-0.97x, 7 faster at 1.04-1.77x; 2026-11-27).
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
constexpr uintptr_t kStreamAlign = 64;
GN_CPU_INLINE void stream_vector(float* p, __m512 v) { _mm512_stream_ps(p, v); }
GN_CPU_INLINE void stream_vector(double* p, __m512d v) { _mm512_stream_pd(p, v); }
#elif defined(CPU_CAPABILITY_AVX2) && defined(__AVX__)
constexpr uintptr_t kStreamAlign = 32;
GN_CPU_INLINE void stream_vector(float* p, __m256 v) { _mm256_stream_ps(p, v); }
GN_CPU_INLINE void stream_vector(double* p, __m256d v) { _mm256_stream_pd(p, v); }
#else
constexpr uintptr_t kStreamAlign = 0;
#endif

// The compute type of a data type: double for double, float for float, Half and BFloat16.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// kWidth consecutive elements of T as two vectors of the compute type (two, so that every loop carries two
// independent accumulator chains per sum, and a Half/BFloat16 vector converts into exactly two float vectors).
template <typename T>
struct Pack {
  using C = compute_t<T>;
  using V = Vectorized<C>;
  static constexpr int64_t kVec = V::size();
  static constexpr int64_t kWidth = 2 * kVec;
  static constexpr bool kConverts = !std::is_same_v<T, C>;
  static_assert(!kConverts || Vectorized<T>::size() == kWidth, "a half vector must convert to two float vectors");

  V lo, hi;

  GN_CPU_INLINE static Pack broadcast(C v) { return {V(v), V(v)}; }

  GN_CPU_INLINE static Pack load(const T* p) {
    if constexpr (kConverts) {
      auto halves = at::vec::convert_to_float<T>(Vectorized<T>::loadu(p));
      return {std::get<0>(halves), std::get<1>(halves)};
    } else {
      return {V::loadu(p), V::loadu(p + kVec)};
    }
  }
  // The first `count` (0 < count <= kWidth) elements at p; the other lanes read as 0 (nothing past p + count is
  // touched).
  GN_CPU_INLINE static Pack load(const T* p, int64_t count) {
    if (count >= kWidth) return load(p);
    if constexpr (kConverts) {
      auto halves = at::vec::convert_to_float<T>(Vectorized<T>::loadu(p, count));
      return {std::get<0>(halves), std::get<1>(halves)};
    } else {
      return {V::loadu(p, std::min(count, kVec)), count > kVec ? V::loadu(p + kVec, count - kVec) : V(C(0))};
    }
  }
  GN_CPU_INLINE void store(T* p) const {
    if constexpr (kConverts) {
      at::vec::convert_from_float<T>(lo, hi).store(p);
    } else {
      lo.store(p);
      hi.store(p + kVec);
    }
  }
  GN_CPU_INLINE void store(T* p, int64_t count) const {
    if (count >= kWidth) return store(p);
    if constexpr (kConverts) {
      at::vec::convert_from_float<T>(lo, hi).store(p, static_cast<int>(count));
    } else {
      lo.store(p, static_cast<int>(std::min(count, kVec)));
      if (count > kVec) hi.store(p + kVec, static_cast<int>(count - kVec));
    }
  }
  // Non-temporal store of all kWidth lanes (no read of the destination's lines; weakly ordered: the writer
  // calls stream_fence() before its results are read elsewhere). Falls back to store() where the ISA or the
  // alignment does not allow it, and for Half and BFloat16 data (see stream_vector).
  GN_CPU_INLINE void store_stream(T* p) const {
    if constexpr (kStreamAlign != 0 && !kConverts) {
      // A mask, not `% kStreamAlign`: gcc diagnoses the division by zero of the portable build (kStreamAlign 0)
      // even inside this discarded branch.
      if ((reinterpret_cast<uintptr_t>(p) & (kStreamAlign - 1)) == 0) {
        stream_vector(p, lo);
        stream_vector(p + kVec, hi);
        return;
      }
    }
    store(p);
  }
  // Lanes at or past `count` set to 0.
  GN_CPU_INLINE Pack first(int64_t count) const {
    if (count >= kWidth) return *this;
    const V zero(C(0));
    return {V::set(zero, lo, std::min(count, kVec)), count > kVec ? V::set(zero, hi, count - kVec) : zero};
  }
  // The lanes as C values, lo's first: out[kWidth].
  GN_CPU_INLINE void lanes(C* out) const {
    lo.store(out);
    hi.store(out + kVec);
  }
};

// Whether an output of `elements` T is written with Pack::store_stream (its share per thread at least a core's L2,
// above): false where store_stream would store normally anyway (16-bit data, a build without the stores), so that
// callers skip stream_fence too.
template <typename T>
GN_CPU_INLINE bool stream_output(int64_t elements) {
  if constexpr (kStreamAlign == 0 || Pack<T>::kConverts) {
    (void)elements;
    return false;
  } else {
    const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
    return elements * static_cast<int64_t>(sizeof(T)) / threads >= l2_bytes_per_core();
  }
}

// How many elements of an output run starting at p may go through non-temporal stores: a 64-byte line written
// partly by non-temporal and partly by normal stores costs far more than either way alone (the write-combining
// buffer's partial line meets the cached one). Rows of 160 bytes, (64,40,14,18) G1 float32 channels-last
// backward, full packs streamed and each row's last 8 elements stored normally: 2.3x PyTorch's time at one
// thread (2-core AMD EPYC, AVX2), 1.13x at 8 samples where nothing streams. So a run streams only whole lines:
// from a line-aligned p, up to normal_from (its first element that a normal store writes: a partial or
// overlapping last pack, a scalar tail, the run's end) rounded down to a line; 0 where p is not line-aligned.
// Packs from p are whole lines (kWidth * sizeof(T) is 64 or 128 bytes wherever stores stream), so a pack i
// (elements [i, i + kWidth)) streams where i + kWidth <= the returned count.
constexpr uintptr_t kLineBytes = 64;
// Elements of T in one cache line.
template <typename T>
constexpr int64_t line_elements() { return static_cast<int64_t>(kLineBytes / sizeof(T)); }
template <typename T>
GN_CPU_INLINE int64_t streamed_prefix(const T* p, int64_t normal_from) {
  constexpr int64_t kLine = line_elements<T>();
  if ((reinterpret_cast<uintptr_t>(p) & (kLineBytes - 1)) != 0) return 0;
  return normal_from / kLine * kLine;
}

template <typename T>
GN_CPU_INLINE Pack<T> operator+(const Pack<T>& a, const Pack<T>& b) { return {a.lo + b.lo, a.hi + b.hi}; }
template <typename T>
GN_CPU_INLINE Pack<T> operator-(const Pack<T>& a, const Pack<T>& b) { return {a.lo - b.lo, a.hi - b.hi}; }
template <typename T>
GN_CPU_INLINE Pack<T> operator*(const Pack<T>& a, const Pack<T>& b) { return {a.lo * b.lo, a.hi * b.hi}; }
// a * b + c (a multiply and an add: the portable build has no FMA instruction to fuse them into).
template <typename T>
GN_CPU_INLINE Pack<T> fmadd(const Pack<T>& a, const Pack<T>& b, const Pack<T>& c) {
  return {a.lo * b.lo + c.lo, a.hi * b.hi + c.hi};
}

// The first cnt (<= width) lanes of v stored at p. room: how many elements from p the caller lets this write. Where
// the whole vector fits in it, the vector is stored whole, its lanes past cnt landing on elements that a later
// store of the caller writes again (a group's per-channel constants spilling into the next group's channels): one
// store. Else the cnt lanes one by one, through the stack. (at::vec's store(p, count) and loadu(p, count) are calls
// to memcpy: with groups of 2 channels, those calls were ~85% of the channels-last backward of (4096, 64) G32
// float32, perf on a 2-core AMD EPYC.)
template <typename V>
GN_CPU_INLINE void store_first(const V& v, typename V::value_type* p, int64_t cnt, int64_t room) {
  if (cnt >= V::size() || room >= V::size()) {
    v.store(p);
    return;
  }
  __at_align__ typename V::value_type lane[V::size()];
  v.store(lane);
  for (int64_t i = 0; i < cnt; ++i) p[i] = lane[i];
}
// The first cnt (<= width) elements at p as a vector, its other lanes 0, or (where `readable` elements from p may
// be read and it is a whole vector) the elements that follow them.
template <typename V>
GN_CPU_INLINE V load_first(const typename V::value_type* p, int64_t cnt, int64_t readable) {
  if (cnt >= V::size() || readable >= V::size()) return V::loadu(p);
  __at_align__ typename V::value_type lane[V::size()] = {};
  for (int64_t i = 0; i < cnt; ++i) lane[i] = p[i];
  return V::loadu(lane);
}

// Sum of a pack's lanes, in double: lo + hi, then a tree over the lanes in the compute type (the lanes hold sums
// of at most kBlock / kWidth terms). float: ATen's in-register shuffle tree (vec_reduce_all), cheaper than a store
// and a scalar loop per channel at HW = 256. double: ATen has no SIMD form of vec_reduce_all for it, and its
// generic one rebuilds a vector through memory at every step (perf: 90% of the backward's per-channel sums at
// (2, 512, 16, 16) float64), so the lanes are stored once and added pairwise.
template <typename T>
GN_CPU_INLINE double sum_lanes(const Pack<T>& p) {
  using V = typename Pack<T>::V;
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, double>) {
    constexpr int64_t n = Pack<T>::kVec;
    static_assert((n & (n - 1)) == 0, "a power-of-two vector width");
    __at_align__ double lane[n];
    (p.lo + p.hi).store(lane);
    for (int64_t half = n / 2; half >= 1; half /= 2) {
      for (int64_t i = 0; i < half; ++i) lane[i] += lane[i + half];
    }
    return lane[0];
  } else {
    return static_cast<double>(at::vec::vec_reduce_all<C>([](const V& a, const V& b) { return a + b; }, p.lo + p.hi));
  }
}

// ---------------------------------------------------------------------------------------------- epilogue
// act(z) on one vector, for an activation known at compile time: the formulas of gn_act::forward_as in ATen's
// vector functions (exp, erf, tanh, log1p: SLEEF's 1-ulp versions where ATen uses them). Evaluated lane by lane
// through the scalar libm functions instead, the activation cost ~14x the whole GroupNorm ((2, 320, 64, 64)
// float32 + SiLU on a 2-core AVX-512 machine) and + GELU took 2.1x PyTorch's GroupNorm then GELU.
// The activations' vector formulas below inline AVX-512 min / max intrinsics whose undefined-vector idiom
// (`__m512 __Y = __Y;`) gcc 12 reports as -Wuninitialized when they are inlined into some callers (a false positive
// of that release, seen once the derivative was inlined into the backward's loops): silenced for these functions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// exp on one vector. float lanes on AVX2 and AVX-512 builds: Cephes' expf, inlined: x = n ln2 + r with n = x / ln2
// rounded (ln2 in two parts, so r is exact to the float's precision), exp(r) = 1 + r + r^2 P(r) with P of degree 5,
// times 2^n as two powers of two put together in the exponent field (2^128, at the top of the range, and the
// subnormal results below -87.3 are not one normal float). x clamped to [-104, 88.7228]: +inf past the top (where
// expf overflows), NaN stays NaN (the clamps pass it). Against float64 exp at steps of 1e-4 over [-104, 88.72]:
// at most 1.23 ulp. About fifteen vector operations; ATen's exp() is an out-of-line call of SLEEF's 1-ulp expf,
// which drew 38% of the samples of GroupNorm + SiLU at (16,640,34) G32 float32, 1.3x PyTorch's GroupNorm then SiLU
// (2 threads, AVX2). Other lanes and builds: ATen's.
template <typename V>
GN_CPU_INLINE V exp_vector(const V& x) {
#if (defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)) || \
    (defined(CPU_CAPABILITY_AVX2) && defined(__AVX2__) && defined(__FMA__))
  if constexpr (std::is_same_v<typename V::value_type, float>) {
    constexpr float kTop = 88.72283935546875f;  // the largest float whose exp is finite, rounded up
    const V xc = at::vec::minimum(at::vec::maximum(x, V(-104.0f)), V(kTop));
    const V n = (xc * V(1.44269504088896341f)).round();
    V r = at::vec::fmadd(n, V(-0.693359375f), xc);
    r = at::vec::fmadd(n, V(2.12194440e-4f), r);
    V p(1.9875691500e-4f);
    p = at::vec::fmadd(p, r, V(1.3981999507e-3f));
    p = at::vec::fmadd(p, r, V(8.3334519073e-3f));
    p = at::vec::fmadd(p, r, V(4.1665795894e-2f));
    p = at::vec::fmadd(p, r, V(1.6666665459e-1f));
    p = at::vec::fmadd(p, r, V(5.0000001201e-1f));
    p = at::vec::fmadd(p, r * r, r + V(1.0f));
    // 2^n = 2^n1 2^n2, n1 = floor(n / 2), n2 = n - n1: both within [-75, 64] for n in [-150, 128]
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
    const __m512i ni = _mm512_cvtps_epi32(n), n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const V s1(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23)));
    const V s2(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23)));
#else
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V s1(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
    const V s2(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
#endif
    return V::blendv(p * s1 * s2, V(std::numeric_limits<float>::infinity()), x > V(kTop));
  }
#endif
  return x.exp();
}

// erf(x) on one vector, given e = exp(-x^2) (GELU's derivative needs e itself too). float lanes: the formula of
// ATen's float erf (Abramowitz and Stegun 7.1.26: 1 - t P(t) e with t = 1 / (1 + 0.3275911 |x|), the sign of x;
// absolute error under 1.5e-7) with e from exp_vector, inlined (ATen's calls SLEEF's expf out of line, and GELU's
// derivative called it twice: the backward with GELU took 1.27-1.33x PyTorch's GELU backward then GroupNorm
// backward at (8,64,32,32) and (16,640,32) G32 float32, 2 threads, AVX2). Other lanes: ATen's erf.
template <typename V>
GN_CPU_INLINE V erf_given_gauss(const V& x, const V& e) {
  using C = typename V::value_type;
  if constexpr (std::is_same_v<C, float>) {
    const V one(1.0f);
    const V t = one / at::vec::fmadd(V(0.3275911f), x.abs(), one);
    V r = at::vec::fmadd(V(1.061405429f), t, V(-1.453152027f));
    r = at::vec::fmadd(r, t, V(1.421413741f));
    r = at::vec::fmadd(r, t, V(-0.284496736f));
    r = at::vec::fmadd(r, t, V(0.254829592f));
    const V m = one - r * t * e;
    return V::blendv(m, V(0.0f) - m, x < V(0.0f));
  } else {
    return x.erf();
  }
}

// 1 / (1 + exp(-z)) on one vector (SiLU, Mish's derivative, sigmoid).
template <typename V>
GN_CPU_INLINE V sigmoid_vector(const V& z) {
  using C = typename V::value_type;
  const V one(C(1));
  return one / (one + exp_vector(V(C(0)) - z));
}

// tanh on one vector. float lanes: z P(z^2) / Q(z^2) with z clamped to |z| <= 7.905 (tanh is within 2.7e-7 of 1
// from there on; the quotient there is 1 - 2.4e-7 with fused multiply-adds), P of degree 6 and Q of degree 3:
// the minimax rational of Eigen's float tanh (its published coefficients); from |z| = 9 on, where tanh rounds to
// +-1, +-1 exactly (so tanh(+-inf) = +-1); below |z| = 4e-4 tanh z = z to the float's precision and z is returned
// (keeps the sign of 0 and tiny values exact). Against float64 tanh over
// [-10, 10] and 1e-8 <= |z| <= 10: at most 4e-7 absolute, 6.6 ulp. NaN stays NaN (min / max pass it, the
// comparison fails). One division and ~15 other vector operations; the previous form (exp(2|z|) and a
// division above |z| = 0.625, Cephes' odd polynomial below, both evaluated) cost ~40, and GroupNorm + tanh fused
// took 1.37x eager GroupNorm then tanh at (2, 320, 64, 64) float32 (ATen's Vectorized<float>::tanh, SLEEF's
// 1-ulp tanhf, ~2x more again). double: SLEEF's.
template <typename V>
GN_CPU_INLINE V tanh_vector(const V& z) {
  using C = typename V::value_type;
  if constexpr (std::is_same_v<C, float>) {
    const V bound(7.90531110763549805f);
    const V x = at::vec::minimum(at::vec::maximum(z, V(0.0f) - bound), bound), s = x * x;
    V p(-2.76076847742355e-16f);
    p = at::vec::fmadd(p, s, V(2.00018790482477e-13f));
    p = at::vec::fmadd(p, s, V(-8.60467152213735e-11f));
    p = at::vec::fmadd(p, s, V(5.12229709037114e-08f));
    p = at::vec::fmadd(p, s, V(1.48572235717979e-05f));
    p = at::vec::fmadd(p, s, V(6.37261928875436e-04f));
    p = at::vec::fmadd(p, s, V(4.89352455891786e-03f));
    V q(1.19825839466702e-06f);
    q = at::vec::fmadd(q, s, V(1.18534705686654e-04f));
    q = at::vec::fmadd(q, s, V(2.26843463243900e-03f));
    q = at::vec::fmadd(q, s, V(4.89352518554385e-03f));
    const V a = z.abs(), one(1.0f);
    const V r = V::blendv(x * p / q, V::blendv(one, V(0.0f) - one, z < V(0.0f)), a >= V(9.0f));
    return V::blendv(r, z, a < V(4e-4f));
  } else {
    return z.tanh();
  }
}

template <int KIND, typename V>
GN_CPU_INLINE V activate_vector(const gn_act::Params& p, const V& z) {
  using C = typename V::value_type;
  const V one(C(1)), zero(C(0)), half(C(0.5));
  if constexpr (KIND == gn_act::kSilu) {
    return z * sigmoid_vector(z);
  } else if constexpr (KIND == gn_act::kGelu) {
    const V x = z * V(C(0.70710678118654752440));
    if constexpr (std::is_same_v<C, float>) {
      return half * z * (one + erf_given_gauss(x, exp_vector(V(C(0)) - x * x)));
    } else {
      return half * z * (one + x.erf());
    }
  } else if constexpr (KIND == gn_act::kGeluTanh) {
    const V inner = V(C(0.79788456080286535588)) * (z + V(C(0.044715)) * z * z * z);
    return half * z * (one + tanh_vector(inner));
  } else if constexpr (KIND == gn_act::kRelu) {
    return V::blendv(z, zero, z <= zero);  // NaN stays NaN (the comparison is false)
  } else if constexpr (KIND == gn_act::kLeakyRelu) {
    return V::blendv(z * V(static_cast<C>(p.alpha)), z, z > zero);
  } else if constexpr (KIND == gn_act::kMish) {
    return z * tanh_vector(exp_vector(z).log1p());
  } else if constexpr (KIND == gn_act::kHardswish) {
    const V r = z + V(C(3)), six(C(6));
    return z * V::blendv(V::blendv(r, six, r > six), zero, r < zero) / six;
  } else if constexpr (KIND == gn_act::kHardtanh) {
    const V lo(static_cast<C>(p.alpha)), hi(static_cast<C>(p.beta));
    return V::blendv(V::blendv(z, hi, z > hi), lo, z < lo);
  } else if constexpr (KIND == gn_act::kSigmoid) {
    return sigmoid_vector(z);
  } else if constexpr (KIND == gn_act::kTanh) {
    return tanh_vector(z);
  } else {
    return z;
  }
}

// act(z) on every lane of a pack. Identity: nothing (compiled away). Silu: activate_vector<kSilu>, inlined into the
// kernel's loop. Runtime: one branch per call on the activation's kind, then its vector formulas (activate_vector),
// which gcc keeps out of line (a call per pack, the formula's constants set up in every call). Other functors:
// their apply, lane by lane.
template <typename Ep, typename T>
GN_CPU_INLINE Pack<T> activate(const Ep& ep, const Pack<T>& z) {
  if constexpr (Ep::kIsIdentity) {
    return z;
  } else if constexpr (std::is_same_v<Ep, gn_act::Runtime>) {
    Pack<T> out = z;
    gn_act::with_kind(ep.p.kind, [&](auto kind) {
      constexpr int K = decltype(kind)::value;
      out = {activate_vector<K>(ep.p, z.lo), activate_vector<K>(ep.p, z.hi)};
    });
    return out;
  } else if constexpr (std::is_same_v<Ep, gn_act::Silu>) {
    return {activate_vector<gn_act::kSilu>(ep.p, z.lo), activate_vector<gn_act::kSilu>(ep.p, z.hi)};
  } else {
    using C = compute_t<T>;
    __at_align__ C buf[Pack<T>::kWidth];
    z.lanes(buf);
    ep.apply(buf);
    return {Pack<T>::V::loadu(buf), Pack<T>::V::loadu(buf + Pack<T>::kVec)};
  }
}

// d act / dz on one vector: the formulas of gn_act::derivative_as in ATen's vector functions (as activate_vector;
// lane by lane through libm, the backward with GELU took 3.2x PyTorch's at (2, 320, 64, 64) float32).
template <int KIND, typename V>
GN_CPU_INLINE V derivative_vector(const gn_act::Params& p, const V& z) {
  using C = typename V::value_type;
  const V one(C(1)), zero(C(0)), half(C(0.5));
  if constexpr (KIND == gn_act::kSilu) {
    const V sig = sigmoid_vector(z);
    return sig * (one + z * (one - sig));
  } else if constexpr (KIND == gn_act::kGelu) {
    const V x = z * V(C(0.70710678118654752440)), e = exp_vector(V(C(0)) - x * x);  // e = exp(-z^2 / 2)
    const V cdf = half * (one + erf_given_gauss(x, e));
    const V pdf = e * V(C(0.39894228040143267794));
    return cdf + z * pdf;
  } else if constexpr (KIND == gn_act::kGeluTanh) {
    const V k(C(0.79788456080286535588)), c(C(0.044715));
    const V t = tanh_vector(k * (z + c * z * z * z));
    return half * (one + t) + half * z * (one - t * t) * k * (one + V(C(3)) * c * z * z);
  } else if constexpr (KIND == gn_act::kRelu) {
    return V::blendv(zero, one, z > zero);
  } else if constexpr (KIND == gn_act::kLeakyRelu) {
    return V::blendv(V(static_cast<C>(p.alpha)), one, z > zero);
  } else if constexpr (KIND == gn_act::kMish) {
    const V tsp = tanh_vector(exp_vector(z).log1p());
    const V sig = sigmoid_vector(z);
    return tsp + z * sig * (one - tsp * tsp);
  } else if constexpr (KIND == gn_act::kHardswish) {
    const V three(C(3));
    return V::blendv(V::blendv(one, z / three + half, z <= three), zero, z < zero - three);
  } else if constexpr (KIND == gn_act::kHardtanh) {
    const V lo(static_cast<C>(p.alpha)), hi(static_cast<C>(p.beta));
    return V::blendv(one, zero, (z <= lo) | (z >= hi));
  } else if constexpr (KIND == gn_act::kSigmoid) {
    const V sig = sigmoid_vector(z);
    return sig * (one - sig);
  } else if constexpr (KIND == gn_act::kTanh) {
    const V t = tanh_vector(z);
    return one - t * t;
  } else {
    return one;
  }
}

// Whether the activation `kind` is built on exp, erf or tanh (several plain elements' work an element), not on
// comparisons and products.
inline bool activation_is_costly(int kind) {
  return !(kind == gn_act::kNone || kind == gn_act::kRelu || kind == gn_act::kLeakyRelu ||
           kind == gn_act::kHardtanh || kind == gn_act::kHardswish);
}

// What one element of the forward's normalising pass costs with the epilogue ep, in plain elements streamed, for
// the threads' grain: an activation built on exp, erf or tanh costs several (SiLU: an exp and a division a vector),
// and counted as one element, (16,32,48) G4 + SiLU (24 K elements) stayed on one thread, 1.28x the time of
// PyTorch's GroupNorm (on both threads) and SiLU at 2 threads, float32 (2-core AVX-512 machine).
template <typename Ep>
inline int64_t element_work(const Ep& ep) {
  if constexpr (Ep::kIsIdentity) {
    return 1;
  } else if constexpr (std::is_same_v<Ep, gn_act::Runtime>) {
    return activation_is_costly(ep.p.kind) ? 4 : 1;
  } else {
    (void)ep;
    return 4;
  }
}

// d act / dz on every lane of a pack, for the activation K known at compile time (inlined).
template <int K, typename T>
GN_CPU_INLINE Pack<T> derivative_pack(const gn_act::Params& p, const Pack<T>& z) {
  return {derivative_vector<K>(p, z.lo), derivative_vector<K>(p, z.hi)};
}

#pragma GCC diagnostic pop

// Calls f(kind) with the activation's kind as a compile-time constant (std::integral_constant; kNone without an
// activation): a loop over packs written inside f is compiled once per activation, its derivative inlined. Chosen
// per pack instead (a switch on the kind that gcc kept out of line: a call per pack, the formula's constants set up
// in every call), the backward with an activation took 1.5-1.9x PyTorch's activation backward then GroupNorm
// backward at (2,320,32,32), (8,64,32,32) and (16,32,48) float32 with SiLU, and up to 1.4x with ReLU (2 threads,
// 2-core AVX-512 machine).
template <bool kAct, typename F>
GN_CPU_INLINE void with_activation_kind(const gn_act::Params& act, F&& f) {
  if constexpr (kAct) {
    gn_act::with_kind(act.kind, f);
  } else {
    f(std::integral_constant<int, gn_act::kNone>{});
  }
}

// Calls f(epilogue) with gn_act::Identity when there is no activation, gn_act::Silu for SiLU (GroupNorm + SiLU, the
// diffusion ResNet block), gn_act::Runtime otherwise: three instantiations of each kernel rather than one per
// activation (the build time grows with every one; SiLU's added ~5 s to a ~55 s CPU build). Through Runtime, SiLU's
// call per pack cost as much as its arithmetic: 2 threads, 2-core AVX-512 machine, GroupNorm + SiLU fused against
// PyTorch's GroupNorm then SiLU, float32, Runtime -> Silu: (64,4096,2,2) channels-last 1.12x -> 0.88x, (16,4096,4,4)
// channels-last 1.06x -> 0.79x, (8,320,16,16) 0.99x -> 0.80x, (2,320,64,64) 0.93x -> 0.76x.
template <typename F>
inline void with_epilogue(const gn_act::Params& act, F&& f) {
  if (act.kind == gn_act::kNone) {
    f(gn_act::Identity{});
  } else if (act.kind == gn_act::kSilu) {
    gn_act::Silu ep;
    ep.p = act;
    f(ep);
  } else {
    gn_act::Runtime ep;
    ep.p = act;
    f(ep);
  }
}

// ----------------------------------------------------------------------------------------------- moments
// Count, mean and sum of squared deviations (M2) of a set of values, in double.
struct Moments {
  double n = 0, mean = 0, m2 = 0;

  // Adds a set of nb values with mean mean_b and M2 m2_b: exact up to double rounding, whatever the two means.
  void merge(double nb, double mean_b, double m2_b) {
    if (nb <= 0) return;
    const double total = n + nb;
    const double delta = mean_b - mean;
    const double fb = nb / total;
    mean += delta * fb;
    m2 += m2_b + delta * delta * n * fb;
    n = total;
  }
  void merge(const Moments& o) { merge(o.n, o.mean, o.m2); }
  // Moments of nb values from their sums s1 = sum (x - pivot), s2 = sum (x - pivot)^2 (pivot near the values).
  void merge_shifted(double nb, double pivot, double s1, double s2) {
    if (nb <= 0) return;
    const double d = s1 / nb;
    merge(nb, pivot + d, std::max(s2 - s1 * d, 0.0));
  }
  // 1 / sqrt(biased variance + eps).
  double rstd(double eps) const { return 1.0 / std::sqrt(std::max(m2 / n, 0.0) + eps); }
};

// Runs shorter than a pack are summed element by element (a masked load copies through a buffer), in
// kShortLanes interleaved chains per sum: one running float sum is a chain of dependent additions (~4 cycles
// each) that the compiler may not reorder; with the backward's three sums of 16-element channels, (64, 64, 4, 4)
// G32 float32 backward took 4.5x PyTorch's kernel time (profiler self time, one thread). Eight independent chains
// keep the floating-point adders busy (gcc keeps them as scalar registers; it does not vectorise these sums).
constexpr int kShortLanes = 8;

// The sum of the kShortLanes chains, pairwise.
template <typename C>
GN_CPU_INLINE C add_lanes(const C (&v)[kShortLanes]) {
  static_assert(kShortLanes == 8, "the pairwise tree below");
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// Elements summed in the compute type before their sums are folded into double: 128 per float lane, so the
// float sums keep ~1e-7 relative accuracy; the fold costs ~1% of the loop.
constexpr int64_t kBlock = 2048;

// Shifted sums of one block of 0 < len <= kBlock elements about pivot: s1 = sum (x - pivot), s2 = sum (x - pivot)^2,
// in the compute type, returned in double.
template <typename T>
GN_CPU_INLINE void block_sums(const T* x, int64_t len, compute_t<T> pivot, double& s1, double& s2) {
  using P = Pack<T>;
  using C = compute_t<T>;
  constexpr int64_t W = P::kWidth;
  if (len < W) {
    // Shorter than one pack ((N, C) inputs: a slice of C/G values): element by element, since a masked load
    // copies through a buffer (one out-of-line call per load with AVX-512) and costs more than the sums.
    C v1[kShortLanes] = {}, v2[kShortLanes] = {};
    int64_t i = 0;
    for (; i + kShortLanes <= len; i += kShortLanes) {
      for (int j = 0; j < kShortLanes; ++j) {
        const C d = static_cast<C>(x[i + j]) - pivot;
        v1[j] += d;
        v2[j] += d * d;
      }
    }
    C t1 = 0, t2 = 0;  // the last < kShortLanes elements (see short_channel_sums on why not into the lanes)
    for (; i < len; ++i) {
      const C d = static_cast<C>(x[i]) - pivot;
      t1 += d;
      t2 += d * d;
    }
    s1 = static_cast<double>(add_lanes(v1) + t1);
    s2 = static_cast<double>(add_lanes(v2) + t2);
    return;
  }
  const P k = P::broadcast(pivot);
  P v1 = P::broadcast(C(0)), v2 = v1;
  int64_t i = 0;
  for (; i + W <= len; i += W) {
    const P d = P::load(x + i) - k;
    v1 = v1 + d;
    v2 = fmadd(d, d, v2);
  }
  if (i < len) {
    const P d = (P::load(x + i, len - i) - k).first(len - i);
    v1 = v1 + d;
    v2 = fmadd(d, d, v2);
  }
  s1 = sum_lanes(v1);
  s2 = sum_lanes(v2);
}

// Adds the len elements at x to m. Each block's pivot is the running mean (the first element for the first
// block), so |x - pivot| is of the order of the spread of the data and the float sums do not cancel.
template <typename T>
inline void run_moments(const T* x, int64_t len, Moments& m) {
  using C = compute_t<T>;
  for (int64_t start = 0; start < len; start += kBlock) {
    const int64_t end = std::min(len, start + kBlock);
    const C pivot = m.n > 0 ? static_cast<C>(m.mean) : static_cast<C>(x[start]);
    double s1, s2;
    block_sums(x + start, end - start, pivot, s1, s2);
    m.merge_shifted(static_cast<double>(end - start), static_cast<double>(pivot), s1, s2);
  }
}

// Statistics of up to kStatBatch sets of len values, each given by its shifted sums about its pivot (block_sums),
// as double vectors: mean = pivot + s1 / len, rstd = 1 / sqrt(max(s2 - s1^2 / len, 0) / len + eps) (what
// Moments::merge_shifted and rstd give, a division by len taken as a product with 1 / len). The arrays hold
// kStatBatch entries; lanes at or past count are computed from whatever they hold and not used.
// (gcc 12 reports the undefined-vector idiom of its own AVX-512 max and sqrt intrinsics, `__m512d __Y = __Y;`, as
// -Wuninitialized where this function is compiled in some contexts: silenced for this function only.)
constexpr int64_t kStatBatch = 16;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
inline void batch_statistics(const double* pivot, const double* s1, const double* s2, double len, double eps,
                             double* mean, double* rstd) {
  using V = Vectorized<double>;
  static_assert(kStatBatch % V::size() == 0, "whole vectors of statistics");
  const V inv(1.0 / len), veps(eps), zero(0.0), one(1.0);
  for (int64_t j = 0; j < kStatBatch; j += V::size()) {
    const V a = V::loadu(s1 + j), d = a * inv;
    (V::loadu(pivot + j) + d).store(mean + j);
    const V m2 = at::vec::maximum(V::loadu(s2 + j) - a * d, zero);
    (one / (m2 * inv + veps).sqrt()).store(rstd + j);
  }
}
#pragma GCC diagnostic pop

// ------------------------------------------------------------------------------------------------ threads
// Below this much work (elements, plus each item's fixed cost) a call runs on one thread: a parallel region costs
// more than it saves. It was 32 K (ATen's at::internal::GRAIN_SIZE); on the 16-core Xeon host of an H200 machine one
// thread streamed 16 K elements at 1-2 ns each while other threads of the pool were awake, where PyTorch's kernel
// (parallel from two slices up) split them: ours / PyTorch's forward at 4-16 threads, (1,4,4164) G2 float32 1.4-2.0x,
// (64,3,107) G1 2.5-2.8x, (1,128,141) G4 bfloat16 1.2-1.3x, (8,128,10) G2 bfloat16 1.2-1.5x (12 K); 8 K elements
// ((1,4,2048) G2) were still 0.6-0.8 us faster on one thread at every thread count. On the 2-core AVX-512 machine
// the same rows ran within noise either way (0.8-0.9x PyTorch's).
constexpr int64_t kSerialElements = 10240;

// What one item (an (n, g) slice, a sample) costs besides its elements, in elements streamed: its statistics'
// fold into double, a division and a square root, the per-channel constants. ~40-70 ns a slice against ~0.3-0.5 ns
// an element streamed (2-core AVX-512 machine, (256, 64) G8 and (64, 64) G4 on one thread), so ~128 elements.
constexpr int64_t kItemOverheadElements = 128;

// What each channel of a channels-last sample (or part) costs besides its elements, in elements streamed: its sums'
// fold into double, its share of the group sums and its constants, ~2-4 cycles against ~1 an element. Counted
// into the grain of the channels-last kernels: (3,1280,3,2) float32 (23 K elements, 3.8 K channels) stayed on one
// thread by elements alone, where PyTorch's kernel used both and was 1.3x faster (2-core AVX-512 machine).
constexpr int64_t kChannelOverheadElements = 4;

// A task of at::parallel_for gets at least this much work (elements streamed) once a call is parallel at all. (It was
// 4 K: (64,3,214) G1 float32 at 16 threads then ran as 13 tasks of 5 slices where PyTorch's kernel ran 16 of 4,
// 1.37x its time on the Xeon host; every thread of the pool wakes for a parallel region whatever the grain.)
constexpr int64_t kMinTaskElements = 1024;

// Grain (in items) for at::parallel_for over `items` items of item_elems elements each: items whose work
// (elements plus the fixed cost of each) is below kSerialElements in all go to one thread; above it, every thread
// gets a share (at least kMinTaskElements of work). Counting elements alone kept inputs of many short slices
// ((64, 64) G4, (256, 64) G8: 4-16K elements in 256-2048 slices) on one thread, where PyTorch's kernel (a grain of
// one slice) used both and was 1.4x faster. A grain of kSerialElements of work per task, the rule before, used 2 of
// 16 threads for (64,3,214) G1 (41 K elements), where PyTorch's kernel (grain one slice) used all 16 and took 0.53x
// our time (16-core Xeon host of an H200 machine), the fork of a parallel region costing about the same whatever
// the number of threads in it.
inline int64_t grain_items(int64_t items, int64_t item_elems) {
  const int64_t cost = std::max<int64_t>(1, item_elems) + kItemOverheadElements;
  if (items * cost < kSerialElements) return std::max<int64_t>(1, items);
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  return std::max<int64_t>({int64_t(1), (items + threads - 1) / threads, kMinTaskElements / cost});
}

// Parts to cut each of `units` units of unit_elems elements into. 1 when the units share out evenly over the
// threads (a multiple of the thread count, or many units: at most 1/8 imbalance) or are less than kSplitElements
// in all; otherwise enough parts that units * parts is a multiple of the thread count (every thread gets the same
// share), each part at least min_part_elems elements. Parts cost a second parallel region (their statistics are
// merged between the two), which must save more than it costs: (1,4,4164) G2 float32 forward, two slices cut into
// four parts at 4-16 threads, took 1.5x PyTorch's one region of two tasks (Xeon host); the two slices of
// (1,4,16384) in parts took 0.6-0.85x.
constexpr int64_t kSplitElements = 32768;
inline int64_t split_parts(int64_t units, int64_t unit_elems, int64_t min_part_elems) {
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || units % threads == 0 || units >= 8 * threads) return 1;
  if (units * unit_elems < kSplitElements) return 1;
  const int64_t parts = threads / std::gcd(units, threads);
  return std::max<int64_t>(1, std::min(parts, unit_elems / std::max<int64_t>(1, min_part_elems)));
}

// Chunks of groups to cut each of `units` channels-last samples into (unit_elems elements, `channels` of them a
// row; 1: whole samples). When the samples do not share out evenly over the threads (where split_parts would cut
// them into parts of rows), a sample's groups are cut instead if a number of chunks that evens out the threads'
// shares divides G and leaves every chunk at least min_chunk_channels wide and a multiple of align_channels (whole
// cache lines of each row: chunks of 40 bfloat16 channels, 80 bytes, made the two threads at a chunk edge share a
// line on every row, and (2,320,64,64) bfloat16 at 16 threads took 1.78x PyTorch's time, 16-core Xeon host). Each
// chunk then has statistics of its own, and the work stays one parallel region, with no serial step between the
// parts' sums and their normalisation and no merge of parts (PyTorch's kernel cuts by (n, g) too). Samples of up
// to kMaxChunkedSampleElements (larger ones keep parts of whole rows, not measured against chunks). 2-core AVX-512
// machine, 2 threads, ours / PyTorch's float32 channels-last before -> after (same process, A/B of builds):
// forward (5,512,4,4) 1.13 -> 0.82, (3,1280,3,2) 1.36 -> 1.13 (3 samples of 7.7 K elements: 6 chunks, 3 a
// thread); backward (5,512,4,4) 1.26 -> 1.08, (3,1280,3,2) 1.25 -> 1.16; (1,512,16,16) and (3,256,16,16) within
// noise (0.56-0.73). 16 threads, Xeon host, (2,512,16,16) float32 forward: 0.064 ms in parts of rows, 0.028-0.031
// in 8 chunks of 64 channels, PyTorch's 0.030-0.040.
constexpr int64_t kMaxChunkedSampleElements = 262144;
constexpr int64_t kMinPartRowsOverChunks = 64;
constexpr int64_t kMaxUnevenChunkElements = 16384;
inline int64_t group_chunks(int64_t units, int64_t unit_elems, int64_t G, int64_t channels,
                            int64_t min_chunk_channels, int64_t align_channels) {
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || G <= 1 || units % threads == 0 || units >= 8 * threads) return 1;
  if (unit_elems > kMaxChunkedSampleElements) return 1;
  // Parts of at least kMinPartRowsOverChunks rows (as many parts as split_parts aims for) instead: there the
  // second region and the merge cost less than chunks interleaved along every row, whose threads write alternate
  // blocks of each row of the output. 2-core AMD EPYC (AVX2), 2 threads, channels-last float32 unless said, ours /
  // PyTorch with chunks -> with parts (one build, alternated call by call): forward (1,128,16,9,9) G4 bfloat16
  // (648 rows a part) 1.43 -> 0.81, (1,512,19,10) G8 (95) 1.19 -> 0.76, (1,256,32,32) G8 bfloat16 (512) 1.19 ->
  // 0.90, (3,256,16,16) G8 (128) 0.81 -> 0.74; backward (1,256,32,32) bfloat16 1.26 -> 1.02, (3,256,16,16) 1.12 ->
  // 0.94, (1,512,19,10) 1.11 -> 1.04. Chunks kept where parts are shorter: (1,1024,8,8) G8 (32 rows a part)
  // backward 0.65 against 0.97 in parts, (5,512,4,4) G32 (8) forward 0.71 against 1.08, backward 0.87 against
  // 1.31. On a 16-core Xeon at 16 threads the same line falls between (2,512,16,16) (32 rows a part: chunks 2x
  // faster) and (1,256,32,32) (64: parts 1.6x faster), see below.
  const int64_t rows = unit_elems / std::max<int64_t>(1, channels);
  if (rows / (threads / std::gcd(units, threads)) >= kMinPartRowsOverChunks) return 1;
  if (units * (unit_elems + channels * kChannelOverheadElements) < kSerialElements) return 1;
  const int64_t want = threads / std::gcd(units, threads);
  for (int64_t k = want; k <= G && channels / k >= min_chunk_channels; k += want) {
    if (G % k == 0 && (channels / k) % align_channels == 0) return k;
  }
  // No count evens them out (G below the threads, say): fewer chunks, one round of at least half the threads, where
  // each chunk is at most kMaxUnevenChunkElements: the parted path costs a second parallel region and a serial
  // merge, the idle threads up to a chunk's time over again. Xeon host, 16 threads, ours / PyTorch
  // before -> after, (1,512,19,10) G8 float32 forward 1.10-1.14 -> 0.95-1.04 and backward 1.20-1.23 -> 0.91-0.92
  // (8 chunks of 12 K elements), (1,1024,8,8) G8 forward + backward 1.45 -> 0.95-0.99, (3,256,16,16) G8 backward
  // 1.20-1.24 -> 0.94-0.96 (4 chunks a sample); with 32 K elements a chunk ((1,256,32,32) G8) parts won, forward
  // 0.65-0.69 against 1.05-1.13 in 8 chunks; 16 K ((1,128,32,32)) tied.
  for (int64_t k = std::min(G, threads / units); k >= 2 && 2 * units * k >= threads; --k) {
    if (unit_elems / k > kMaxUnevenChunkElements) break;
    if (G % k == 0 && channels / k >= min_chunk_channels && (channels / k) % align_channels == 0) return k;
  }
  return 1;
}

// Start of part j of `parts` over [0, len), rounded down to a multiple of `align` (parts stay in order; the
// last one ends at len).
inline int64_t part_begin(int64_t len, int64_t parts, int64_t j, int64_t align) {
  if (j <= 0) return 0;
  if (j >= parts) return len;
  return (len * j / parts) / align * align;
}

// Rounds n up to a multiple of m.
inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

}  // namespace gn_cpu
#endif  // GN_INLINE_CPU_VEC
"""
