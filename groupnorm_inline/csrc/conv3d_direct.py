"""C++/CUDA source: a direct convolution for few input channels (3-D, and 2-D as its depth-1 case), part of the
GroupNorm family extension.

    conv3d_direct(x (N, CI, D, H, W) float32, weight (CO, CI, KD, K, K)) -> y (N, CO, D-KD+1, H-K+1, W-K+1)

stride 1, no padding, no bias (the family operator adds the bias as it reads y). A Conv2d runs as the depth-1
case: x (N, CI, 1, H, W), weight (CO, CI, 1, K, K) (views, no copy; `family._direct_convolution`). The family's
Conv3d problems (#23: 3 -> 24 channels, 3^3; #27: 3 -> 16, 4^3; #83: 3 -> 16, 3^3) and #21's Conv2d (8 -> 32,
3 x 3) have this form, and cuDNN runs them slowly: with few input channels its NCHW/NCDHW algorithms compute in
full float32 (not TF32) at ~3.5 TFMA/s for the Conv3d problems (#27: 9.8 ms for 34 G multiply-adds on an H200)
and ~11 TFMA/s for #21 (1.73 ms for 19 G on an H100), and its channels_last TF32 kernels, faster, change the
result beyond the harness's 1e-4 check (benchmarks/conv_layout_check.py). This kernel computes the same float32
sums (products of float32 values accumulated with float32 FMAs, in another order: a few units of the last place
apart).

CUDA: a thread computes P consecutive outputs along W for CT output channels (a tile of the CO: CT x P
accumulators in registers). Per (ci, kd, kh) it reads one input row segment of P + K - 1 values (through L1:
neighbouring threads and the taps reuse them) and, per output channel, the K taps of that weight row as one
16-byte shared-memory load (rows padded to 4 taps; the address is the same across the warp: a broadcast), which
feeds K x P FMAs. The CTA stages its tile's weights in shared memory once; the CO / CT tiles of the same rows are
neighbouring CTAs (they read the same input rows while it is in L2). Instantiated for the (CI, CO, KD, K) of
CONV_DIRECT_SHAPES with the (CT, P) given there; any other shape (and the CPU) runs at::conv3d.
"""

# (CI, CO, KD, K, CT, P) the CUDA kernel is built for: the family's Conv3d problems and the Conv2d of #21 and #85
# (KD = 1). The tiles are the fastest of benchmarks/conv_direct_variants.py on an H100 (2026-11-26): 64
# accumulators per thread (CT x P = 16 x 4) beat 128 (32 x 4: 187 registers, two CTAs per SM), whose input rows
# are read once instead of once per tile (#21: 1.155 against 1.316 ms; cuDNN 1.721); #23 takes 24 x 2 (0.360
# against 0.435 ms for 24 x 4; cuDNN 0.618).
CONV_DIRECT_SHAPES = ((3, 16, 4, 4, 16, 4), (3, 16, 3, 3, 16, 4), (3, 24, 3, 3, 24, 2), (8, 32, 1, 3, 16, 4),
                      (8, 64, 1, 3, 16, 4))

CONV3D_DIRECT_SCHEMA = "conv3d_direct(Tensor x, Tensor weight) -> Tensor"

CONV3D_DIRECT_CHECKS = r"""
namespace gn_conv {

// Shapes and types of conv3d_direct, checked on both devices.
inline void check_conv3d_direct(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 5 && w.dim() == 5,
              gn_inline_msg::cat("conv3d_direct: expected 5-D input and weight, got shapes ",
                                 gn_inline_msg::shape(x.sizes()), " and ", gn_inline_msg::shape(w.sizes())));
  TORCH_CHECK(x.scalar_type() == w.scalar_type(), "conv3d_direct: input and weight must have the same dtype");
  TORCH_CHECK(x.device() == w.device(),
              gn_inline_msg::cat("Expected all tensors to be on the same device, but found at least two devices, ",
                                 x.device().str(), " and ", w.device().str(), "!"));
  TORCH_CHECK(w.size(1) == x.size(1) && w.size(3) == w.size(4),
              gn_inline_msg::cat("conv3d_direct: weight ", gn_inline_msg::shape(w.sizes()),
                                 " does not fit input ", gn_inline_msg::shape(x.sizes()),
                                 " (square kernels in H and W only)"));
  TORCH_CHECK(x.size(2) >= w.size(2) && x.size(3) >= w.size(3) && x.size(4) >= w.size(4),
              gn_inline_msg::cat("conv3d_direct: kernel ", gn_inline_msg::shape(w.sizes().slice(2)),
                                 " larger than the input ", gn_inline_msg::shape(x.sizes())));
}

}  // namespace gn_conv
"""

