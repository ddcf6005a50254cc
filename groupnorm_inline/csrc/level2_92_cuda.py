"""CUDA source of KernelBench level 2 #92: the fused Conv2d(3x3) -> GroupNorm -> Tanh -> HardSwish -> residual
-> LogSumExp forward (the decomposition is described in `level2_92_cpu`).

Launches per call: pack the weights (one small grid), the convolution with per-tile statistics (one CTA
per (sample, 2 x 128 tile), 32 * S threads: thread = (pixel group, channel slice), lanes of one pixel
group adjacent), the per-group finalisation (one warp per (sample, group)), then the epilogue: either
the convolution kernel again in its epilogue mode (recompute) or a streaming kernel over the stored
convolution (store_conv). With conv_kernel 1 (and sm_80+, Cout <= 64, Cin <= 16) the two convolution
launches are the split-TF32 tensor-core kernel of `level2_92_tensor_core` instead (a persistent grid of
256-thread CTAs over the same tiles, writing the same per-tile statistics).

The template is the shared header (which starts with the message helpers, gn_inline_msg), the direct kernels
(P92_DIRECT_KERNELS), the tensor-core kernels (P92_TF32X3_KERNELS) and the host launcher (P92_HOST), in that
order.

The inner loop per (input channel, kernel row): three shared-memory loads give the 10 input values of
the slot's 8 pixels, then per kernel column two broadcast 16-byte loads give the slice's 8 weights and
64 FMAs follow: 9 loads per 192 FMAs, all 64 accumulators in registers (at most 128 registers per
thread, so two 256-thread CTAs share an SM and one stages while the other computes). The weights of a
tap are laid [h][s][q] so that the 8 slices of a warp read one contiguous 128-byte run (no bank
conflicts); input rows are 132 floats apart, so the 16-byte loads of the 4 pixel groups in a warp fall
in distinct banks.
"""

from .level2_92_cpu import P92_COMMON_TEMPLATE
from .level2_92_tensor_core import P92_TF32X3_KERNELS

P92_DIRECT_KERNELS = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <climits>

namespace p92 {

constexpr int kMaxThreads = kPixelGroups * kMaxSlices;  // 512
constexpr int kModeStats = 0;       // statistics only
constexpr int kModeStatsStore = 1;  // statistics, and the convolution written once
constexpr int kModeEpilogue = 2;    // recompute the convolution and finish: epilogue + logsumexp

struct ConvArgs {
  const float* x;         // (N, Cin, H, W)
  const float* wpack;     // (cin_pad, 9, cout_pad) packed, then the padded bias (cout_pad)
  float* partial;         // (N, tiles, Cout, 2): per-tile (mean, M2)
  float* conv;            // (N, Cout, OH, OW) or null
  const float* scale;     // (N, Cout) GroupNorm folded into v * scale + shift (epilogue mode)
  const float* shift;     // (N, Cout)
  float* out;             // (N, 1, OH, OW)
  Geometry g;
};

// Floats of dynamic shared memory: staged input, staged weights, and (statistics modes) the reduction.
inline int64_t conv_smem_floats(const Geometry& g, int mode) {
  const int64_t staged = static_cast<int64_t>(kCiChunk) * kInRows * kInPitch + static_cast<int64_t>(kCiChunk) * kTaps * g.cout_pad;
  const int64_t reduction = mode == kModeEpilogue ? 0 : 2 * static_cast<int64_t>(g.slices) * g.cout_pad + g.slices;
  return staged + reduction;
}

__global__ void pack_weights_kernel(const float* __restrict__ w, const float* __restrict__ b,
                                    float* __restrict__ wpack, Geometry g) {
  const int64_t total = static_cast<int64_t>(g.cin_pad) * kTaps * g.cout_pad;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total + g.cout_pad;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < total) {
      const int64_t row = i / g.cout_pad;
      const int64_t ci = row / kTaps, tap = row - ci * kTaps;
      const int c = packed_channel(static_cast<int>(i - row * g.cout_pad), g.slices);
      wpack[i] = (c < g.Cout && ci < g.Cin) ? w[(c * g.Cin + ci) * kTaps + tap] : 0.0f;
    } else {
      const int64_t c = i - total;
      wpack[i] = c < g.Cout ? b[c] : 0.0f;
    }
  }
}

