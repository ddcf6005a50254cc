"""C++ source: the CPU forward kernels (NCHW and channels-last), vectorised with `at::vec` (see cpu_vec.py).

Both layouts make two passes over the data: one read for the statistics, one read and one write to normalise
and apply the fused activation, y = act((x - mean) * a[c] + b[c]) with a = rstd * w[c]. (Not PyTorch's
x * a + (b - mean * a): one more subtraction per element, free in a pass bound by memory, and a slice of one
element, or of equal values, gives exactly b. The channels-last pass is the exception: bound by its loads of x
and of three per-channel vectors, it takes PyTorch's form in every dtype, where the fold costs no accuracy the
mean's own rounding had not already cost: 1-7% faster in float32/float64, 3-15% in half precision, see
forward_channels_last.)

  NCHW (N*G contiguous slices of D = cpg * HW elements). One task per slice does both passes while the slice
  is still in the core's cache, when the slices share out evenly over the threads. Otherwise (fewer slices than
  threads, or an unbalanced count) every slice is cut into parts: parallel moments of the parts, merged exactly
  per slice (Moments::merge), then a parallel normalisation of the same parts (at::parallel_for gives a
  thread the same index range in both passes, so each reads back what it has just read).
  Channels-last (N samples of HW rows of C contiguous channels): per sample (or chunk of its groups, or part of
  its rows), per-channel shifted sums accumulated in registers along C (kWidth channels at a time down a tile of
  rows), folded into group sums (a part's about a pivot all parts of the sample share, so that only G sums a part
  are merged); then the rows are normalised with per-channel mean, a and b vectors. No transposed copy of the
  tensor is made.
"""

from .cpu_vec import CPU_VEC_HEADER

