"""C++/CUDA source: a direct 3-D convolution for few input channels, part of the GroupNorm family extension.

    conv3d_direct(x (N, CI, D, H, W) float32 contiguous, weight (CO, CI, K, K, K)) -> y (N, CO, D-K+1, H-K+1, W-K+1)

stride 1, no padding, no bias (the family operator adds the bias as it reads y). The family's Conv3d problems
(#23: 3 -> 24 channels, 3^3; #27: 3 -> 16, 4^3; #83: 3 -> 16, 3^3) have this form, and cuDNN runs them slowly:
with three input channels its NCDHW algorithm computes in full float32 (not TF32) at ~3.5 TFMA/s (#27: 9.8 ms
for 34 G multiply-adds on an H200), and its channels_last TF32 kernels, 3x faster, change the result beyond the
harness's 1e-4 check (benchmarks/conv_layout_check.py). This kernel computes the same float32 sums (products of
float32 values accumulated with float32 FMAs, in another order: a few units of the last place apart).

CUDA: a thread computes P = 4 consecutive outputs along W for every output channel (CO x P accumulators in
registers). Per (ci, kd, kh) it reads one input row segment of P + K - 1 values (through L1: neighbouring threads
and the K x K x K taps reuse them) and, per output channel, the K taps of that weight row as one 16-byte
shared-memory load (rows padded to 4 taps; the address is the same across the warp: a broadcast), which feeds
K x P FMAs. The CTA stages the weights in shared memory once. Instantiated for (CI, CO, K) in
CONV3D_DIRECT_SHAPES; any other shape (and the CPU) runs at::conv3d.
"""

# (CI, CO, K) the CUDA kernel is built for: the family's Conv3d problems.
CONV3D_DIRECT_SHAPES = ((3, 16, 4), (3, 16, 3), (3, 24, 3))

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
  TORCH_CHECK(w.size(1) == x.size(1) && w.size(2) == w.size(3) && w.size(3) == w.size(4),
              gn_inline_msg::cat("conv3d_direct: weight ", gn_inline_msg::shape(w.sizes()),
                                 " does not fit input ", gn_inline_msg::shape(x.sizes()), " (cubic kernels only)"));
  TORCH_CHECK(x.size(2) >= w.size(2) && x.size(3) >= w.size(2) && x.size(4) >= w.size(2),
              gn_inline_msg::cat("conv3d_direct: kernel size ", w.size(2), " larger than the input ",
                                 gn_inline_msg::shape(x.sizes())));
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