// The slot's 8 pixels x 8 channels of the 3 x 3 convolution, accumulated over input-channel chunks staged
// in shared memory (xs: kCiChunk x kInRows x kInPitch, ws: kCiChunk x 9 x cout_pad). Every thread of the
// CTA calls it (it synchronises).
__device__ __forceinline__ void conv_slot(const ConvArgs& a, int64_t n, int64_t ty, int64_t tx, int s, int r,
                                          int cg, float* __restrict__ xs, float* __restrict__ ws,
                                          float (&acc)[kPixels][kChannels]) {
  const Geometry& g = a.g;
  const float* bias_pad = a.wpack + static_cast<int64_t>(g.cin_pad) * kTaps * g.cout_pad;
#pragma unroll
  for (int j = 0; j < kChannels; ++j) {
    const float bj = bias_pad[s * kChannels + j];
#pragma unroll
    for (int p = 0; p < kPixels; ++p) acc[p][j] = bj;
  }
  const int S = g.slices;
  for (int ci0 = 0; ci0 < g.cin_pad; ci0 += kCiChunk) {
    __syncthreads();  // the previous chunk is no longer being read
    for (int i = threadIdx.x; i < kCiChunk * kInRows * kInPitch; i += blockDim.x) {
      const int ci = i / (kInRows * kInPitch), rem = i - ci * (kInRows * kInPitch);
      const int row = rem / kInPitch, col = rem - row * kInPitch;
      const int64_t iy = ty * kTileRows + row, ix = tx * kTileCols + col, cig = ci0 + ci;
      float v = 0.0f;
      if (cig < g.Cin && iy < g.H && ix < g.W && col < kInCols) v = a.x[((n * g.Cin + cig) * g.H + iy) * g.W + ix];
      xs[i] = v;
    }
    const float4* wsrc = reinterpret_cast<const float4*>(a.wpack + static_cast<int64_t>(ci0) * kTaps * g.cout_pad);
    for (int i = threadIdx.x; i < kCiChunk * kTaps * g.cout_pad / 4; i += blockDim.x)
      reinterpret_cast<float4*>(ws)[i] = wsrc[i];
    __syncthreads();
    const int cn = g.Cin - ci0 < kCiChunk ? static_cast<int>(g.Cin - ci0) : kCiChunk;
#pragma unroll 1
    for (int ci = 0; ci < cn; ++ci) {
#pragma unroll
      for (int ky = 0; ky < kKernel; ++ky) {
        const float* xr = xs + (ci * kInRows + r + ky) * kInPitch + cg * kPixels;
        const float4 x0 = *reinterpret_cast<const float4*>(xr);
        const float4 x1 = *reinterpret_cast<const float4*>(xr + 4);
        const float2 x2 = *reinterpret_cast<const float2*>(xr + 8);
        const float xv[kPixels + kKernel - 1] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w, x2.x, x2.y};
#pragma unroll
        for (int kx = 0; kx < kKernel; ++kx) {
          const float* wt = ws + ((ci * kKernel + ky) * kKernel + kx) * g.cout_pad;
          const float4 w0 = *reinterpret_cast<const float4*>(wt + s * 4);
          const float4 w1 = *reinterpret_cast<const float4*>(wt + (S + s) * 4);
          const float wv[kChannels] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
          for (int p = 0; p < kPixels; ++p)
#pragma unroll
            for (int j = 0; j < kChannels; ++j) acc[p][j] = fmaf(xv[p + kx], wv[j], acc[p][j]);
        }
      }
    }
  }
}