CONV3D_DIRECT_CPU = r"""
namespace gn_conv {

at::Tensor conv3d_direct_cpu(const at::Tensor& x, const at::Tensor& w) {
  check_conv3d_direct(x, w);
  return at::conv3d(x, w);
}

}  // namespace gn_conv
"""

CONV_DIRECT_KERNEL = r"""
namespace gn_conv {

constexpr int kConvThreads = 128;

// The CTA's tile of weights into shared memory: ws[((ci * KD + kd) * K + kh) * CT + co] = the K taps along W of
// output channel tile * CT + co, padded to 4. Ends with a barrier.
template <int CI, int KD, int K, int CT>
__device__ __forceinline__ void stage_weights(const float* __restrict__ w, int tile, float4* ws) {
  static_assert(K <= 4, "weight rows are staged as 4 taps");
  constexpr int TAPS = CI * KD * K * K, WROWS = CI * KD * K;
  for (int i = threadIdx.x; i < WROWS * CT; i += kConvThreads) {
    const int co = i % CT, row = i / CT;  // row = (ci * KD + kd) * K + kh
    const float* src = w + static_cast<int64_t>(tile * CT + co) * TAPS + row * K;
    ws[i] = make_float4(src[0], K > 1 ? src[1] : 0.0f, K > 2 ? src[2] : 0.0f, K > 3 ? src[3] : 0.0f);
  }
  __syncthreads();
}

// acc[co][p] = y[n, tile * CT + co, d, h, w0 + p]: `origin` = x + ((n * CI) * D + d) * H * W + h * W + w0. The sums
// run over (ci, kd, kh, kw) in that order, one fmaf each.
template <int CI, int KD, int K, int CT, int P>
__device__ __forceinline__ void conv_accumulate(const float* __restrict__ origin, int64_t plane, int64_t volume,
                                                int W, int w0, const float4* ws, float (&acc)[CT][P]) {
  constexpr int R = P + K - 1;
#pragma unroll
  for (int co = 0; co < CT; ++co)
#pragma unroll
    for (int p = 0; p < P; ++p) acc[co][p] = 0.0f;
#pragma unroll 1
  for (int ci = 0; ci < CI; ++ci) {
#pragma unroll 1
    for (int kd = 0; kd < KD; ++kd) {
      const float* base = origin + ci * volume + kd * plane;
      const float4* wrow = ws + (ci * KD + kd) * K * CT;
#pragma unroll
      for (int kh = 0; kh < K; ++kh) {
        float xv[R];
#pragma unroll
        for (int j = 0; j < R; ++j) xv[j] = w0 + j < W ? __ldg(base + kh * W + j) : 0.0f;
#pragma unroll
        for (int co = 0; co < CT; ++co) {
          const float4 q = wrow[kh * CT + co];
          const float tap[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
          for (int kw = 0; kw < K; ++kw)
#pragma unroll
            for (int p = 0; p < P; ++p) acc[co][p] = fmaf(xv[p + kw], tap[kw], acc[co][p]);
        }
      }
    }
  }
}

// Block b: tile b % (CO / CT), threads over (output row (n, d, h), group of P along W) from (b / (CO / CT)) *
// kConvThreads; stores y (N, CO, Do, Ho, Wo).
template <int CI, int CO, int KD, int K, int CT, int P>
__global__ void __launch_bounds__(kConvThreads) conv_direct_kernel(const float* __restrict__ x,
                                                                   const float* __restrict__ w, int64_t rows,
                                                                   int D, int H, int W, int Do, int Ho, int Wo,
                                                                   int wgroups, float* __restrict__ y) {
  static_assert(CO % CT == 0, "the output channels split into whole tiles");
  constexpr int TILES = CO / CT;
  __shared__ float4 ws[CI * KD * K * CT];
  const int tile = static_cast<int>(blockIdx.x % TILES);
  stage_weights<CI, KD, K, CT>(w, tile, ws);
  const int64_t t = static_cast<int64_t>(blockIdx.x / TILES) * kConvThreads + threadIdx.x;
  if (t >= rows * wgroups) return;  // no barrier below
  const int wg = static_cast<int>(t % wgroups);
  const int64_t row = t / wgroups;  // (n, d, h) of the output
  const int h = static_cast<int>(row % Ho);
  const int64_t nd = row / Ho;
  const int d = static_cast<int>(nd % Do);
  const int64_t n = nd / Do;
  const int w0 = wg * P;
  const int64_t plane = static_cast<int64_t>(H) * W;
  float acc[CT][P];
  conv_accumulate<CI, KD, K, CT, P>(x + (n * CI * D + d) * plane + static_cast<int64_t>(h) * W + w0, plane,
                                    D * plane, W, w0, ws, acc);
  const int64_t cstride = static_cast<int64_t>(Do) * Ho * Wo;
  float* out = y + ((n * CO + tile * CT) * Do + d) * static_cast<int64_t>(Ho) * Wo + static_cast<int64_t>(h) * Wo + w0;
#pragma unroll
  for (int co = 0; co < CT; ++co)
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (w0 + p < Wo) out[co * cstride + p] = acc[co][p];
}

// y = the convolution of x and w (contiguous float32) with the kernel instantiated for (CI, CO, KD, K) and tile
// (CT, P); false (y untouched) when x and w have another shape or the grid does not fit one launch.
template <int CI, int CO, int KD, int K, int CT, int P>
bool try_conv_direct(const at::Tensor& x, const at::Tensor& w, at::Tensor& y, cudaStream_t stream) {
  if (x.size(1) != CI || w.size(0) != CO || w.size(2) != KD || w.size(3) != K) return false;
  const int64_t N = x.size(0), D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t Do = D - KD + 1, Ho = H - K + 1, Wo = W - K + 1;
  const int64_t wgroups = (Wo + P - 1) / P;
  const int64_t rows = N * Do * Ho;
  const int64_t blocks = (rows * wgroups + kConvThreads - 1) / kConvThreads * (CO / CT);
  if (D > INT_MAX || H > INT_MAX || W > INT_MAX || blocks > INT_MAX) return false;
  y = at::empty({N, CO, Do, Ho, Wo}, x.options());
  if (y.numel() == 0) return true;
  conv_direct_kernel<CI, CO, KD, K, CT, P><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
      x.data_ptr<float>(), w.data_ptr<float>(), rows, static_cast<int>(D), static_cast<int>(H), static_cast<int>(W),
      static_cast<int>(Do), static_cast<int>(Ho), static_cast<int>(Wo), static_cast<int>(wgroups), y.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace gn_conv
"""


def conv_direct_tries(shapes) -> str:
    """The C++ expression that runs the first instantiation of `shapes` ((CI, CO, KD, K, CT, P) tuples) matching
    x and w (true when one ran)."""
    return " || ".join(f"try_conv_direct<{', '.join(map(str, s))}>(x, w, y, stream)" for s in shapes) or "false"


CONV3D_DIRECT_CUDA = CONV_DIRECT_KERNEL + r"""
namespace gn_conv {

at::Tensor conv3d_direct_cuda(const at::Tensor& x_in, const at::Tensor& w_in) {
  check_conv3d_direct(x_in, w_in);
  if (x_in.scalar_type() != at::kFloat) return at::conv3d(x_in, w_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  at::Tensor y;
  if (@CONV_DIRECT_TRIES@) return y;
  return at::conv3d(x_in, w_in);
}

}  // namespace gn_conv
""".replace("@CONV_DIRECT_TRIES@", conv_direct_tries(CONV_DIRECT_SHAPES))