CPU_FORWARD_KERNELS = CPU_VEC_HEADER + r"""
#ifndef GN_INLINE_CPU_FORWARD_KERNELS
#define GN_INLINE_CPU_FORWARD_KERNELS
#include <ATen/core/Tensor.h>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gn_cpu {

// Asks the kernel to back the 2 MB-aligned interior of a large output with transparent huge pages (Linux; where
// THP runs in `madvise` mode, the usual default, nothing else asks for them). glibc serves allocations of 32 MB
// and more (its largest dynamic mmap threshold) from a new mapping every time, whose first writes fault every
// 4 KB page; those faults, not the arithmetic, set the time of a large CPU GroupNorm: a 32 MB float64 copy into
// a new tensor took 9.3 ms with 4 KB pages and 2.8-3.4 ms with the advice (2-core AVX-512 machine), the same copy
// into an existing tensor 2.1 ms. Smaller outputs come from the heap, already faulted in after the first calls:
// nothing to gain there. Only whole huge pages inside the output are advised, and every byte of them is written,
// so no memory is committed beyond the tensor. Advice only: errors are ignored. In a virtual machine the first
// calls can be slower (~40 ms for 32 MB on the machine above, for the first seven calls) while the host backs the
// huge pages' memory for the first time. GROUPNORM_INLINE_CPU_HUGE_PAGES=0 turns it off (read on every call:
// benchmarks alternate the two in one process).
constexpr int64_t kHugePageBytes = int64_t(1) << 21;
constexpr int64_t kHugePageAdviceMinBytes = int64_t(32) << 20;
inline void advise_huge_pages(void* p, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageAdviceMinBytes) return;
  const char* env = std::getenv("GROUPNORM_INLINE_CPU_HUGE_PAGES");
  if (env != nullptr && std::strcmp(env, "0") == 0) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) & ~uintptr_t(kHugePageBytes - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

// weight and bias (each may be undefined: null) as the kernels read them: C contiguous values of compute_t<T>
// each. One already in that form is read in place; one in a half input's own dtype (or strided) is widened by a
// plain loop (a dispatched .to() costs ~1 us a call: the pair was 1.3 us of a 5 us bfloat16 forward at (1,2,2),
// 2-core AVX-512 machine) into a buffer the calling thread keeps, so a call allocates nothing for them. (Timing
// this, (1,4096,16) bfloat16 forwards ran at 12-13 us or at 33 us from one process to the next, with either
// parameter dtype and PyTorch's kernel alike: the 128 KB output sits at glibc's first mmap threshold, and page
// faults on it came and went with the process's heap history.) The pointers stay valid until the thread's next
// call.
template <typename T>
std::pair<const compute_t<T>*, const compute_t<T>*> param_values(const at::Tensor& w, const at::Tensor& b) {
  using C = compute_t<T>;
  thread_local std::vector<C> widened;
  auto in_place = [](const at::Tensor& p) {
    return !p.defined() ||
           (p.scalar_type() == c10::CppTypeToScalarType<C>::value && (p.stride(0) == 1 || p.numel() == 1));
  };
  const int64_t nw = in_place(w) ? 0 : w.numel(), nb = in_place(b) ? 0 : b.numel();
  if (static_cast<int64_t>(widened.size()) < nw + nb) widened.resize(static_cast<size_t>(nw + nb));
  auto values = [&](const at::Tensor& p, C* out) -> const C* {
    if (!p.defined()) return nullptr;
    if (in_place(p)) return p.const_data_ptr<C>();
    const int64_t n = p.numel(), stride = p.stride(0);  // 1-D (check_param)
    auto widen = [&](const auto* src) {
      using S = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
      int64_t i = 0;
      if constexpr (Pack<S>::kConverts && std::is_same_v<compute_t<S>, C>) {
        // Half parameters a pack at a time (element by element, c10::Half's conversion is a software routine:
        // 2048 + 2048 of them were 13% of the float16 channels-last forward of (1,2048,4,5), perf, one thread).
        if (stride == 1) {
          using P = Pack<S>;
          for (; i + P::kWidth <= n; i += P::kWidth) {
            const P v = P::load(src + i);
            v.lo.store(out + i);
            v.hi.store(out + i + P::kVec);
          }
        }
      }
      if (stride == 1) {
        for (; i < n; ++i) out[i] = static_cast<C>(src[i]);
      } else {
        for (; i < n; ++i) out[i] = static_cast<C>(src[i * stride]);
      }
    };
    // (The dtypes check_param lets through: the input's, or float32 beside a half input.)
    switch (p.scalar_type()) {
      case at::kHalf: widen(p.const_data_ptr<c10::Half>()); break;
      case at::kBFloat16: widen(p.const_data_ptr<c10::BFloat16>()); break;
      case at::kFloat: widen(p.const_data_ptr<float>()); break;
      case at::kDouble: widen(p.const_data_ptr<double>()); break;
      default: TORCH_CHECK(false, "param_values: unexpected parameter dtype");
    }
    return out;
  };
  return {values(w, widened.data()), values(b, widened.data() + nw)};
}

// Parts are at least this many elements, and start at multiples of kPartAlign elements (whole cache lines).
constexpr int64_t kMinPartElements = 4096;
constexpr int64_t kPartAlign = 64;
// Rows of a channels-last tile: per-channel sums stay in registers down the tile, then fold into double.
constexpr int64_t kTileRows = 128;
// The column walk's tile: twice as many rows, summed as two interleaved sets of kTileRows (same accuracy), so the
// per-channel fold into double (~40 instructions a channel) costs half as much per element.
constexpr int64_t kColumnTileRows = 2 * kTileRows;

// y[i] = act((x[i] - m) * a + b) for len elements. A run shorter than one pack ((N, C) inputs, 2x2 maps: one
// run per channel) is written element by element when there is no activation: a masked load and store copy
// through a buffer, which cost more than a few scalar steps ((8, 64) G4 float32, one thread: 3.3 us per call
// in the kernel, against PyTorch's 2.5). Out: T, or (no activation) the compute type, where normalize_slice_range
// keeps z for an activation applied over whole packs afterwards.
template <typename T, typename Ep, typename Out = T>
inline void normalize_run(const T* x, Out* y, int64_t len, compute_t<T> m, compute_t<T> a, compute_t<T> b,
                          const Ep& ep) {
  using P = Pack<T>;
  using C = compute_t<T>;
  static_assert(std::is_same_v<Out, T> || (std::is_same_v<Out, C> && Ep::kIsIdentity), "z is kept unactivated");
  auto put = [&](const P& v, Out* at) {
    if constexpr (std::is_same_v<Out, T>) {
      v.store(at);
    } else {
      v.lanes(at);
    }
  };
  if constexpr (Ep::kIsIdentity) {
    if (len < P::kWidth) {
      for (int64_t i = 0; i < len; ++i) y[i] = static_cast<Out>((static_cast<C>(x[i]) - m) * a + b);
      return;
    }
  }
  const P vm = P::broadcast(m), va = P::broadcast(a), vb = P::broadcast(b);
  int64_t i = 0;
  for (; i + P::kWidth <= len; i += P::kWidth) put(activate(ep, fmadd(P::load(x + i) - vm, va, vb)), y + i);
  if (i == len) return;
  if (len >= P::kWidth) {
    // The last pack ends at len and overlaps the one before, whose elements it writes again with the same values
    // (y never aliases x). at::vec's counted load and store copy through a buffer, out of line for 16-bit data:
    // channels of 34 elements (two packs and a tail of 2), (16,640,34) G32 bfloat16 forward 1.16x PyTorch's time
    // and with SiLU 1.28x (2 threads, AVX2).
    i = len - P::kWidth;
    put(activate(ep, fmadd(P::load(x + i) - vm, va, vb)), y + i);
    return;
  }
  if constexpr (std::is_same_v<Out, T>) {  // (an activation's run shorter than a pack)
    activate(ep, fmadd(P::load(x + i, len - i) - vm, va, vb)).store(y + i, len - i);
  }
}

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
// 16-lane float vectors of float32, bfloat16 or float16 data: the lanes in `mask` loaded (the others 0) or stored
// (rounded to nearest even, as at::vec's conversions, whose float -> 16-bit helpers the stores use).
GN_CPU_INLINE __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
GN_CPU_INLINE __m512 load16(const c10::BFloat16* p, __mmask16 mask) {  // the bits, 16 places up: exact
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}
GN_CPU_INLINE __m512 load16(const c10::Half* p, __mmask16 mask) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
}
GN_CPU_INLINE void store16(float* p, __mmask16 mask, __m512 v) { _mm512_mask_storeu_ps(p, mask, v); }
GN_CPU_INLINE void store16(c10::BFloat16* p, __mmask16 mask, __m512 v) {
  _mm256_mask_storeu_epi16(p, mask, at::vec::cvtfp32_bf16(v));
}
GN_CPU_INLINE void store16(c10::Half* p, __mmask16 mask, __m512 v) {
  _mm256_mask_storeu_epi16(p, mask, at::vec::cvtfp32_fp16(v));
}
// The mask of the first count lanes, clamped to [0, 16].
GN_CPU_INLINE __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count <= 0 ? 0u : count >= 16 ? 0xffffu : (1u << count) - 1u);
}
// The low and high 8 of 16 float lanes as doubles.
GN_CPU_INLINE __m512d low_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
GN_CPU_INLINE __m512d high_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
// The lanes of v in `mask` as doubles to out[0, 16).
GN_CPU_INLINE void store16_as_double(double* out, __mmask16 mask, __m512 v) {
  _mm512_mask_storeu_pd(out, static_cast<__mmask8>(mask & 0xff), low_pd(v));
  _mm512_mask_storeu_pd(out + 8, static_cast<__mmask8>(mask >> 8), high_pd(v));
}

// Sums of the lanes of 16 vectors (row i's values in vector i) as one vector, by a tree of in-register shuffles
// (15 pair merges of 2 shuffles and an add; 4 merges would reduce one vector alone). fold_pair is the tree's first
// level: rows a and b -> lanes 0-7 partial sums of a, lanes 8-15 of b. fold_eight takes the 8 first-level vectors
// (rows 2i, 2i + 1 in vector i) through levels 2-4 and returns lane r = the sum of row r.
GN_CPU_INLINE __m512 fold_pair(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}
GN_CPU_INLINE __m512 fold_eight(const __m512* v) {
  __m512 q[4];  // q[i]: 128-bit quarter j holds 4 partial sums of row 4 i + j
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD));
  }
  // e[k], quarter j: two partial sums of row 8 k + j, then two of row 8 k + 4 + j
  const __m512 e0 = _mm512_add_ps(_mm512_shuffle_ps(q[0], q[1], 0x44), _mm512_shuffle_ps(q[0], q[1], 0xEE));
  const __m512 e1 = _mm512_add_ps(_mm512_shuffle_ps(q[2], q[3], 0x44), _mm512_shuffle_ps(q[2], q[3], 0xEE));
  // lane 4 j + t: the sum of row 4 t + j; the permute puts row r in lane r
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(e0, e1, 0x88), _mm512_shuffle_ps(e0, e1, 0xDD));
  return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), f);
}

// gcc 12 reports the undefined pass-through operand inside its own AVX-512 intrinsics (_mm512_undefined_ps) as
// used uninitialized once they are inlined into this function (a false positive; the same intrinsics inlined into
// backward_short_rows_avx512 draw no warning): the warning is off for this function only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// Shifted sums of `count` (<= 16) consecutive NCHW slices of D < 32 elements at x (float32 or 16-bit data), as
// block_sums gives them: pivot[j] = slice j's first element, s1[j] = sum (x - pivot), s2[j] = sum (x - pivot)^2.
// Each slice is one or two masked vector loads, and the 16 slices' sums come out of one shuffle tree per sum
// (block_sums summed such a slice element by element: ~3 operations an element, one slice after another).
template <typename T>
inline void short_slice_sums_avx512(const T* x, int64_t D, int64_t count, double* pivot, double* s1, double* s2) {
  const __mmask16 first = first_lanes(D), second = first_lanes(D - 16);
  auto slice_terms = [&](int64_t j, __m512& d1, __m512& d2) {
    if (j >= count) {
      d1 = d2 = _mm512_setzero_ps();
      return;
    }
    const T* xs = x + j * D;
    const float pv = static_cast<float>(xs[0]);
    pivot[j] = static_cast<double>(pv);
    const __m512 k = _mm512_set1_ps(pv);
    const __m512 d = _mm512_maskz_sub_ps(first, load16(xs, first), k);
    d1 = d;
    d2 = _mm512_mul_ps(d, d);
    if (second) {
      const __m512 e = _mm512_maskz_sub_ps(second, load16(xs + 16, second), k);
      d1 = _mm512_add_ps(d1, e);
      d2 = _mm512_fmadd_ps(e, e, d2);
    }
  };
  __m512 f1[8], f2[8];
  for (int i = 0; i < 8; ++i) {
    __m512 a1, a2, b1, b2;
    slice_terms(2 * i, a1, a2);
    slice_terms(2 * i + 1, b1, b2);
    f1[i] = fold_pair(a1, b1);
    f2[i] = fold_pair(a2, b2);
  }
  store16_as_double(s1, 0xffff, fold_eight(f1));
  store16_as_double(s2, 0xffff, fold_eight(f2));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Elements [i, hi) of an NCHW slice (float32, bfloat16 or float16 data) of channels shorter than a pack (HW < 32),
// 16 at a time (the last vector masked): lane l of the vector at element i belongs to channel (i + l) / HW =
// c0 + (r + l) / HW, c0 = i / HW, r = i % HW. The 16 channels' a = rstd * w (in double, then rounded, as the
// scalar loop does) and shifts from c0 on are loaded (masked to the range's channels) and spread to the lanes by
// one permute each. (r + l) / HW < 31 / 1 is taken as a float product with 1 / HW enlarged by 1e-6: exact multiples
// stay at or above their quotient, the others are at least 1/31 below the next integer, so truncation gives the
// quotient. Same arithmetic per element as the scalar loop: fma(x - m, a, shift), written to ys, or as floats to
// z_out[0, hi - i) when given (the activation is then applied by the caller). Returns hi. The scalar loop
// takes ~3 cycles an element (float32; more with conversions): half of our whole forward at (16, 256, 2, 2) G32
// float32, one thread; bfloat16 (64, 64, 4, 4) and (64, 64, 5, 5) G32 forward took 1.2-1.3x PyTorch's time.
template <typename T>
inline int64_t normalize_short_channels_avx512(const T* xs, T* ys, int64_t i, int64_t hi, int64_t HW,
                                               const float* w, const float* b, float m, double rstd,
                                               float* z_out = nullptr) {
  const int64_t first = i;
  const int64_t channels_end = (hi - 1) / HW + 1;
  const __m512 vm = _mm512_set1_ps(m), ones = _mm512_set1_ps(1.0f), zeros = _mm512_setzero_ps();
  const __m512 inv_hw = _mm512_set1_ps(static_cast<float>((1.0 + 1e-6) / static_cast<double>(HW)));
  const __m512d vr = _mm512_set1_pd(rstd);
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  int64_t c0 = i / HW, r = i - c0 * HW;
  const int64_t dc = 16 / HW, dr = 16 % HW;
  for (; i < hi; i += 16) {
    const __mmask16 in_range = first_lanes(hi - i), mask = first_lanes(channels_end - c0);
    const __m512 wv = w ? _mm512_maskz_loadu_ps(mask, w + c0) : ones;
    const __m256 w_lo = _mm512_castps512_ps256(wv);
    const __m256 w_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(wv), 1));
    const __m256 a_lo = _mm512_cvtpd_ps(_mm512_mul_pd(vr, _mm512_cvtps_pd(w_lo)));
    const __m256 a_hi = _mm512_cvtpd_ps(_mm512_mul_pd(vr, _mm512_cvtps_pd(w_hi)));
    const __m512 a_ch = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a_lo)), _mm256_castps_pd(a_hi), 1));
    const __m512 b_ch = b ? _mm512_maskz_loadu_ps(mask, b + c0) : zeros;
    const __m512i offset = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(r)));
    const __m512i idx = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(offset), inv_hw));
    const __m512 a = _mm512_permutexvar_ps(idx, a_ch), shift = _mm512_permutexvar_ps(idx, b_ch);
    const __m512 z = _mm512_fmadd_ps(_mm512_sub_ps(load16(xs + i, in_range), vm), a, shift);
    if (z_out) {
      _mm512_mask_storeu_ps(z_out + (i - first), in_range, z);
    } else {
      store16(ys + i, in_range, z);
    }
    c0 += dc;
    r += dr;
    if (r >= HW) {
      r -= HW;
      ++c0;
    }
  }
  return hi;
}
#endif

// Elements [lo, hi) of one NCHW slice (cpg rows of HW): channel cl of the group uses w[cl], b[cl] (null: 1, 0).
template <typename T, typename Ep>
inline void normalize_slice_range(const T* xs, T* ys, int64_t lo, int64_t hi, int64_t HW, const compute_t<T>* w,
                                  const compute_t<T>* b, double mean, double rstd, const Ep& ep) {
  using C = compute_t<T>;
  using P = Pack<T>;
  if (HW < P::kWidth) {
    // Channels shorter than one pack ((N, C) inputs, 2x2 maps): one loop over the range with the channel's
    // scale updated at each channel boundary, in the compute type. (A normalize_run call per channel, out of
    // line, cost 1.4-2x PyTorch's CPU kernel at (64, 64) G4 and (16, 256, 2, 2) G32.)
    const C m = static_cast<C>(mean);
    auto scale_of = [&](int64_t cl) { return static_cast<C>(w ? rstd * static_cast<double>(w[cl]) : rstd); };
    if constexpr (!Ep::kIsIdentity) {
      // With an activation: z element by element, the activation a whole pack of them at a time. (Per channel,
      // a masked pack paid the activation on all kWidth lanes for HW of them: (16, 256, 2, 2) G32 + SiLU took
      // 1.1 ms a call, 14x PyTorch's GroupNorm then SiLU.)
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
      if constexpr (std::is_same_v<C, float>) {
        // z of up to kChunk elements at a time 16 a step (normalize_short_channels_avx512), then the activation
        // a pack at a time. Element by element, z cost ~10 operations an element (the channel's scale in double
        // at every channel boundary, which is every element for (N, C) inputs): (8, 1024) G4 float32 + tanh
        // forward took 1.2x eager GroupNorm then tanh.
        constexpr int64_t kChunk = 8 * P::kWidth;
        __at_align__ float z[kChunk];
        for (int64_t start = lo; start < hi; start += kChunk) {
          const int64_t len = std::min(kChunk, hi - start);
          normalize_short_channels_avx512(xs, ys, start, start + len, HW, w, b, m, rstd, z);
          for (int64_t i0 = 0; i0 < len; i0 += P::kWidth) {
            const int64_t n = std::min<int64_t>(P::kWidth, len - i0);
            const typename P::V lo_v = P::V::loadu(z + i0, std::min<int64_t>(n, P::kVec));
            const typename P::V hi_v = n > P::kVec ? P::V::loadu(z + i0 + P::kVec, n - P::kVec) : typename P::V(0.0f);
            activate(ep, P{lo_v, hi_v}).store(ys + start + i0, n);
          }
        }
        return;
      }
#endif
      int64_t cl = lo / HW, next = (cl + 1) * HW;
      C a = scale_of(cl), sh = b ? b[cl] : C(0);
      __at_align__ C z[P::kWidth];
      for (int64_t i0 = lo; i0 < hi; i0 += P::kWidth) {
        const int64_t n = std::min<int64_t>(P::kWidth, hi - i0);
        for (int64_t j = 0; j < n; ++j) {
          if (i0 + j == next) {
            ++cl;
            next += HW;
            a = scale_of(cl);
            sh = b ? b[cl] : C(0);
          }
          z[j] = (static_cast<C>(xs[i0 + j]) - m) * a + sh;
        }
        for (int64_t j = n; j < P::kWidth; ++j) z[j] = C(0);
        activate(ep, P{P::V::loadu(z), P::V::loadu(z + P::kVec)}).store(ys + i0, n);
      }
      return;
    } else {
      // float32 and 16-bit data on AVX-512 builds: 16 elements a step (the scalar loop then has nothing left).
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
      if constexpr (std::is_same_v<C, float>) lo = normalize_short_channels_avx512(xs, ys, lo, hi, HW, w, b, m, rstd);
#endif
      // Elsewhere, channels of 2 or more elements: up to kChunk elements at a time, each element's scale and shift
      // first spread into two rows a channel at a time (vector-wide broadcast stores, whose lanes past the channel
      // the next channel's overwrite), then a pack a step across channels. Element by element (~3 cycles an
      // element, more with conversions), 2-core AMD EPYC (AVX2), one thread, ours / PyTorch's time, alternating
      // processes: (4,1024,8) G32 bfloat16 forward 1.26-1.52x -> 0.57-0.60x, float32 1.18-1.20x -> 0.58-0.59x,
      // float16 0.77-0.84x -> 0.40-0.43x, (4,1024,6) bfloat16 0.75x -> 0.40-0.41x. (N, C) inputs keep the element
      // loop: two broadcast stores an element cost more there ((8,1024) G4 float32 0.52-0.53x -> 0.76-0.77x).
      if (HW == 1) {
        for (int64_t i = lo; i < hi; ++i) {
          ys[i] = static_cast<T>((static_cast<C>(xs[i]) - m) * scale_of(i) + (b ? b[i] : C(0)));
        }
        return;
      }
      using V = typename P::V;
      constexpr int64_t kChunk = 16 * P::kWidth;
      __at_align__ C ar[kChunk + P::kWidth];
      __at_align__ C br[kChunk + P::kWidth];
      const P vm = P::broadcast(m);
      for (int64_t start = lo; start < hi; start += kChunk) {
        const int64_t len = std::min(kChunk, hi - start);
        for (int64_t cl = start / HW; cl * HW < start + len; ++cl) {
          const int64_t begin = std::max(start, cl * HW), end = std::min(start + len, (cl + 1) * HW);
          const V va(scale_of(cl)), vb(b ? b[cl] : C(0));
          for (int64_t i = begin - start; i < end - start; i += P::kVec) {
            va.store(ar + i);
            vb.store(br + i);
          }
        }
        int64_t i = 0;
        for (; i + P::kWidth <= len; i += P::kWidth) {
          fmadd(P::load(xs + start + i) - vm, P{V::loadu(ar + i), V::loadu(ar + i + P::kVec)},
                P{V::loadu(br + i), V::loadu(br + i + P::kVec)})
              .store(ys + start + i);
        }
        for (; i < len; ++i) ys[start + i] = static_cast<T>((static_cast<C>(xs[start + i]) - m) * ar[i] + br[i]);
      }
      return;
    }
  }
  if constexpr (!Ep::kIsIdentity) {
    if (HW % P::kWidth != 0) {
      // With an activation, channels that end in a partial pack: z of up to kChunk elements, channel by channel,
      // into a buffer (normalize_run with Out = C: its overlapping last pack is cheap without the activation),
      // then the activation over the buffer a whole pack at a time. Channel by channel, each channel's partial
      // pack paid the activation on all kWidth lanes: (16,640,34) G32 float32 + SiLU (three packs of SiLU for 34
      // elements) took 1.14x PyTorch's GroupNorm then SiLU (2 threads, AVX2).
      using V = typename P::V;
      constexpr int64_t kChunk = 1024;
      __at_align__ C z[kChunk + P::kWidth];
      for (int64_t start = lo; start < hi; start += kChunk) {
        const int64_t len = std::min(kChunk, hi - start);
        for (int64_t cl = start / HW; cl * HW < start + len; ++cl) {
          const int64_t begin = std::max(start, cl * HW), end = std::min(start + len, (cl + 1) * HW);
          const double a = w ? rstd * static_cast<double>(w[cl]) : rstd;
          normalize_run<T, gn_act::Identity, C>(xs + begin, z + (begin - start), end - begin, static_cast<C>(mean),
                                                static_cast<C>(a), b ? b[cl] : C(0), gn_act::Identity{});
        }
        for (int64_t i = len; i < len + P::kWidth; i += P::kVec) V(C(0)).store(z + i);  // (lanes past the range)
        int64_t i = 0;
        for (; i + P::kWidth <= len; i += P::kWidth) {
          activate(ep, P{V::loadu(z + i), V::loadu(z + i + P::kVec)}).store(ys + start + i);
        }
        if (i < len) activate(ep, P{V::loadu(z + i), V::loadu(z + i + P::kVec)}).store(ys + start + i, len - i);
      }
      return;
    }
  }
  for (int64_t cl = lo / HW; cl * HW < hi; ++cl) {
    const int64_t begin = std::max(lo, cl * HW), end = std::min(hi, (cl + 1) * HW);
    const double a = w ? rstd * static_cast<double>(w[cl]) : rstd;
    normalize_run(xs + begin, ys + begin, end - begin, static_cast<C>(mean), static_cast<C>(a),
                  b ? b[cl] : C(0), ep);
  }
}

// x, y: (N*G slices, D = cpg * HW) contiguous; w, b: (C,) or null; mean, rstd: (N*G,).
template <typename T, typename Ep>
void forward_nchw(const T* x, T* y, const compute_t<T>* w, const compute_t<T>* b, compute_t<T>* mean_out,
                  compute_t<T>* rstd_out, int64_t N, int64_t G, int64_t cpg, int64_t HW, double eps, const Ep& ep) {
  using C = compute_t<T>;
  const int64_t slices = N * G, D = cpg * HW, work = element_work(ep);
  auto wg = [&](int64_t s) { return w ? w + (s % G) * cpg : nullptr; };
  auto bg = [&](int64_t s) { return b ? b + (s % G) * cpg : nullptr; };
  const int64_t parts = split_parts(slices, D, kMinPartElements);
  if (parts == 1 && D <= kBlock) {
    // Slices of one block of sums, up to kStatBatch at a time (at most kStatBatchBytes of data, which stays in
    // L1 for the normalisation): the sums of each, then the batch's statistics as vectors, then the
    // normalisation of each. One slice at a time, each slice's statistics ended in a dependent chain of four
    // double divisions and a square root that the next slice's work queued behind (perf: a third of the
    // forward's samples at (64, 64, 4, 4) G32 float32, 2048 slices of 32 elements).
    constexpr int64_t kStatBatchBytes = 16384;
    const int64_t batch = std::clamp<int64_t>(kStatBatchBytes / (D * static_cast<int64_t>(sizeof(T))), 1, kStatBatch);
    at::parallel_for(0, slices, grain_items(slices, D * work), [&](int64_t first, int64_t last) {
      __at_align__ double pivot[kStatBatch] = {}, s1[kStatBatch] = {}, s2[kStatBatch] = {};
      __at_align__ double mean[kStatBatch], rstd[kStatBatch];
      for (int64_t s0 = first; s0 < last; s0 += batch) {
        const int64_t count = std::min(batch, last - s0);
        bool summed = false;
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512F__)
        if constexpr (std::is_same_v<C, float>) {
          static_assert(kStatBatch == 16, "one shuffle tree per batch");
          if (D < 32) {
            short_slice_sums_avx512(x + s0 * D, D, count, pivot, s1, s2);
            summed = true;
          }
        }
#endif
        for (int64_t j = 0; j < count && !summed; ++j) {
          const T* xs = x + (s0 + j) * D;
          const C pv = static_cast<C>(xs[0]);
          pivot[j] = static_cast<double>(pv);
          block_sums(xs, D, pv, s1[j], s2[j]);
        }
        batch_statistics(pivot, s1, s2, static_cast<double>(D), eps, mean, rstd);
        for (int64_t j = 0; j < count; ++j) {
          const int64_t s = s0 + j;
          mean_out[s] = static_cast<C>(mean[j]);
          rstd_out[s] = static_cast<C>(rstd[j]);
          normalize_slice_range(x + s * D, y + s * D, 0, D, HW, wg(s), bg(s), mean[j], rstd[j], ep);
        }
      }
    });
    return;
  }
  if (parts == 1) {
    at::parallel_for(0, slices, grain_items(slices, D * work), [&](int64_t first, int64_t last) {
      for (int64_t s = first; s < last; ++s) {
        Moments m;
        run_moments(x + s * D, D, m);
        const double rstd = m.rstd(eps);
        mean_out[s] = static_cast<C>(m.mean);
        rstd_out[s] = static_cast<C>(rstd);
        normalize_slice_range(x + s * D, y + s * D, 0, D, HW, wg(s), bg(s), m.mean, rstd, ep);
      }
    });
    return;
  }
  const int64_t items = slices * parts;
  auto begin_of = [&](int64_t item) { return part_begin(D, parts, item % parts, kPartAlign); };
  auto end_of = [&](int64_t item) { return part_begin(D, parts, item % parts + 1, kPartAlign); };
  std::vector<Moments> partial(static_cast<size_t>(items));
  at::parallel_for(0, items, 1, [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const int64_t lo = begin_of(it);
      run_moments(x + (it / parts) * D + lo, end_of(it) - lo, partial[it]);
    }
  });
  std::vector<double> mean(static_cast<size_t>(slices)), rstd(static_cast<size_t>(slices));
  for (int64_t s = 0; s < slices; ++s) {
    Moments m;
    for (int64_t j = 0; j < parts; ++j) m.merge(partial[s * parts + j]);
    mean[s] = m.mean;
    rstd[s] = m.rstd(eps);
    mean_out[s] = static_cast<C>(mean[s]);
    rstd_out[s] = static_cast<C>(rstd[s]);
  }
  at::parallel_for(0, items, 1, [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const int64_t s = it / parts;
      normalize_slice_range(x + s * D, y + s * D, begin_of(it), end_of(it), HW, wg(s), bg(s), mean[s], rstd[s], ep);
    }
  });
}

// Asks for the cache lines of kWidth elements from p (a hint: never faults, whatever p points at).
template <typename T>
GN_CPU_INLINE void prefetch_run(const T* p) {
  constexpr int64_t kBytes = Pack<T>::kWidth * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < kBytes; off += 64) __builtin_prefetch(reinterpret_cast<const char*>(p) + off, 0, 3);
}

// Asks for the bytes [begin, end) into L2 in address order, a few lines per call of step(): spread over the
// column walks of one tile, it brings the next tile (its rows are contiguous) in as one sequential stream, which
// memory serves faster than the walks' own strided reads of short runs.
struct TilePrefetcher {
  const char* at;
  const char* end;
  int64_t lines_per_step;
  GN_CPU_INLINE void step() {
    for (int64_t q = 0; q < lines_per_step && at < end; ++q, at += 64) __builtin_prefetch(at, 0, 2);
  }
};

// Per-channel shifted sums of rows [lo, hi) of one channels-last sample x (rows of `channels` values, `stride`
// apart: the whole row, or a range of its groups' channels): about the
// pivot p[c] = x[lo, c] (the part's first row), s1[c] = sum (x - p[c]) and s2[c] = sum (x - p[c])^2 (written,
// double), float sums down each tile of kColumnTileRows rows added into double per tile. By columns: kWidth
// channels at a time down the tile, the sums in registers. (A walk in row order, adding each row into per-channel
// sums held in L1, read the data as one sequential stream but loaded and stored the sums at every row: it lost for
// every dtype. Against PyTorch on a 2-core AVX-512 machine, float64 channels-last forward, the column walk took
// (8, 32, 32, 32) from 0.88-1.13x to 1.31-1.41x and (2, 512, 16, 16) from 0.84-1.06x to 1.09-1.22x, and left the
// large rows where they were; for float32 the row order took (2, 512, 16, 16) from 0.037 to 0.048 ms and
// (1, 128, 256, 256) float16 from 1.13 to 1.40 ms.) Sums, not each channel's mean and M2: merging a tile into a
// channel's moments took two double divisions per channel, which set the time of samples of few rows (random
// problems, 2 threads: (2, 640, 2, 2) float32 1.8x PyTorch's forward, (64, 40, 2, 4) G1 2.9x); the group's
// statistics shift the sums to one pivot and divide once (forward_channels_last).
// `pivot`: the caller's scratch of round_up(channels, kWidth) compute-type elements.
template <typename T>
void channel_sums(const T* x, int64_t channels, int64_t stride, int64_t lo, int64_t hi, compute_t<T>* pivot,
                  double* pivot_out, double* s1_out, double* s2_out) {
  using P = Pack<T>;
  using C = compute_t<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  // The first row as pivots, a pack at a time (element by element, converting and storing four values per
  // channel, this was most of the sums of samples of a few rows: perf at (32,64,2,3) float16).
  for (int64_t c = 0; c < channels; c += W) {
    const P first = P::load(x + lo * stride + c, std::min(W, channels - c));  // lanes past `channels`: 0
    first.lo.store(pivot + c);
    first.hi.store(pivot + c + P::kVec);
  }
  for (int64_t c = 0; c < channels; ++c) pivot_out[c] = static_cast<double>(pivot[c]);
  std::fill_n(s1_out, channels, 0.0);
  std::fill_n(s2_out, channels, 0.0);
  __at_align__ C l1[W];
  __at_align__ C l2[W];
  for (int64_t r0 = lo; r0 < hi; r0 += kColumnTileRows) {
    const int64_t rows = std::min(kColumnTileRows, hi - r0);
    const T* tile_end = x + (r0 + rows) * stride;
    const int64_t next_rows_all = std::min(hi, r0 + rows + kColumnTileRows) - (r0 + rows);
    const int64_t next_bytes = next_rows_all > 0 ? ((next_rows_all - 1) * stride + channels) *
                                                       static_cast<int64_t>(sizeof(T)) : 0;
    const int64_t steps = std::max<int64_t>(1, (channels + W - 1) / W * ((rows + 1) / 2));
    TilePrefetcher ahead{reinterpret_cast<const char*>(tile_end), reinterpret_cast<const char*>(tile_end) + next_bytes,
                         next_bytes > 0 ? (next_bytes / 64 + steps) / steps : 0};
    for (int64_t c = 0; c < channels; c += W) {
      const int64_t cnt = std::min(W, channels - c);
      const P k{V::loadu(pivot + c), V::loadu(pivot + c + P::kVec)};
      P s1 = P::broadcast(C(0)), s2 = s1;
      const T* p = x + r0 * stride + c;
      // The next walk's rows (the next kWidth channels of this tile, else the first of the next tile), fetched
      // one walk ahead: strided reads of short runs are not prefetched by the hardware, and without this the
      // walk waits on every row (perf: 2/3 of its samples on the load at (1, 128, 256, 256) float16).
      const T* next = c + W < channels ? p + W : x + (r0 + kColumnTileRows) * stride;
      const int64_t next_rows = c + W < channels ? rows : std::min(kColumnTileRows, hi - r0 - kColumnTileRows);
      if (cnt == W) {
        // Two rows per step into two sets of sums: each sum's add chain then carries half the rows (the adds'
        // latency, not the loads, bounded the walk once its rows were prefetched).
        P t1 = s1, t2 = s1;
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2) {
          if (r < next_rows) prefetch_run(next + r * stride);
          if (r + 1 < next_rows) prefetch_run(next + (r + 1) * stride);
          ahead.step();
          const P d = P::load(p + r * stride) - k;
          const P e = P::load(p + (r + 1) * stride) - k;
          s1 = s1 + d;
          s2 = fmadd(d, d, s2);
          t1 = t1 + e;
          t2 = fmadd(e, e, t2);
        }
        if (r < rows) {
          const P d = P::load(p + r * stride) - k;
          s1 = s1 + d;
          s2 = fmadd(d, d, s2);
        }
        s1 = s1 + t1;
        s2 = s2 + t2;
      } else {  // lanes past cnt: 0 loaded, 0 pivot
        for (int64_t r = 0; r < rows; ++r) {
          if (r < next_rows) prefetch_run(next + r * stride);
          if (r % 2 == 0) ahead.step();
          const P d = P::load(p + r * stride, cnt) - k;
          s1 = s1 + d;
          s2 = fmadd(d, d, s2);
        }
      }
      s1.lanes(l1);
      s2.lanes(l2);
      if (r0 + rows == hi) {  // the last tile
        for (int64_t j = 0; j < cnt; ++j) {
          s1_out[c + j] += static_cast<double>(l1[j]);
          s2_out[c + j] += static_cast<double>(l2[j]);
        }
        continue;
      }
      // More tiles follow: the channel's pivot moves to its running mean (rounded to the compute type), its sums
      // shifted with it: sum (x - p') = s1 - n e, sum (x - p')^2 = s2 - e (2 s1 - n e) for e = p' - p. A first row far
      // from the channel's values then costs accuracy in its first tile only, not in every tile after it.
      const double count = static_cast<double>(r0 + rows - lo), inv_count = 1.0 / count;
      for (int64_t j = 0; j < cnt; ++j) {
        const double s1 = s1_out[c + j] + static_cast<double>(l1[j]), s2 = s2_out[c + j] + static_cast<double>(l2[j]);
        const C moved = static_cast<C>(pivot_out[c + j] + s1 * inv_count);
        const double e = static_cast<double>(moved) - pivot_out[c + j];
        s1_out[c + j] = s1 - count * e;
        s2_out[c + j] = std::max(s2 - e * (2 * s1 - count * e), 0.0);
        pivot[c + j] = moved;
        pivot_out[c + j] = static_cast<double>(moved);
      }
    }
  }
}

// Samples of few rows whose groups are at least a pack wide: group g's shifted sums straight from its runs of cpg
// channels in rows [0, rows) (`stride` apart), about one pivot, the group's first value, without channel_sums'
// per-channel sums (three doubles per channel written, then added up per group: at a few rows more work than the
// data itself; (64,4096,2,2) G32 float32 forward took 1.85x PyTorch's time, 2 threads). The pack sums are folded
// into double every kBlock / kWidth additions per lane, as block_sums'. q, t1, t2: G each.
// Taken (use_group_rows) for at most kGroupRowsMaxRows rows, and while the lanes the groups' masked last packs
// leave idle, rows x (cpg rounded up to a pack - cpg), stay within kGroupRowsIdle x cpg. 2-core AVX-512 machine, 2
// threads, float32 channels-last forward, per-channel sums -> group sums (us, alternating with PyTorch's in one
// process): (64,4096,2,2) 189 -> 118, (32,4096,1,3) 93 -> 56, (8,4096,6,6) 118 -> 114, (8,4096,8,8) 208 -> 181,
// (32,1280,2,3) 38 -> 30; with 40 channels a group (a full pack and a quarter) (8,1280,4,4) 20.9 -> 22.4 and
// (8,1280,6,6) 35.1 -> 39.0, where the idle lanes cost more than the per-channel sums save; past 64 rows
// (4,1024,32,32) 399 -> 609 (a strip of the sample a group: strided over many rows).
constexpr int64_t kGroupRowsMaxRows = 64;
constexpr int64_t kGroupRowsIdle = 8;
template <typename T>
inline bool use_group_rows(int64_t G, int64_t cpg, int64_t rows) {
  constexpr int64_t W = Pack<T>::kWidth;
  return G > 1 && cpg >= W && rows <= kGroupRowsMaxRows && rows * (round_up(cpg, W) - cpg) <= kGroupRowsIdle * cpg;
}

template <typename T>
void group_sums_rows(const T* x, int64_t stride, int64_t rows, int64_t G, int64_t cpg, double* q, double* t1,
                     double* t2) {
  using P = Pack<T>;
  using C = compute_t<T>;
  constexpr int64_t W = P::kWidth;
  const int64_t whole = cpg / W * W, tail = cpg - whole;
  const int64_t fold_rows = std::max<int64_t>(1, kBlock / W / ((cpg + W - 1) / W));
  for (int64_t g = 0; g < G; ++g) {
    const T* xg = x + g * cpg;
    const C pivot = static_cast<C>(xg[0]);
    const P k = P::broadcast(pivot);
    double d1 = 0, d2 = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += fold_rows) {
      const int64_t r1 = std::min(rows, r0 + fold_rows);
      P s1 = P::broadcast(C(0)), s2 = s1;
      for (int64_t r = r0; r < r1; ++r) {
        const T* p = xg + r * stride;
        for (int64_t c = 0; c < whole; c += W) {
          const P d = P::load(p + c) - k;
          s1 = s1 + d;
          s2 = fmadd(d, d, s2);
        }
        if (tail > 0) {
          const P d = (P::load(p + whole, tail) - k).first(tail);
          s1 = s1 + d;
          s2 = fmadd(d, d, s2);
        }
      }
      d1 += sum_lanes(s1);
      d2 += sum_lanes(s2);
    }
    q[g] = static_cast<double>(pivot);
    t1[g] = d1;
    t2[g] = d2;
  }
}

// Rows [lo, hi) of one channels-last sample (rows of `channels` values, `stride` apart):
// y[r, c] = act(x[r, c] * a[c] + b[c]), the mean folded into b = bias - mean * a (sample_constants<true>): one load
// of x and two of constants per vector. a, b padded with zeros to a multiple of kWidth.
template <typename T, typename Ep>
void normalize_rows(const T* x, T* y, int64_t channels, int64_t stride, int64_t lo, int64_t hi,
                    const compute_t<T>* a, const compute_t<T>* b, const Ep& ep) {
  using P = Pack<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  // The vector of channels [c, c + W) of row xr, normalised; `count` < W elements for the row's tail.
  auto normalized = [&](const T* xr, int64_t c, int64_t count) {
    const P va{V::loadu(a + c), V::loadu(a + c + P::kVec)};
    const P vb{V::loadu(b + c), V::loadu(b + c + P::kVec)};
    const P v = count == W ? P::load(xr + c) : P::load(xr + c, count);
    return activate(ep, fmadd(v, va, vb));
  };
  for (int64_t r = lo; r < hi; ++r) {
    const T* xr = x + r * stride;
    T* yr = y + r * stride;
    int64_t c = 0;
    for (; c + W <= channels; c += W) normalized(xr, c, W).store(yr + c);
    if (c < channels) normalized(xr, c, channels - c).store(yr + c, channels - c);
  }
}

// normalize_rows for rows [0, rows) of a sample of at most kColumnsMaxRows rows: down the rows a pack of channels at
// a time, so that each pack of constants is loaded once per sample instead of once per row. 2-core AVX-512 machine,
// float32 channels-last forward, rows -> columns (us): (64,4096,2,2) 118 -> 99, (32,4096,2,4) 98 -> 91,
// (32,4096,1,3) 56 -> 53; at 9 rows even ((16,2560,3,3) 38.2 / 39.4), at 16 and more rows of 16 KB up to 1.7x
// slower (the rows of one walk fall into the same L1 sets).
constexpr int64_t kColumnsMaxRows = 8;
template <typename T, typename Ep>
void normalize_columns(const T* x, T* y, int64_t channels, int64_t stride, int64_t rows, const compute_t<T>* a,
                       const compute_t<T>* b, const Ep& ep) {
  using P = Pack<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  for (int64_t c = 0; c < channels; c += W) {
    const int64_t cnt = std::min(W, channels - c);
    const P va{V::loadu(a + c), V::loadu(a + c + P::kVec)};
    const P vb{V::loadu(b + c), V::loadu(b + c + P::kVec)};
    const T* xc = x + c;
    T* yc = y + c;
    if (cnt == W) {
      for (int64_t r = 0; r < rows; ++r) {
        activate(ep, fmadd(P::load(xc + r * stride), va, vb)).store(yc + r * stride);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        activate(ep, fmadd(P::load(xc + r * stride, cnt), va, vb)).store(yc + r * stride, cnt);
      }
    }
  }
}

// Whole rows of a channels-last sample as one flat run when `channels` is not a multiple of the pack: the period
// of the per-channel constants in packs, lcm(channels, kWidth) / kWidth, or 0 where that exceeds kMaxFlatPeriod
// (normalize_rows then). Row by row, a row of 40 float32 channels is a pack and a quarter-filled masked one, of 16
// bfloat16 channels a half-filled one; as a flat run every pack is full.
constexpr int64_t kMaxFlatPeriod = 8;
template <typename T>
inline int64_t flat_period(int64_t channels) {
  constexpr int64_t W = Pack<T>::kWidth;
  if (channels % W == 0) return 0;
  const int64_t packs = channels / std::gcd(channels, W);  // lcm(channels, W) / W
  return packs <= kMaxFlatPeriod ? packs : 0;
}

// normalize_rows over a whole channels-last sample of len elements (its rows contiguous), as one flat run of packs:
// pack j takes pack j % period of the constants a, b tiled to period * kWidth elements (tiled_constants).
template <typename T, typename Ep>
void normalize_flat(const T* x, T* y, int64_t len, int64_t period, const compute_t<T>* a, const compute_t<T>* b,
                    const Ep& ep) {
  using P = Pack<T>;
  using V = typename P::V;
  constexpr int64_t W = P::kWidth;
  auto normalized = [&](int64_t i, int64_t k, int64_t count) {
    const P va{V::loadu(a + k), V::loadu(a + k + P::kVec)};
    const P vb{V::loadu(b + k), V::loadu(b + k + P::kVec)};
    const P v = count == W ? P::load(x + i) : P::load(x + i, count);
    return activate(ep, fmadd(v, va, vb));
  };
  const int64_t span = period * W;
  int64_t i = 0, k = 0;
  for (; i + W <= len; i += W) {
    normalized(i, k, W).store(y + i);
    k += W;
    if (k == span) k = 0;
  }
  if (i < len) normalized(i, k, len - i).store(y + i, len - i);
}

// The first `channels` values of a and b (k's second and third arrays, cpad apart) repeated over period * kWidth
// elements each, into tiled (2 * period * kWidth: a, b), for normalize_flat.
template <typename T>
void tiled_constants(const compute_t<T>* k, int64_t channels, int64_t cpad, int64_t period, compute_t<T>* tiled) {
  const int64_t span = period * Pack<T>::kWidth;
  for (int which = 0; which < 2; ++which) {
    for (int64_t e = 0; e < span; e += channels)
      std::copy_n(k + (which + 1) * cpad, channels, tiled + which * span + e);
  }
}

// Writes one byte in every 4 KB page of y[0, len), so that a freshly mapped output takes its first-touch page faults
// here, in the statistics pass, rather than in the normalising pass. The output of a large call is a fresh mapping
// (glibc serves allocations of >= 32 MB from mmap): at (1, 128, 256, 256) float64 its 16384 faults cost more than
// the normalisation itself (a plain copy into a new tensor 15 ms, into an existing one 3.9 ms, 2 threads). Measured
// on a 2-core AVX-512 machine, ours alternating call by call with and without the touch: float64 channels-last
// (1, 128, 256, 256) 1.05-1.06x faster, (4, 64, 128, 128) 1.01-1.04x, other rows within noise (0.98-1.02x).
// Why the same faults cost less there than in the normalising pass is not established. (Measured before the
// huge-page advice; with it, an output of that size takes 2 MB faults, 512 times fewer.)
template <typename T>
inline void touch_pages(T* y, int64_t len) {
  char* bytes = reinterpret_cast<char*>(y);
  const int64_t n = len * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < n; off += 4096) *reinterpret_cast<volatile char*>(bytes + off) = 0;
}

// One part's share of group sums about the pivot q: the part's channels [first, last) (their pivots p and sums
// s1, s2 about p over `rows` rows, see channel_sums) as sums about q: sum (x - q) = s1 + rows d and
// sum (x - q)^2 = s2 + 2 d s1 + rows d^2 with d = p - q. Whole vectors of channels go into the vector sums v1, v2
// (in order, one dependent add per channel, they were a third of the forward of samples of 40 channels and 8 rows),
// the rest into the scalar ones t1, t2.
inline void add_part_sums(const double* pivot, const double* s1, const double* s2, double rows, int64_t first,
                          int64_t last, double q, Vectorized<double>& v1, Vectorized<double>& v2, double& t1,
                          double& t2) {
  using V = Vectorized<double>;
  constexpr int64_t L = V::size();
  const V vq(q), vrows(rows), two(2.0);
  int64_t c = first;
  for (; c + L <= last; c += L) {
    const V d = V::loadu(pivot + c) - vq, a = V::loadu(s1 + c);
    v1 = v1 + at::vec::fmadd(vrows, d, a);
    v2 = v2 + at::vec::fmadd(d, at::vec::fmadd(vrows, d, two * a), V::loadu(s2 + c));
  }
  for (; c < last; ++c) {
    const double d = pivot[c] - q;
    t1 += s1[c] + rows * d;
    t2 += s2[c] + d * (2 * s1[c] + rows * d);
  }
}

// The scalar sums t1, t2 plus the lanes of the vector sums v1, v2 (add_part_sums).
inline void end_part_sums(const Vectorized<double>& v1, const Vectorized<double>& v2, double& t1, double& t2) {
  constexpr int64_t L = Vectorized<double>::size();
  __at_align__ double lanes1[L];
  __at_align__ double lanes2[L];
  v1.store(lanes1);
  v2.store(lanes2);
  for (int64_t i = 0; i < L; ++i) {
    t1 += lanes1[i];
    t2 += lanes2[i];
  }
}

// Group g's sums about one pivot q, its first channel's, from the channel sums of `rows` rows (pivot, s1, s2 of
// channel_sums), by add_part_sums (the parted path calls add_part_sums itself, with a pivot shared by its parts).
// Every pivot is a value of the group, so d = p - q is of the order of the group's spread and nothing cancels.
inline void group_sums(const double* pivot, const double* s1, const double* s2, double rows, int64_t g, int64_t cpg,
                       double* q_out, double* t1_out, double* t2_out) {
  using V = Vectorized<double>;
  const double q = pivot[g * cpg];
  V v1(0.0), v2(0.0);
  double t1 = 0, t2 = 0;
  add_part_sums(pivot, s1, s2, rows, g * cpg, (g + 1) * cpg, q, v1, v2, t1, t2);
  end_part_sums(v1, v2, t1, t2);
  *q_out = q;
  *t1_out = t1;
  *t2_out = t2;
}

// The mean and rstd of `groups` groups of `count` elements each from their sums about pivots (q, t1, t2: padded
// with zeros to a whole number of kStatBatch), kStatBatch at a time by batch_statistics, into mean_out / rstd_out
// in the compute type.
template <typename C>
void store_statistics(const double* q, const double* t1, const double* t2, int64_t groups, double count, double eps,
                      C* mean_out, C* rstd_out) {
  for (int64_t first = 0; first < groups; first += kStatBatch) {
    __at_align__ double mean[kStatBatch], rstd[kStatBatch];
    batch_statistics(q + first, t1 + first, t2 + first, count, eps, mean, rstd);
    for (int64_t j = 0; j < std::min(kStatBatch, groups - first); ++j) {
      mean_out[first + j] = static_cast<C>(mean[j]);
      rstd_out[first + j] = static_cast<C>(rstd[j]);
    }
  }
}

// One sample's per-channel constants from its G groups' statistics (mean[g], rstd[g]): into k (3 * cpad, zero
// past `channels` and kept so) m = mean, a = rstd * w, b = bias, or with FOLD b = bias - mean * a (m unused by
// normalize_rows<FOLD>). Each group's mean and rstd are first spread over its cpg channels, then a and b are computed
// a vector at a time over the whole sample (w and b read with masked loads at the tail). (Group by group, a group
// narrower than a vector went element by element in double: with 4 channels a group, those calls were a third of
// the channels-last backward of (32,128,3,2) float32, and with 40 the 8-channel tails a tenth of the forward of
// (64,40,2,4) G1; perf.) FOLD's b - mean * a takes the mean rounded to the compute type: an error of ~u |mean| |a|,
// the order of the fold's own (forward_channels_last); nothing changes for float64.
template <bool FOLD, typename C>
void sample_constants(const C* mean, const C* rstd, int64_t G, int64_t cpg, const C* w, const C* b, C* k,
                      int64_t cpad) {
  using VC = Vectorized<C>;
  constexpr int64_t L = VC::size();
  const int64_t channels = G * cpg;
  C* const m = k;
  C* const a = k + cpad;
  C* const bias = k + 2 * cpad;
  for (int64_t g = 0; g < G; ++g) {  // vector stores (element stores: one a cycle)
    const VC vm(mean[g]), vr(rstd[g]);
    for (int64_t c = g * cpg; c < (g + 1) * cpg; c += L) {
      const int64_t cnt = std::min(L, (g + 1) * cpg - c);
      store_first(vm, m + c, cnt, channels - c);
      store_first(vr, a + c, cnt, channels - c);
    }
  }
  for (int64_t c = 0; c < channels; c += L) {
    const int64_t cnt = std::min(L, channels - c);  // m and a are 0 past `channels`, w and b read as 0 there
    const VC vm = VC::loadu(m + c);
    VC va = VC::loadu(a + c);
    if (w) va = va * (cnt == L ? VC::loadu(w + c) : VC::loadu(w + c, cnt));
    const VC vb = b ? (cnt == L ? VC::loadu(b + c) : VC::loadu(b + c, cnt)) : VC(C(0));
    va.store(a + c);
    (FOLD ? vb - vm * va : vb).store(bias + c);
  }
}

// The group statistics and per-channel constants of `samples` consecutive channels-last samples (or chunks of
// groups) of `rows` rows, from their channel sums (sample i's at pivot/s1/s2 + i * channels, see group_sums): mean
// and rstd of sample i's G groups into mean_out/rstd_out[i * G + g], its constants into k + i * 3 * cpad (see
// sample_constants). The groups' statistics go kStatBatch at a time through batch_statistics, as double vectors:
// one group at a time, each ended in a dependent chain of two divisions and a square root that the next sample's
// work queued behind (a quarter of the forward of (64,40,2,4) G1 float32, one group a sample).
template <bool FOLD, typename C>
void samples_constants(const double* pivot, const double* s1, const double* s2, int64_t rows, int64_t channels,
                       int64_t G, int64_t samples, double eps, const C* w, const C* b, C* mean_out, C* rstd_out, C* k,
                       int64_t cpad) {
  const int64_t cpg = channels / G, stride = channels;
  const double count = static_cast<double>(cpg * rows);
  __at_align__ double q[kStatBatch] = {}, t1[kStatBatch] = {}, t2[kStatBatch] = {};
  __at_align__ double mean[kStatBatch], rstd[kStatBatch];
  int64_t i = 0, g = 0;  // the next group to sum: sample i, group g
  for (int64_t first = 0; first < samples * G; first += kStatBatch) {
    const int64_t batch = std::min(kStatBatch, samples * G - first);
    const int64_t i0 = i, g0 = g;
    for (int64_t j = 0; j < batch; ++j) {
      group_sums(pivot + i * stride, s1 + i * stride, s2 + i * stride, static_cast<double>(rows), g, cpg, &q[j],
                 &t1[j], &t2[j]);
      if (++g == G) g = 0, ++i;
    }
    batch_statistics(q, t1, t2, count, eps, mean, rstd);
    for (int64_t j = 0; j < batch; ++j) {
      mean_out[i0 * G + g0 + j] = static_cast<C>(mean[j]);
      rstd_out[i0 * G + g0 + j] = static_cast<C>(rstd[j]);
    }
  }
  for (i = 0; i < samples; ++i)
    sample_constants<FOLD>(mean_out + i * G, rstd_out + i * G, G, cpg, w, b, k + i * 3 * cpad, cpad);
}

// The statistics and constants of one sample, or of a chunk of its groups, by group_sums_rows (see use_group_rows):
// mean and rstd of its G groups into mean_out/rstd_out[0, G), its constants into k (sample_constants; cpad each).
// scratch: 3 * round_up(G, kStatBatch) doubles.
template <bool FOLD, typename T>
void group_rows_constants(const T* x, int64_t stride, int64_t rows, int64_t G, int64_t cpg, double eps,
                          const compute_t<T>* w, const compute_t<T>* b, compute_t<T>* mean_out,
                          compute_t<T>* rstd_out, compute_t<T>* k, int64_t cpad, double* scratch) {
  const int64_t gpad = round_up(G, kStatBatch);
  double* q = scratch;
  double* t1 = q + gpad;
  double* t2 = t1 + gpad;
  group_sums_rows(x, stride, rows, G, cpg, q, t1, t2);
  store_statistics(q, t1, t2, G, static_cast<double>(cpg * rows), eps, mean_out, rstd_out);
  sample_constants<FOLD>(mean_out, rstd_out, G, cpg, w, b, k, cpad);
}

// x, y: (N, HW, channels) contiguous (NHWC / NDHWC); w, b: (channels,) or null; mean, rstd: (N*G,).
template <typename T, typename Ep>
void forward_channels_last(const T* x, T* y, const compute_t<T>* w, const compute_t<T>* b, compute_t<T>* mean_out,
                           compute_t<T>* rstd_out, int64_t N, int64_t G, int64_t channels, int64_t HW, double eps,
                           const Ep& ep) {
  using C = compute_t<T>;
  const int64_t cpad = round_up(channels, Pack<T>::kWidth), sample = HW * channels;
  // Only an output that is a new mapping on every call (>= 32 MB, see advise_huge_pages) has faults to move; below
  // that the output comes from the heap already mapped, and the touches only cost (2.7-6% of the forward, 2-core
  // AVX-512 machine, A/B call by call: (2,320,64,64) float64, (8,32,32,32) float64, (1,128,256,256) bfloat16).
  const bool fresh_output = N * sample * static_cast<int64_t>(sizeof(T)) >= kHugePageAdviceMinBytes;
  // Chunks of groups (never with touches: a chunk's rows hold other chunks' output bytes).
  const int64_t work = element_work(ep);  // per element, with the activation
  const int64_t chunks =
      fresh_output ? 1 : group_chunks(N, sample, G, channels, Pack<T>::kWidth, line_elements<T>());
  const int64_t parts = chunks > 1 ? 1 : std::min(HW, split_parts(N, sample, kMinPartElements));
  const int64_t items = N * parts;
  const int64_t grain = grain_items(items, sample / parts * work + channels * kChannelOverheadElements);
  // Rows [bounds[j], bounds[j + 1]) of every sample are its part j (computed once: a 64-bit integer division per
  // channel and part in the statistics was most of the forward of samples of few rows, perf at (64,40,2,4)).
  std::vector<int64_t> bounds(static_cast<size_t>(parts + 1));
  for (int64_t j = 0; j <= parts; ++j) bounds[j] = part_begin(HW, parts, j, 1);
  // Every dtype folds the mean into the shift (the <true> of the constants below; the normalisation passes take a and
  // b only). float32 and float64 samples are normalised as x * a + (b - mean * a), one vector of constants fewer per
  // vector of x (the pass is bound by its loads: 1.01-1.07x faster over ten float32/float64 rows, 2-core AVX-512
  // machine, A/B in one process, rotating order). No accuracy is lost: the fold's error, ~u (|mean| |a| + |b|), is the
  // one (x - mean) * a + b already has with the mean held in the compute type (u |mean| / 2 from rounding it): nothing
  // in float64 even at |mean| = 1e4 std; in float32 at 1e4 std both forms are off by up to ~9e-4 of a unit output
  // against float64, the conditioning of the formula (ours and PyTorch's kernel differ by ~2e-3 there). Half-precision
  // data (computed in float32) fold too: the pass converts each pack of x to two float32 vectors and back, and the
  // fold takes a load of m and a subtraction off each of them. Measured on a 2-core AMD EPYC VM at the AVX2 level, 2
  // threads, ours / PyTorch in alternating loops, two rounds, shifted -> folded: (2,320,64,64) G32 channels-last
  // float16 1.00-1.10 -> 0.98-0.99, bfloat16 1.04-1.07 -> 0.99-1.07 (one noisy round), (4,64,128,128) float16
  // 0.93-1.02 -> 0.77-0.84, bfloat16 0.75-0.92 -> 0.85-0.88, (1,128,256,256) bfloat16 0.97-1.03 -> 0.88-0.89,
  // (2,512,16,16) bfloat16 0.81-0.92 -> 0.68-0.74, with SiLU (2,320,64,64) 0.89-0.95 -> 0.89-0.91. The fold's float32
  // error (~6e-8 (|mean| |a| + |b|)) stays under the half-precision output's rounding up to |mean| ~ 1e3 std, and is
  // the shifted form's own beyond it.
  if (chunks > 1) {
    // Each sample's groups in `chunks` chunks of equal width cw (group_chunks): a chunk's sums, its groups'
    // statistics and constants, and its normalisation in one task, rows read and written cw channels at a time.
    const int64_t gw = G / chunks, cpg = channels / G, cw = gw * cpg;
    // (Grain 1: group_chunks has found the work worth the threads, and chunks that even out their shares.)
    const bool group_rows = use_group_rows<T>(gw, cpg, HW);
    // A chunk's constants are cw wide (a whole number of packs: group_chunks keeps chunks to whole cache lines).
    // Sized for the whole sample, zero-filled, they were a memset as large as the chunk's input at (4,1280,4,4)
    // float32 at 16 threads (20 KB a task).
    const int64_t kpad = round_up(cw, Pack<T>::kWidth);
    at::parallel_for(0, N * chunks, 1, [&](int64_t first, int64_t last) {
      std::vector<double> sums(static_cast<size_t>(group_rows ? 3 * round_up(gw, kStatBatch) : 3 * cw));
      std::vector<C> k(static_cast<size_t>(4 * kpad), C(0));  // m, a, b, then pivots
      for (int64_t it = first; it < last; ++it) {
        const int64_t n = it / chunks, g0 = (it % chunks) * gw, c0 = g0 * cpg;
        const T* xs = x + n * sample + c0;
        if (group_rows) {
          group_rows_constants<true>(xs, channels, HW, gw, cpg, eps, w ? w + c0 : nullptr, b ? b + c0 : nullptr,
                                     mean_out + n * G + g0, rstd_out + n * G + g0, k.data(), kpad, sums.data());
        } else {
          channel_sums(xs, cw, channels, 0, HW, k.data() + 3 * kpad, sums.data(), sums.data() + cw,
                       sums.data() + 2 * cw);
          samples_constants<true>(sums.data(), sums.data() + cw, sums.data() + 2 * cw, HW, cw, gw, 1, eps,
                                  w ? w + c0 : nullptr, b ? b + c0 : nullptr, mean_out + n * G + g0,
                                  rstd_out + n * G + g0, k.data(), kpad);
        }
        if (HW <= kColumnsMaxRows) {
          normalize_columns(xs, y + n * sample + c0, cw, channels, HW, k.data() + kpad, k.data() + 2 * kpad, ep);
        } else {
          normalize_rows(xs, y + n * sample + c0, cw, channels, 0, HW, k.data() + kpad, k.data() + 2 * kpad, ep);
        }
      }
    });
    return;
  }
  if (parts == 1) {
    // Whole samples (as many as threads, or more): each task takes batches of samples' sums, their constants and
    // their normalisation in a row, one parallel region and no serial step between two (at (4,1280,3,3,3) float32,
    // 2 threads, the one thread's finalisation of every sample between two regions, and each region's join, were
    // half of the forward; the samples are also still in cache when normalised). A batch: up to kStatBatch groups
    // (their statistics computed together) and kBatchBytes of samples.
    constexpr int64_t kBatchBytes = 65536;
    const int64_t batch = std::clamp<int64_t>(
        std::min(kStatBatch / G, kBatchBytes / std::max<int64_t>(1, sample * static_cast<int64_t>(sizeof(T)))), 1,
        kStatBatch);
    // Groups of samples of few rows summed straight from the rows (group_sums_rows), where a group is a pack or
    // wider; narrower ones keep the per-channel sums, whose packs span groups.
    const int64_t cpg = channels / G;
    const bool group_rows = use_group_rows<T>(G, cpg, HW);
    at::parallel_for(0, N, grain, [&](int64_t first, int64_t last) {
      // Scratch not zero-filled (a value-initialised vector's memset was 5.6% of the forward of (64,4096,2,2)
      // float32, 160 KB a task): channel_sums writes the pivots and sums it leaves, sample_constants every
      // constant below `channels`; the pad lanes past it are zeroed here, once.
      const std::unique_ptr<double[]> sums(new double[static_cast<size_t>(3 * batch * channels)]);  // pivots, s1, s2
      const std::unique_ptr<C[]> k(new C[static_cast<size_t>((3 * batch + 1) * cpad)]);  // m, a, b of each, pivots
      for (int64_t j = 0; j <= 3 * batch; ++j) std::fill(k.get() + j * cpad + channels, k.get() + (j + 1) * cpad, C(0));
      std::vector<double> group_scratch(group_rows ? static_cast<size_t>(3 * round_up(G, kStatBatch)) : 0);
      // Rows as one flat run where the constants' period is short (flat_period) and the sample spans it at least
      // 4 times (tiling the constants costs about as much as normalising one period row by row: at (64,40,2,4)
      // float32, a sample of two periods, the flat run was 1.15x the rows').
      int64_t period = HW > 1 ? flat_period<T>(channels) : 0;
      if (sample < 4 * period * Pack<T>::kWidth) period = 0;
      const int64_t span = period * Pack<T>::kWidth;
      std::vector<C> tiled(static_cast<size_t>(2 * span));
      double* pivots = sums.get();
      double* s1 = pivots + batch * channels;
      double* s2 = s1 + batch * channels;
      for (int64_t n0 = first; n0 < last; n0 += batch) {
        const int64_t count = std::min(batch, last - n0);
        if (G == 1) {
          // One group: the sample is one contiguous run, whose statistics are those of an NCHW slice (shifted sums
          // about its first value; no per-channel sums, pivots or group sums: at (64,40,2,4) G1 float32 those were
          // two thirds of the forward, 1.3-1.5x PyTorch's, 2 threads).
          __at_align__ double q[kStatBatch] = {}, t1[kStatBatch] = {}, t2[kStatBatch] = {};
          __at_align__ double mean[kStatBatch], rstd[kStatBatch];
          for (int64_t i = 0; i < count; ++i) {
            const T* xs = x + (n0 + i) * sample;
            if (fresh_output) touch_pages(y + (n0 + i) * sample, sample);
            if (sample <= kBlock) {
              const C pv = static_cast<C>(xs[0]);
              q[i] = static_cast<double>(pv);
              block_sums(xs, sample, pv, t1[i], t2[i]);
            } else {  // blocks merged exactly (run_moments); as sums about the mean: 0 and M2
              Moments m;
              run_moments(xs, sample, m);
              q[i] = m.mean;
              t2[i] = m.m2;
            }
          }
          batch_statistics(q, t1, t2, static_cast<double>(sample), eps, mean, rstd);
          for (int64_t i = 0; i < count; ++i) {
            mean_out[n0 + i] = static_cast<C>(mean[i]);
            rstd_out[n0 + i] = static_cast<C>(rstd[i]);
            sample_constants<true>(mean_out + n0 + i, rstd_out + n0 + i, 1, channels, w, b, k.get() + i * 3 * cpad,
                                   cpad);
          }
        } else if (group_rows) {
          for (int64_t i = 0; i < count; ++i) {
            const int64_t n = n0 + i;
            if (fresh_output) touch_pages(y + n * sample, sample);
            group_rows_constants<true>(x + n * sample, channels, HW, G, cpg, eps, w, b, mean_out + n * G,
                                       rstd_out + n * G, k.get() + i * 3 * cpad, cpad, group_scratch.data());
          }
        } else {
          for (int64_t i = 0; i < count; ++i) {
            const int64_t n = n0 + i;
            if (fresh_output) touch_pages(y + n * sample, sample);
            channel_sums(x + n * sample, channels, channels, 0, HW, k.get() + 3 * batch * cpad,
                         pivots + i * channels, s1 + i * channels, s2 + i * channels);
          }
          samples_constants<true>(pivots, s1, s2, HW, channels, G, count, eps, w, b, mean_out + n0 * G,
                                  rstd_out + n0 * G, k.get(), cpad);
        }
        for (int64_t i = 0; i < count; ++i) {
          const C* ki = k.get() + i * 3 * cpad;
          if (period > 0) {
            tiled_constants<T>(ki, channels, cpad, period, tiled.data());
            normalize_flat(x + (n0 + i) * sample, y + (n0 + i) * sample, sample, period, tiled.data(),
                           tiled.data() + span, ep);
          } else if (HW <= kColumnsMaxRows) {
            normalize_columns(x + (n0 + i) * sample, y + (n0 + i) * sample, channels, channels, HW, ki + cpad,
                              ki + 2 * cpad, ep);
          } else {
            normalize_rows(x + (n0 + i) * sample, y + (n0 + i) * sample, channels, channels, 0, HW, ki + cpad,
                           ki + 2 * cpad, ep);
          }
        }
      }
    });
    return;
  }
  // Samples cut into parts (fewer samples than threads): each part's channel sums and its share of the group sums,
  // each sample's statistics and constants, then the parts' normalisation. Every part sums a group about the same
  // pivot, the group's first value in the sample (row 0, channel g * cpg: the pivot group_sums takes, part 0's of
  // that channel), so that the serial step between the two regions adds parts x G sums. (It added parts x channels
  // x 3 per-channel sums that every part had written: 480 KB read by one thread at (1,1280,17,23) float32 with 16
  // parts, 1.6x PyTorch's forward at 16 threads on the Xeon host of an H200.)
  const int64_t cpg = channels / G;
  std::vector<double> group_pivot(static_cast<size_t>(N * G));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      group_pivot[n * G + g] = static_cast<double>(static_cast<C>(x[n * sample + g * cpg]));
    }
  }
  std::vector<double> part_sums(static_cast<size_t>(2 * items * G));  // item it's t1 at [2 it G], t2 G further
  at::parallel_for(0, items, grain, [&](int64_t first, int64_t last) {
    std::vector<C> pivot(static_cast<size_t>(cpad), C(0));
    std::vector<double> sums(static_cast<size_t>(3 * channels));  // pivots, s1, s2 of the part's channels
    const double* const s1 = sums.data() + channels;
    const double* const s2 = s1 + channels;
    for (int64_t it = first; it < last; ++it) {
      const int64_t n = it / parts, lo = bounds[it % parts], hi = bounds[it % parts + 1];
      if (fresh_output) touch_pages(y + n * sample + lo * channels, (hi - lo) * channels);
      double* const t1 = &part_sums[2 * it * G];
      double* const t2 = t1 + G;
      if (G == 1) {
        // One group: the part's rows are one contiguous run, summed flat about the sample's pivot in blocks (as
        // the whole-sample path does). Row by row, rows of a few channels each paid a counted load: (1,3,522,310)
        // bfloat16 forward took 3.4 ms at 2 threads against 0.26 ms at one (2-core AMD EPYC).
        const T* const xs = x + n * sample + lo * channels;
        const int64_t len = (hi - lo) * channels;
        const C pv = static_cast<C>(group_pivot[n]);
        double a1 = 0, a2 = 0;
        for (int64_t i = 0; i < len; i += kBlock) {
          double b1, b2;
          block_sums(xs + i, std::min(kBlock, len - i), pv, b1, b2);
          a1 += b1;
          a2 += b2;
        }
        t1[0] = a1;
        t2[0] = a2;
        continue;
      }
      channel_sums(x + n * sample, channels, channels, lo, hi, pivot.data(), sums.data(), sums.data() + channels,
                   sums.data() + 2 * channels);
      for (int64_t g = 0; g < G; ++g) {
        Vectorized<double> v1(0.0), v2(0.0);
        t1[g] = 0;
        t2[g] = 0;
        add_part_sums(sums.data(), s1, s2, static_cast<double>(hi - lo), g * cpg, (g + 1) * cpg,
                      group_pivot[n * G + g], v1, v2, t1[g], t2[g]);
        end_part_sums(v1, v2, t1[g], t2[g]);
      }
    }
  });
  // A sample's groups: its parts' sums added in part order, the statistics kStatBatch groups at a time (the pad
  // lanes past N * G sum to 0 over a positive count: finite, not stored).
  const int64_t padded = round_up(N * G, kStatBatch);
  std::vector<double> t1(static_cast<size_t>(padded), 0.0), t2(t1.size(), 0.0), q(t1.size(), 0.0);
  std::copy(group_pivot.begin(), group_pivot.end(), q.begin());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < parts; ++j) {
      const double* const p1 = &part_sums[2 * (n * parts + j) * G];
      for (int64_t g = 0; g < G; ++g) {
        t1[n * G + g] += p1[g];
        t2[n * G + g] += p1[G + g];
      }
    }
  }
  store_statistics(q.data(), t1.data(), t2.data(), N * G, static_cast<double>(cpg * HW), eps, mean_out, rstd_out);
  // Per sample: m, a, b (cpad each), zero-padded.
  std::vector<C> coef(static_cast<size_t>(N * 3 * cpad), C(0));
  for (int64_t n = 0; n < N; ++n) {
    sample_constants<true>(mean_out + n * G, rstd_out + n * G, G, cpg, w, b, &coef[n * 3 * cpad], cpad);
  }
  // Parts of at least 4 periods of the constants normalised as one flat run (as whole samples: flat_period).
  const int64_t period = HW > 1 ? flat_period<T>(channels) : 0;
  const int64_t span = period * Pack<T>::kWidth;
  at::parallel_for(0, items, grain, [&](int64_t first, int64_t last) {
    std::vector<C> tiled(static_cast<size_t>(2 * span));
    int64_t tiled_sample = -1;
    for (int64_t it = first; it < last; ++it) {
      const int64_t n = it / parts, lo = bounds[it % parts], hi = bounds[it % parts + 1];
      const C* k = &coef[n * 3 * cpad];
      if (period > 0 && (hi - lo) * channels >= 4 * span) {
        if (tiled_sample != n) {
          tiled_constants<T>(k, channels, cpad, period, tiled.data());
          tiled_sample = n;
        }
        normalize_flat(x + n * sample + lo * channels, y + n * sample + lo * channels, (hi - lo) * channels, period,
                       tiled.data(), tiled.data() + span, ep);
      } else {
        normalize_rows(x + n * sample, y + n * sample, channels, channels, lo, hi, k + cpad, k + 2 * cpad, ep);
      }
    }
  });
}

}  // namespace gn_cpu
#endif  // GN_INLINE_CPU_FORWARD_KERNELS
"""