// One CTA per (sample, tile); blockDim = 32 * S. See the module docstring for the three modes.
template <int MODE>
__global__ void __launch_bounds__(kMaxThreads) conv_tile_kernel(ConvArgs a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const Geometry& g = a.g;
  const int S = g.slices;
  float* xs = smem;
  float* ws = xs + kCiChunk * kInRows * kInPitch;
  const int64_t n = blockIdx.x / g.tiles, tile = blockIdx.x - n * g.tiles;
  const int64_t ty = tile / g.tiles_x, tx = tile - ty * g.tiles_x;
  const int s = threadIdx.x & (S - 1), pg = threadIdx.x / S;
  const int r = pg / kGroupsPerRow, cg = pg - r * kGroupsPerRow;
  const int64_t oy = ty * kTileRows + r, ox0 = tx * kTileCols + cg * kPixels;
  const int nv = slot_valid_pixels(g, oy, ox0);

  float acc[kPixels][kChannels];
  conv_slot(a, n, ty, tx, s, r, cg, xs, ws, acc);

  if constexpr (MODE == kModeEpilogue) {
    // r_c for the slice's channels (padding channels -inf), then max and sum(exp) over all slices of the pixel
    // group through xor shuffles over the adjacent lanes.
#pragma unroll
    for (int j = 0; j < kChannels; ++j) {
      const int64_t c = s * kChannels + j;
      const bool valid = c < g.Cout;
      const float sc = valid ? a.scale[n * g.Cout + c] : 0.0f;
      const float sh = valid ? a.shift[n * g.Cout + c] : 0.0f;
#pragma unroll
      for (int p = 0; p < kPixels; ++p) acc[p][j] = valid ? residual_value(acc[p][j], sc, sh) : -INFINITY;
    }
    float result[kPixels];
#pragma unroll
    for (int p = 0; p < kPixels; ++p) {
      float m = acc[p][0];
#pragma unroll
      for (int j = 1; j < kChannels; ++j) m = fmaxf(m, acc[p][j]);
      for (int offset = 1; offset < S; offset <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kChannels; ++j) sum += fast_exp(acc[p][j] - m);
      for (int offset = 1; offset < S; offset <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      result[p] = m + logf(sum);
    }
#pragma unroll
    for (int p = 0; p < kPixels; ++p)
      if (p < nv && (p & (S - 1)) == s) a.out[(n * g.OH + oy) * g.OW + ox0 + p] = result[p];
  } else {
    float* red_mean = ws + kCiChunk * kTaps * g.cout_pad;  // (S warps, cout_pad)
    float* red_m2 = red_mean + S * g.cout_pad;
    float* red_n = red_m2 + S * g.cout_pad;                  // (S warps,)
    // Moments of the slot's valid pixels per channel, then Chan merges over the pixel groups of the warp
    // (lanes with the same slice: xor offsets S .. 16) and over the warps (one thread per channel).
    float cnt = static_cast<float>(nv);
    float mean[kChannels], m2[kChannels];
#pragma unroll
    for (int j = 0; j < kChannels; ++j) {
      float sum = 0.0f;
#pragma unroll
      for (int p = 0; p < kPixels; ++p) sum += p < nv ? acc[p][j] : 0.0f;
      mean[j] = nv > 0 ? sum / cnt : 0.0f;
      float q = 0.0f;
#pragma unroll
      for (int p = 0; p < kPixels; ++p) {
        const float d = acc[p][j] - mean[j];
        q += p < nv ? d * d : 0.0f;
      }
      m2[j] = q;
    }
    for (int offset = S; offset < 32; offset <<= 1) {
      const float other_n = __shfl_xor_sync(0xffffffffu, cnt, offset);
#pragma unroll
      for (int j = 0; j < kChannels; ++j) {
        const Moments other{other_n, __shfl_xor_sync(0xffffffffu, mean[j], offset),
                            __shfl_xor_sync(0xffffffffu, m2[j], offset)};
        const Moments merged = merge_moments(Moments{cnt, mean[j], m2[j]}, other);
        mean[j] = merged.mean;
        m2[j] = merged.m2;
      }
      cnt += other_n;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane < S) {  // the first pixel group of the warp holds the warp's merged moments
#pragma unroll
      for (int j = 0; j < kChannels; ++j) {
        red_mean[warp * g.cout_pad + s * kChannels + j] = mean[j];
        red_m2[warp * g.cout_pad + s * kChannels + j] = m2[j];
      }
      if (lane == 0) red_n[warp] = cnt;
    }
    if constexpr (MODE == kModeStatsStore) {
      const bool vec4 = (g.OW & 3) == 0;
#pragma unroll
      for (int j = 0; j < kChannels; ++j) {
        const int64_t c = s * kChannels + j;
        if (c >= g.Cout || nv == 0) continue;
        float* dst = a.conv + ((n * g.Cout + c) * g.OH + oy) * g.OW + ox0;
        if (vec4) {  // nv is 4 or 8 and dst is 16-byte aligned
          *reinterpret_cast<float4*>(dst) = make_float4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
          if (nv == kPixels) *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4][j], acc[5][j], acc[6][j], acc[7][j]);
        } else {
#pragma unroll
          for (int p = 0; p < kPixels; ++p)
            if (p < nv) dst[p] = acc[p][j];
        }
      }
    }
    __syncthreads();
    if (threadIdx.x < g.Cout) {
      const int c = threadIdx.x;
      Moments total{red_n[0], red_mean[c], red_m2[c]};
      for (int w = 1; w < S; ++w) total = merge_moments(total, Moments{red_n[w], red_mean[w * g.cout_pad + c], red_m2[w * g.cout_pad + c]});
      float* dst = a.partial + ((n * g.tiles + tile) * g.Cout + c) * 2;
      dst[0] = total.mean;
      dst[1] = total.m2;
    }
  }
}

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per (sample, group): merge the tiles' moments of the group's channels in double, then fold
// GroupNorm into per-channel scale and shift. scale, shift: (N, Cout).
__global__ void finalize_kernel(const float* __restrict__ partial, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float* __restrict__ scale, float* __restrict__ shift,
                                Geometry g, int64_t groups, double eps) {
  const int64_t task = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (task >= g.N * groups) return;  // whole warps leave together
  const int64_t n = task / groups, grp = task - n * groups, cpg = g.Cout / groups;
  const int64_t entries = g.tiles * cpg;
  const double total = static_cast<double>(cpg) * static_cast<double>(g.OH * g.OW);
  double s1 = 0.0;
  for (int64_t e = lane; e < entries; e += 32) {
    const int64_t t = e / cpg, c = grp * cpg + (e - t * cpg);
    s1 += static_cast<double>(tile_pixel_count(g, t)) * partial[((n * g.tiles + t) * g.Cout + c) * 2];
  }
  const double mean = warp_sum_double(s1) / total;
  double s2 = 0.0;
  for (int64_t e = lane; e < entries; e += 32) {
    const int64_t t = e / cpg, c = grp * cpg + (e - t * cpg);
    const float* pm = partial + ((n * g.tiles + t) * g.Cout + c) * 2;
    const double d = static_cast<double>(pm[0]) - mean;
    s2 += static_cast<double>(pm[1]) + static_cast<double>(tile_pixel_count(g, t)) * d * d;
  }
  const double rstd = 1.0 / sqrt(warp_sum_double(s2) / total + eps);
  for (int64_t c = grp * cpg + lane; c < (grp + 1) * cpg; c += 32) {
    const double sc = rstd * static_cast<double>(gamma[c]);
    scale[n * g.Cout + c] = static_cast<float>(sc);
    shift[n * g.Cout + c] = static_cast<float>(static_cast<double>(beta[c]) - mean * sc);
  }
}

