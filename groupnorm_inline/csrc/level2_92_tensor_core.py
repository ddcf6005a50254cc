"""CUDA source of the level 2 #92 tensor-core convolution ("tf32x3"): the 3 x 3 convolution as an implicit GEMM
on `mma.sync.m16n8k8` TF32 tensor cores with every float32 operand split into a TF32 high and low part
(three products hi*hi + hi*lo + lo*hi, float32 accumulation: about 22 significant bits, against 11 for plain
TF32). The stages around it (statistics per tile, per-group finalisation, epilogue and logsumexp) are those of
`level2_92_cpu`; this file holds only the device code, and `level2_92_cuda` launches it.

GEMM view of one tile (2 output rows x 128 columns of one sample, the tiling of the direct kernel, so the
per-tile statistics have the same layout):
  M = the tile's 256 pixels, N = 64 output channels (Cout <= 64, padded with zero weights),
  K = input channels x 9 taps, taken one k8 step per (chunk of 8 input channels, tap): within a step, k is
  the input channel, so the A fragment of pixel m at tap (ky, kx) is x[ci][row + ky][col + m + kx].
Warp w of the 8 computes tile row w / 4, columns 32 (w % 4) .. +31 (two m16 tiles) for all 8 n8 tiles:
64 float32 accumulators per thread.

Shared memory (floats), staged by the CTA:
  wfrag  (cin_pad / 8, 9 taps, 8 n-tiles, 32 lanes, 4): each lane's B fragment {b0 hi, b1 hi, b0 lo, b1 lo}
         of one (chunk, tap, n-tile) as one 16-byte load, packed once per call by `pack_tf32x3_kernel`
         (a warp reads 512 contiguous bytes: no bank conflicts); loaded once per CTA (persistent grid).
  bias, scale, shift  (64 each), per-warp moments (8 x 64 x 2 + 8), then
  xs     (cin_pad, 4 rows, 130 columns): the tile's input. The channel stride 520 is 8 mod 32, so the
         A loads of a warp (4 channels x 8 consecutive pixels) hit 32 distinct banks.
The A operand is split on the fly: hi = cvt.rna.tf32(x), lo = cvt.rna.tf32(x - hi) (x - hi is exact).

Statistics per warp use a shift: K_c = the warp's first pixel's value (always a valid pixel when the warp
has one), sums of d = v - K_c and d^2 over its valid pixels, xor-shuffle sums over the 8 lane groups, then
(mean, M2) = (K + s1 / n, s2 - s1^2 / n) per warp and Chan merges over the 8 warps: no cancellation when
|mean| >> std. Needs sm_80 or newer; the launcher falls back to the direct kernel elsewhere.
"""