CONV3D_DIRECT_CUDA = r"""
namespace gn_conv {

constexpr int kConvThreads = 128;
constexpr int kConvP = 4;  // outputs along W per thread

// y[n, co, d, h, w0 + p] for p < P, every co; weights staged as ws[((ci * K + kd) * K + kh) * CO + co] = the K taps
// along W, padded to 4.
template <int CI, int CO, int K>
__global__ void __launch_bounds__(kConvThreads) conv3d_direct_kernel(const float* __restrict__ x,
                                                                     const float* __restrict__ w, int64_t rows,
                                                                     int D, int H, int W, int Do, int Ho, int Wo,
                                                                     int wgroups, float* __restrict__ y) {
  static_assert(K <= 4, "weight rows are staged as 4 taps");
  constexpr int P = kConvP, R = P + K - 1, TAPS = CI * K * K * K;
  __shared__ float4 ws[CI * K * K * CO];
  for (int i = threadIdx.x; i < CI * K * K * CO; i += kConvThreads) {
    const int co = i % CO, row = i / CO;  // row = (ci * K + kd) * K + kh
    const float* src = w + static_cast<int64_t>(co) * TAPS + row * K;
    ws[i] = make_float4(src[0], K > 1 ? src[1] : 0.0f, K > 2 ? src[2] : 0.0f, K > 3 ? src[3] : 0.0f);
  }
  __syncthreads();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
  if (t >= rows * wgroups) return;  // no barrier below
  const int wg = static_cast<int>(t % wgroups);
  const int64_t row = t / wgroups;  // (n, d, h) of the output
  const int h = static_cast<int>(row % Ho);
  const int64_t nd = row / Ho;
  const int d = static_cast<int>(nd % Do);
  const int64_t n = nd / Do;
  const int w0 = wg * P;
  float acc[CO][P];
#pragma unroll
  for (int co = 0; co < CO; ++co)
#pragma unroll
    for (int p = 0; p < P; ++p) acc[co][p] = 0.0f;
  const int64_t plane = static_cast<int64_t>(H) * W;
#pragma unroll 1
  for (int ci = 0; ci < CI; ++ci) {
#pragma unroll 1
    for (int kd = 0; kd < K; ++kd) {
      const float* base = x + ((n * CI + ci) * D + d + kd) * plane + static_cast<int64_t>(h) * W + w0;
      const float4* wrow = ws + (ci * K + kd) * K * CO;
#pragma unroll
      for (int kh = 0; kh < K; ++kh) {
        float xv[R];
#pragma unroll
        for (int j = 0; j < R; ++j) xv[j] = w0 + j < W ? __ldg(base + kh * W + j) : 0.0f;
#pragma unroll
        for (int co = 0; co < CO; ++co) {
          const float4 q = wrow[kh * CO + co];
          const float tap[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
          for (int kw = 0; kw < K; ++kw)
#pragma unroll
            for (int p = 0; p < P; ++p) acc[co][p] = fmaf(xv[p + kw], tap[kw], acc[co][p]);
        }
      }
    }
  }
  const int64_t cstride = static_cast<int64_t>(Do) * Ho * Wo;
  float* out = y + (n * CO * Do + d) * static_cast<int64_t>(Ho) * Wo + static_cast<int64_t>(h) * Wo + w0;
#pragma unroll
  for (int co = 0; co < CO; ++co)
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (w0 + p < Wo) out[co * cstride + p] = acc[co][p];
}

template <int CI, int CO, int K>
bool try_conv3d_direct(const at::Tensor& x, const at::Tensor& w, at::Tensor& y, cudaStream_t stream) {
  if (x.size(1) != CI || w.size(0) != CO || w.size(2) != K) return false;
  const int64_t N = x.size(0), D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t Do = D - K + 1, Ho = H - K + 1, Wo = W - K + 1;
  const int64_t wgroups = (Wo + kConvP - 1) / kConvP;
  const int64_t rows = N * Do * Ho;
  const int64_t blocks = (rows * wgroups + kConvThreads - 1) / kConvThreads;
  if (D > INT_MAX || H > INT_MAX || W > INT_MAX || blocks > INT_MAX) return false;
  y = at::empty({N, CO, Do, Ho, Wo}, x.options());
  if (y.numel() == 0) return true;
  conv3d_direct_kernel<CI, CO, K><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
      x.data_ptr<float>(), w.data_ptr<float>(), rows, static_cast<int>(D), static_cast<int>(H), static_cast<int>(W),
      static_cast<int>(Do), static_cast<int>(Ho), static_cast<int>(Wo), static_cast<int>(wgroups), y.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

at::Tensor conv3d_direct_cuda(const at::Tensor& x_in, const at::Tensor& w_in) {
  check_conv3d_direct(x_in, w_in);
  if (x_in.scalar_type() != at::kFloat) return at::conv3d(x_in, w_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  at::Tensor y;
  if (@CONV3D_DIRECT_TRIES@) return y;
  return at::conv3d(x_in, w_in);
}

}  // namespace gn_conv
""".replace("@CONV3D_DIRECT_TRIES@", " || ".join(
    f"try_conv3d_direct<{ci}, {co}, {k}>(x, w, y, stream)" for ci, co, k in CONV3D_DIRECT_SHAPES))