// Store-conv epilogue: VEC consecutive pixels of one sample per thread, all channels streamed through an
// online logsumexp. conv: (N, Cout, P) with P = OH * OW; out: (N, P).
template <int VEC>
__global__ void __launch_bounds__(256) epilogue_stored_kernel(const float* __restrict__ conv,
                                                               const float* __restrict__ scale,
                                                               const float* __restrict__ shift,
                                                               float* __restrict__ out, int64_t Cout, int64_t P,
                                                               int64_t blocks_per_sample) {
  const int64_t n = blockIdx.x / blocks_per_sample;
  const int64_t q0 = ((blockIdx.x - n * blocks_per_sample) * static_cast<int64_t>(blockDim.x) + threadIdx.x) * VEC;
  if (q0 >= P) return;
  float m[VEC], s[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) { m[k] = -INFINITY; s[k] = 0.0f; }
  const float* src = conv + n * Cout * P + q0;
  const float* sc = scale + n * Cout;
  const float* sh = shift + n * Cout;
#pragma unroll 4
  for (int64_t c = 0; c < Cout; ++c) {
    float v[VEC];
    if constexpr (VEC == 4) {
      const float4 f = __ldcs(reinterpret_cast<const float4*>(src + c * P));
      v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    } else {
      v[0] = __ldcs(src + c * P);
    }
    const float a = sc[c], b = sh[c];
#pragma unroll
    for (int k = 0; k < VEC; ++k) lse_push(m[k], s[k], residual_value(v[k], a, b));
  }
  if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(out + n * P + q0) =
        make_float4(m[0] + logf(s[0]), m[1] + logf(s[1]), m[2] + logf(s[2]), m[3] + logf(s[3]));
  } else {
    out[n * P + q0] = m[0] + logf(s[0]);
  }
}