P92_TF32X3_KERNELS = r"""
namespace p92 {
constexpr int kTcWarps = 8;
constexpr int kTcThreads = 32 * kTcWarps;                     // 256
constexpr int kTcChannels = 64;                               // output channels per CTA (zero-padded)
constexpr int kTcNTiles = kTcChannels / 8;                    // n8 tiles
constexpr int kTcMTiles = 2;                                  // m16 tiles (16 pixels of one row) per warp
constexpr int kTcWarpsPerRow = kTileCols / (16 * kTcMTiles);  // 4
constexpr int kTcInPitch = kInCols;                           // 130 staged input columns
constexpr int kTcChannelStride = kInRows * kTcInPitch;        // 520 floats per staged input channel
constexpr int kTcMaxCin = 16;                                 // shared memory: weights of 2 chunks at most
constexpr int kTcFragFloats = kTaps * kTcNTiles * 32 * 4;     // B fragments of one 8-channel chunk
static_assert(kTcWarpsPerRow * kTileRows == kTcWarps, "the warps cover the tile");
static_assert(kTcChannelStride % 32 == 8, "A-fragment loads must fall in distinct banks");
static_assert(2 * kTcMTiles == 4, "each of the 4 lanes of a quad stores one of its 4 pixels");

// Floats of dynamic shared memory of the tf32x3 kernel.
inline int64_t tf32x3_smem_floats(const Geometry& g) {
  return static_cast<int64_t>(g.cin_pad / kCiChunk) * kTcFragFloats + 3 * kTcChannels +
         2 * kTcWarps * kTcChannels + kTcWarps + static_cast<int64_t>(g.cin_pad) * kTcChannelStride;
}

inline bool tf32x3_supported(const Geometry& g, int cc_major) {
  return cc_major >= 8 && g.Cout <= kTcChannels && g.cin_pad <= kTcMaxCin;
}

// x rounded to TF32 (10 mantissa bits, nearest, ties away), as the bits of a float32 with 13 zero low bits.
__device__ __forceinline__ uint32_t tf32_bits(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#else
  return __float_as_uint(x);  // never launched below sm_80 (tf32x3_supported)
#endif
}

// The A operand's split, in integer operations (the cvt instruction checks for inf and NaN first, which
// costs four instructions per value in the inner loop): hi = x rounded to TF32, nearest with ties away
// from zero (adding half an ulp to the magnitude bits carries into the exponent as it should); lo = x - hi,
// exact in float32, then truncated to TF32 (|lo| <= 2^-11 |x|, so the truncation costs < 2^-21 |x|).
// Finite inputs only (an infinite or NaN input gives NaN outputs either way).
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi)) & 0xffffe000u;
}

// d += A (16 x 8, row) * B (8 x 8, col) on the tensor cores, float32 accumulation.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  d[0] += __uint_as_float(a[0]) * __uint_as_float(b0) + __uint_as_float(a[3]) * __uint_as_float(b1);
  __trap();  // never launched below sm_80 (tf32x3_supported)
#endif
}

// w (Cout, Cin, 3, 3), b (Cout,) -> wfrag (cin_pad / 8, 9, 8, 32, 4) then the bias padded to 64.
// Lane l of n-tile j holds output channel n = 8 j + l / 4 and input channels k = l % 4 (b0), l % 4 + 4 (b1).
__global__ void pack_tf32x3_kernel(const float* __restrict__ w, const float* __restrict__ b,
                                   float* __restrict__ wfrag, Geometry g) {
  const int64_t total = static_cast<int64_t>(g.cin_pad / kCiChunk) * kTcFragFloats;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total + kTcChannels;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < total) {
      const int e = static_cast<int>(i & 3), lane = static_cast<int>((i >> 2) & 31);
      const int j = static_cast<int>((i >> 7) % kTcNTiles);
      const int64_t rest = (i >> 7) / kTcNTiles;  // chunk * 9 + tap
      const int64_t chunk = rest / kTaps, tap = rest - chunk * kTaps;
      const int64_t n = 8 * j + (lane >> 2), ci = chunk * kCiChunk + (lane & 3) + 4 * (e & 1);
      const float v = (n < g.Cout && ci < g.Cin) ? w[(n * g.Cin + ci) * kTaps + tap] : 0.0f;
      const uint32_t hi = tf32_bits(v);
      wfrag[i] = e < 2 ? __uint_as_float(hi) : __uint_as_float(tf32_bits(v - __uint_as_float(hi)));
    } else {
      const int64_t c = i - total;
      wfrag[i] = c < g.Cout ? b[c] : 0.0f;
    }
  }
}

// a.wpack: packed by pack_tf32x3_kernel; the other ConvArgs fields as for the direct kernel.
// Persistent grid: CTA b handles the items b, b + gridDim.x, ... of the N * tiles (sample, tile) items.
// MODE: kModeStats, kModeStatsStore or kModeEpilogue (as for the direct kernel).
template <int MODE>
__global__ void __launch_bounds__(kTcThreads, 2) conv_tf32x3_kernel(ConvArgs a) {
  extern __shared__ float4 tc_smem4[];
  const Geometry& g = a.g;
  const int chunks = g.cin_pad / kCiChunk;
  float4* wf = tc_smem4;
  float* bias_s = reinterpret_cast<float*>(tc_smem4) + chunks * kTcFragFloats;
  float* scale_s = bias_s + kTcChannels;
  float* shift_s = scale_s + kTcChannels;
  float* red_mean = shift_s + kTcChannels;          // (warps, 64)
  float* red_m2 = red_mean + kTcWarps * kTcChannels;  // (warps, 64)
  float* red_n = red_m2 + kTcWarps * kTcChannels;     // (warps,)
  float* xs = red_n + kTcWarps;                       // (cin_pad, 4, 130)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, tq = lane & 3;  // fragment row group, column pair
  const int wrow = warp / kTcWarpsPerRow;   // the warp's tile row
  const int wcol = (warp % kTcWarpsPerRow) * 16 * kTcMTiles;  // its first tile column

  const float4* wsrc = reinterpret_cast<const float4*>(a.wpack);
  for (int i = tid; i < chunks * kTcFragFloats / 4; i += kTcThreads) wf[i] = wsrc[i];
  if (tid < kTcChannels) bias_s[tid] = a.wpack[chunks * kTcFragFloats + tid];

  // 32-bit item indices (the launcher checks N * tiles <= INT_MAX): fewer registers across the main loop.
  const int items = static_cast<int>(g.N * g.tiles), tiles = static_cast<int>(g.tiles);
  const int tiles_x = static_cast<int>(g.tiles_x);
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int n = item / tiles, tile = item - n * tiles;
    const int ty = tile / tiles_x, tx = tile - ty * tiles_x;
    __syncthreads();  // the previous item's readers of xs, scale/shift and the moments are done
    // Warp w stages the input rows w, w + 8, ... of (cin_pad x 4); lane l the columns l + 32 k (130 of them).
    // Unrolled so that a thread has its 4 rows' loads (20) in flight at once.
#pragma unroll 4
    for (int rr = warp; rr < g.cin_pad * kInRows; rr += kTcWarps) {
      const int ci = rr / kInRows, row = rr - ci * kInRows;
      const int64_t iy = static_cast<int64_t>(ty) * kTileRows + row;
      const int64_t ix0 = static_cast<int64_t>(tx) * kTileCols;
      const bool row_in = ci < g.Cin && iy < g.H;
      const float* src = a.x + ((static_cast<int64_t>(n) * g.Cin + (row_in ? ci : 0)) * g.H + (row_in ? iy : 0)) * g.W + ix0;
      float v[(kTcInPitch + 31) / 32];
#pragma unroll
      for (int k = 0; k < (kTcInPitch + 31) / 32; ++k) {
        const int col = lane + 32 * k;
        v[k] = (row_in && col < kTcInPitch && ix0 + col < g.W) ? __ldg(src + col) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < (kTcInPitch + 31) / 32; ++k) {
        const int col = lane + 32 * k;
        if (col < kTcInPitch) xs[rr * kTcInPitch + col] = v[k];
      }
    }
    if constexpr (MODE == kModeEpilogue) {
      if (tid < kTcChannels) {
        const bool valid = tid < g.Cout;
        scale_s[tid] = valid ? a.scale[n * g.Cout + tid] : 0.0f;
        shift_s[tid] = valid ? a.shift[n * g.Cout + tid] : 0.0f;
      }
    }
    __syncthreads();

    // acc[i][j][q]: pixel wcol + 16 i + gq + 8 (q / 2) of row wrow, channel 8 j + 2 tq + (q % 2).
    float acc[kTcMTiles][kTcNTiles][4];
#pragma unroll
    for (int j = 0; j < kTcNTiles; ++j) {
      const float b0 = bias_s[8 * j + 2 * tq], b1 = bias_s[8 * j + 2 * tq + 1];
#pragma unroll
      for (int i = 0; i < kTcMTiles; ++i) {
        acc[i][j][0] = b0; acc[i][j][1] = b1; acc[i][j][2] = b0; acc[i][j][3] = b1;
      }
    }
#pragma unroll 1
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const float* xc = xs + (chunk * kCiChunk + tq) * kTcChannelStride + wrow * kTcInPitch + wcol + gq;
      const float4* wc = wf + chunk * (kTcFragFloats / 4) + lane;
#pragma unroll  // all 9 taps: no loop-carried register moves (ptxas, sm_90)
      for (int tap = 0; tap < kTaps; ++tap) {
        const int ky = tap / kKernel, kx = tap - ky * kKernel;
        uint32_t ahi[kTcMTiles][4], alo[kTcMTiles][4];
#pragma unroll
        for (int i = 0; i < kTcMTiles; ++i) {
          // a0: (pixel gq, channel tq), a1: (gq + 8, tq), a2: (gq, tq + 4), a3: (gq + 8, tq + 4)
          const float* p = xc + ky * kTcInPitch + kx + 16 * i;
          const float v[4] = {p[0], p[8], p[4 * kTcChannelStride], p[4 * kTcChannelStride + 8]};
#pragma unroll
          for (int q = 0; q < 4; ++q) split_tf32(v[q], ahi[i][q], alo[i][q]);
        }
#pragma unroll
        for (int j = 0; j < kTcNTiles; ++j) {
          const float4 bf = wc[(tap * kTcNTiles + j) * 32];
          const uint32_t bhi0 = __float_as_uint(bf.x), bhi1 = __float_as_uint(bf.y);
          const uint32_t blo0 = __float_as_uint(bf.z), blo1 = __float_as_uint(bf.w);
#pragma unroll
          for (int i = 0; i < kTcMTiles; ++i) {  // the small products first
            mma_tf32(acc[i][j], alo[i], bhi0, bhi1);
            mma_tf32(acc[i][j], ahi[i], blo0, blo1);
            mma_tf32(acc[i][j], ahi[i], bhi0, bhi1);
          }
        }
      }
    }

    const int64_t oy = ty * kTileRows + wrow;
    const int64_t col0 = tx * kTileCols + wcol;  // output column of the warp's first pixel
    const bool row_ok = oy < g.OH;
    if constexpr (MODE == kModeEpilogue) {
      // Per pixel (i, h): r_c over the thread's 16 channels, then max and sum(exp) over the quad (xor 1, 2),
      // which holds all 64 channels of the pixel.
      float res[2 * kTcMTiles];
#pragma unroll
      for (int i = 0; i < kTcMTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float m = -INFINITY;
#pragma unroll
          for (int j = 0; j < kTcNTiles; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = 8 * j + 2 * tq + e;
              const float r = c < g.Cout ? residual_value(acc[i][j][2 * h + e], scale_s[c], shift_s[c]) : -INFINITY;
              acc[i][j][2 * h + e] = r;
              m = fmaxf(m, r);
            }
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
          float s = 0.0f;
#pragma unroll
          for (int j = 0; j < kTcNTiles; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) s += fast_exp(acc[i][j][2 * h + e] - m);
          s += __shfl_xor_sync(0xffffffffu, s, 1);
          s += __shfl_xor_sync(0xffffffffu, s, 2);
          res[2 * i + h] = m + logf(s);
        }
      // Lane tq of the quad stores pixel (i, h) = (tq / 2, tq % 2).
      float mine = res[0];
#pragma unroll
      for (int q = 1; q < 2 * kTcMTiles; ++q) mine = tq == q ? res[q] : mine;
      const int64_t ox = col0 + 16 * (tq >> 1) + gq + 8 * (tq & 1);
      if (row_ok && ox < g.OW) a.out[(n * g.OH + oy) * g.OW + ox] = mine;
    } else {
      const int64_t left = row_ok ? g.OW - col0 : 0;
      const int nv = left <= 0 ? 0 : (left < 16 * kTcMTiles ? static_cast<int>(left) : 16 * kTcMTiles);
      bool ok[kTcMTiles][2];
#pragma unroll
      for (int i = 0; i < kTcMTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) ok[i][h] = 16 * i + 8 * h + gq < nv;
      const float inv_n = nv > 0 ? 1.0f / static_cast<float>(nv) : 0.0f;
#pragma unroll
      for (int j = 0; j < kTcNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float shift = __shfl_sync(0xffffffffu, acc[0][j][e], tq);  // lane tq: pixel 0, this channel
          float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
          for (int i = 0; i < kTcMTiles; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float d = ok[i][h] ? acc[i][j][2 * h + e] - shift : 0.0f;
              s1 += d;
              s2 = fmaf(d, d, s2);
            }
#pragma unroll
          for (int offset = 4; offset < 32; offset <<= 1) {
            s1 += __shfl_xor_sync(0xffffffffu, s1, offset);
            s2 += __shfl_xor_sync(0xffffffffu, s2, offset);
          }
          if (gq == 0) {
            const int c = 8 * j + 2 * tq + e;
            red_mean[warp * kTcChannels + c] = nv > 0 ? shift + s1 * inv_n : 0.0f;
            red_m2[warp * kTcChannels + c] = nv > 0 ? fmaxf(s2 - s1 * s1 * inv_n, 0.0f) : 0.0f;
          }
        }
      if (lane == 0) red_n[warp] = static_cast<float>(nv);
      if constexpr (MODE == kModeStatsStore) {
#pragma unroll
        for (int j = 0; j < kTcNTiles; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t c = 8 * j + 2 * tq + e;
            if (c >= g.Cout) continue;
            float* dst = a.conv + ((n * g.Cout + c) * g.OH + oy) * g.OW + col0 + gq;
#pragma unroll
            for (int i = 0; i < kTcMTiles; ++i)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                if (ok[i][h]) dst[16 * i + 8 * h] = acc[i][j][2 * h + e];
          }
      }
      __syncthreads();
      if (tid < g.Cout) {
        const int c = tid;
        Moments total{red_n[0], red_mean[c], red_m2[c]};
        for (int w = 1; w < kTcWarps; ++w)
          total = merge_moments(total, Moments{red_n[w], red_mean[w * kTcChannels + c], red_m2[w * kTcChannels + c]});
        float* dst = a.partial + ((n * g.tiles + tile) * g.Cout + c) * 2;
        dst[0] = total.mean;
        dst[1] = total.m2;
      }
    }
  }
}

}  // namespace p92
"""