template <int MODE>
void launch_conv(const ConvArgs& a, cudaStream_t stream) {
  const int64_t blocks = a.g.N * a.g.tiles;
  TORCH_CHECK(blocks <= INT_MAX, gn_inline_msg::cat("p92 fused_forward: input too large (", blocks, " tiles)"));
  const size_t smem = static_cast<size_t>(conv_smem_floats(a.g, MODE)) * sizeof(float);
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(conv_tile_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  conv_tile_kernel<MODE><<<static_cast<unsigned>(blocks), kPixelGroups * a.g.slices, smem, stream>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace p92
"""

P92_HOST = r"""
namespace p92 {

template <int MODE>
void launch_tf32x3(const ConvArgs& a, int device, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(tf32x3_smem_floats(a.g)) * sizeof(float);
  C10_CUDA_CHECK(cudaFuncSetAttribute(conv_tf32x3_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  int per_sm = 0, sms = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, conv_tf32x3_kernel<MODE>, kTcThreads, smem));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // Persistent grid: as many CTAs as fit at once (each loads the weights once), striding over the items.
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * sms;
  const int64_t blocks = std::min<int64_t>(a.g.N * a.g.tiles, resident);
  conv_tf32x3_kernel<MODE><<<static_cast<unsigned>(blocks), kTcThreads, smem, stream>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The packed weights (and bias) for the tf32x3 kernel or for the direct kernel.
at::Tensor pack_for(bool tensor_cores, const Geometry& g, const at::Tensor& wc, const at::Tensor& bc,
                    cudaStream_t stream) {
  const int64_t packed = tensor_cores ? static_cast<int64_t>(g.cin_pad / kCiChunk) * kTcFragFloats + kTcChannels
                                      : static_cast<int64_t>(g.cin_pad) * kTaps * g.cout_pad + g.cout_pad;
  at::Tensor wpack = at::empty({packed}, wc.options());
  const int pack_blocks = static_cast<int>(std::min<int64_t>((packed + 255) / 256, 1024));
  if (tensor_cores)
    pack_tf32x3_kernel<<<pack_blocks, 256, 0, stream>>>(wc.data_ptr<float>(), bc.data_ptr<float>(),
                                                        wpack.data_ptr<float>(), g);
  else
    pack_weights_kernel<<<pack_blocks, 256, 0, stream>>>(wc.data_ptr<float>(), bc.data_ptr<float>(),
                                                         wpack.data_ptr<float>(), g);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return wpack;
}

at::Tensor fused_forward_cuda(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& gn_weight, const at::Tensor& gn_bias, int64_t groups, double eps,
                              bool store_conv, int64_t conv_kernel) {
  check_forward_args(x_in, weight, bias, gn_weight, gn_bias, groups);
  check_conv_kernel(conv_kernel);
  TORCH_CHECK(x_in.is_cuda(), "p92 fused_forward_cuda: expected CUDA tensors");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const Geometry g = make_geometry(x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0));
  TORCH_CHECK(g.slices <= kMaxSlices, gn_inline_msg::cat("p92 fused_forward_cuda: at most ", kMaxSlices * kChannels,
                                                         " output channels, got ", g.Cout));
  at::Tensor out = at::empty({g.N, 1, g.OH, g.OW}, x.options());
  if (g.N == 0) return out;
  const int device = x.get_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const at::Tensor wc = weight.contiguous(), bc = bias.contiguous();
  const at::Tensor gwc = gn_weight.contiguous(), gbc = gn_bias.contiguous();
  int cc_major = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
  // tf32x3 where it applies (sm_80+, Cout <= 64, Cin <= 16); the direct float32 kernel otherwise.
  const bool tensor_cores = conv_kernel == kConvKernelTf32x3 && tf32x3_supported(g, cc_major);
  TORCH_CHECK(g.N * g.tiles <= INT_MAX,
              gn_inline_msg::cat("p92 fused_forward: input too large (", g.N * g.tiles, " tiles)"));

  const at::Tensor wpack = pack_for(tensor_cores, g, wc, bc, stream);
  at::Tensor partial = at::empty({g.N * g.tiles * g.Cout * 2}, x.options());
  at::Tensor coef = at::empty({2, g.N * g.Cout}, x.options());
  at::Tensor conv = store_conv ? at::empty({g.N, g.Cout, g.OH, g.OW}, x.options()) : at::Tensor();
  ConvArgs a{x.data_ptr<float>(), wpack.data_ptr<float>(), partial.data_ptr<float>(),
             store_conv ? conv.data_ptr<float>() : nullptr, coef.data_ptr<float>(),
             coef.data_ptr<float>() + g.N * g.Cout, out.data_ptr<float>(), g};

  if (tensor_cores) {
    if (store_conv) launch_tf32x3<kModeStatsStore>(a, device, stream);
    else launch_tf32x3<kModeStats>(a, device, stream);
  } else {
    if (store_conv) launch_conv<kModeStatsStore>(a, stream);
    else launch_conv<kModeStats>(a, stream);
  }

  const int64_t finalize_threads = g.N * groups * 32;
  TORCH_CHECK((finalize_threads + 255) / 256 <= INT_MAX, "p92 fused_forward: too many groups");
  finalize_kernel<<<static_cast<unsigned>((finalize_threads + 255) / 256), 256, 0, stream>>>(
      a.partial, gwc.data_ptr<float>(), gbc.data_ptr<float>(), coef.data_ptr<float>(), coef.data_ptr<float>() + g.N * g.Cout,
      g, groups, eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  if (store_conv) {
    const int64_t P = g.OH * g.OW;
    const int vec = P % 4 == 0 ? 4 : 1;
    const int64_t per_sample = (P / vec + 255) / 256;
    TORCH_CHECK(g.N * per_sample <= INT_MAX, "p92 fused_forward: input too large");
    const unsigned blocks = static_cast<unsigned>(g.N * per_sample);
    if (vec == 4)
      epilogue_stored_kernel<4><<<blocks, 256, 0, stream>>>(conv.data_ptr<float>(), a.scale, a.shift, a.out, g.Cout, P,
                                                            per_sample);
    else
      epilogue_stored_kernel<1><<<blocks, 256, 0, stream>>>(conv.data_ptr<float>(), a.scale, a.shift, a.out, g.Cout, P,
                                                            per_sample);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else if (tensor_cores) {
    launch_tf32x3<kModeEpilogue>(a, device, stream);
  } else {
    launch_conv<kModeEpilogue>(a, stream);
  }
  return out;
}

}  // namespace p92

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("fused_forward", &p92::fused_forward_cuda);
}
"""

P92_CUDA_TEMPLATE = P92_COMMON_TEMPLATE + P92_DIRECT_KERNELS + P92_TF32X3_KERNELS + P92_HOST
