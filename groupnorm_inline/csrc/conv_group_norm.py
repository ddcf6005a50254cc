"""C++/CUDA source: the direct convolution with the family operator's GroupNorm statistics gathered as it produces
its output, part of the GroupNorm family extension.

    conv_group_norm(x (N, CI, D, H, W), conv_weight (CO, CI, KD, K, K), <the family operator's GroupNorm, prologue
                    and epilogue arguments>, input_bias) -> the store output (N, CO, Do, Ho, Wo)
    = fused_group_norm(conv3d_direct(x, conv_weight), ..., output = store, input_bias)

Why: after a convolution whose output is a GroupNorm's input (through an elementwise prologue), the family
operator reads that output twice, once for the statistics and once to normalise it. The statistics pass costs
as much as a read of the whole tensor (#21: 1.06 GB, 0.47 ms of 2.6 on an H100); the convolution kernel holds
every value in registers as it stores it, so it can add them up instead.

CUDA (`conv_stats_kernel`): the direct convolution's tiles (csrc/conv3d_direct.py) with the CTAs of each sample
apart (block b: tile, sample n, block of the sample), so that a CTA's outputs belong to one sample and to the
CT / cpg whole groups of its tile. Each thread takes v = prologue(y + input_bias) of its valid outputs and adds
v - K_g and (v - K_g)^2 in float32 per channel, K_g = v at the group's first element (n, c_first, 0, 0, 0): the
shift of the family's statistics (csrc/fused_group_norm_cuda.py), which each CTA recomputes with the same fmaf
order as the thread that stores that element, so it equals what group_stats_kernel reads back from y. Warp
shuffles, then float64 over the CTA's warps and the group's channels: partial[(n * G + g) * blocks + block],
the layout group_stats_kernel reads; then group_stats_kernel and part_store_kernel as the family operator.
Instantiated for CONV_GROUP_NORM_CHAINS (a CONV_DIRECT_SHAPES entry and a (prologue, epilogue) chain); any other
case, the CPU and data other than float32 compute conv3d_direct then fused_group_norm.
"""

from .conv3d_direct import CONV_DIRECT_SHAPES

# (CI, CO, KD, K, CT, P, prologue code, epilogue code): #21 (Conv2d 8 -> 32, add_scale_sigmoid) and #83 (Conv3d
# 3 -> 16, identity, min_clamp); the tile is CONV_DIRECT_SHAPES's for the shape, and CT a multiple of the groups'
# channels (checked at run time: the other case runs the two ops).
CONV_GROUP_NORM_CHAINS = ((8, 32, 1, 3, 16, 4, 5, 0), (3, 16, 3, 3, 16, 4, 0, 3))
if not all(chain[:6] in CONV_DIRECT_SHAPES for chain in CONV_GROUP_NORM_CHAINS):
    raise RuntimeError("CONV_GROUP_NORM_CHAINS names a convolution tile that CONV_DIRECT_SHAPES does not build")

CONV_GROUP_NORM_SCHEMA = ("conv_group_norm(Tensor x, Tensor conv_weight, int num_groups, Tensor weight, Tensor bias, "
                          "float eps, int prologue, int epilogue, Tensor[] vectors, float[] scalars, "
                          "int stats_mode=0, Tensor? input_bias=None) -> Tensor")

CONV_GROUP_NORM_CPU = r"""
namespace gn_conv {

at::Tensor conv_group_norm_cpu(const at::Tensor& x, const at::Tensor& conv_weight, int64_t num_groups,
                               const at::Tensor& weight, const at::Tensor& bias, double eps, int64_t prologue,
                               int64_t epilogue, at::TensorList vectors, at::ArrayRef<double> scalars,
                               int64_t stats_mode, const std::optional<at::Tensor>& input_bias) {
  return gn_family::fused_group_norm_cpu(conv3d_direct_cpu(x, conv_weight), num_groups, weight, bias, eps, prologue,
                                         epilogue, vectors, scalars, 1, gn_family::kStore, 1, stats_mode, input_bias);
}

}  // namespace gn_conv
"""

CONV_GROUP_NORM_CUDA = r"""
namespace gn_conv {

// shifts[n * G + g] = the prologue's value at the group's first element (n, g * cpg, 0, 0, 0), the convolution
// summed in conv_accumulate's order (so it equals that element of y; any value near the group's values would do).
// One thread per (n, g), before the convolution: computing it in every CTA held each CTA for that many dependent
// L2 round trips.
template <int CI, int KD, int K, class Pro>
__global__ void __launch_bounds__(kConvThreads) conv_shift_kernel(const float* __restrict__ x,
                                                                  const float* __restrict__ w, int64_t volume,
                                                                  int64_t plane, int W, const gn_family::Problem p,
                                                                  float* __restrict__ shifts) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
  if (i >= p.N * p.G) return;
  const int64_t n = i / p.G, c = (i - n * p.G) * p.cpg;
  const float* origin = x + n * CI * volume;
  const float* wc = w + c * (CI * KD * K * K);
  float first = 0.0f;
  for (int ci = 0; ci < CI; ++ci)
    for (int kd = 0; kd < KD; ++kd)
      for (int kh = 0; kh < K; ++kh)
        for (int kw = 0; kw < K; ++kw)
          first = fmaf(origin[ci * volume + kd * plane + kh * W + kw], wc[((ci * KD + kd) * K + kh) * K + kw], first);
  shifts[i] = Pro(p.args, 0, 0)(first, c);
}

// y as conv_direct_kernel, and the statistics partials of the GroupNorm chain's prologue values (module docstring).
// Block b: tile b % TILES, then sample n and block `sb` of that sample's outputs (`blocks` per sample, the
// threads of a sample over (d, h, group of P along W)).
template <int CI, int CO, int KD, int K, int CT, int P, class Pro>
__global__ void __launch_bounds__(kConvThreads) conv_stats_kernel(const float* __restrict__ x,
                                                                  const float* __restrict__ w, int blocks,
                                                                  int D, int H, int W, int Do, int Ho, int Wo,
                                                                  int wgroups, const gn_family::Problem p,
                                                                  const float* __restrict__ shifts,
                                                                  float* __restrict__ y,
                                                                  double2* __restrict__ partial) {
  static_assert(CO % CT == 0, "the output channels split into whole tiles");
  constexpr int TILES = CO / CT, WARPS = kConvThreads / 32;
  __shared__ float4 ws[CI * KD * K * CT];
  __shared__ float shift[CT];                // K of each channel's group
  __shared__ double sums[WARPS][CT][2];      // per warp and channel: sum of (v - K), sum of (v - K)^2
  const int tile = static_cast<int>(blockIdx.x % TILES);
  const int64_t rest = blockIdx.x / TILES;
  const int sb = static_cast<int>(rest % blocks);
  const int64_t n = rest / blocks;
  const int cpg = static_cast<int>(p.cpg), groups = CT / cpg;
  const Pro pro(p.args, 0, 0);
  const int64_t plane = static_cast<int64_t>(H) * W, volume = D * plane;
  if (threadIdx.x < CT) shift[threadIdx.x] = shifts[n * p.G + (tile * CT + threadIdx.x) / cpg];
  stage_weights<CI, KD, K, CT>(w, tile, ws);  // its barrier publishes `shift` too
  const int t = sb * kConvThreads + static_cast<int>(threadIdx.x);
  const bool valid = t < Do * Ho * wgroups;  // the host checks that a sample's threads fit an int
  const int wg = valid ? t % wgroups : 0, row = valid ? t / wgroups : 0;
  const int h = row % Ho, d = row / Ho, w0 = wg * P;
  float acc[CT][P];
  conv_accumulate<CI, KD, K, CT, P>(x + n * CI * volume + d * plane + static_cast<int64_t>(h) * W + w0, plane, volume,
                                    W, w0, ws, acc);
  const int64_t cstride = static_cast<int64_t>(Do) * Ho * Wo;
  float* out = y + ((n * CO + tile * CT) * Do + d) * static_cast<int64_t>(Ho) * Wo + static_cast<int64_t>(h) * Wo + w0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int co = 0; co < CT; ++co) {
    float s1 = 0.0f, s2 = 0.0f;
    const int64_t c = tile * CT + co;
#pragma unroll
    for (int q = 0; q < P; ++q) {
      if (valid && w0 + q < Wo) {
        out[co * cstride + q] = acc[co][q];
        const float dv = pro(acc[co][q], c) - shift[co];
        s1 += dv;
        s2 = fmaf(dv, dv, s2);
      }
    }
    s1 = gn_inline::warp_sum(s1);
    s2 = gn_inline::warp_sum(s2);
    if (lane == 0) {
      sums[warp][co][0] = s1;
      sums[warp][co][1] = s2;
    }
  }
  __syncthreads();
  if (threadIdx.x < groups) {
    double a = 0.0, b = 0.0;
    for (int j = 0; j < cpg; ++j)
      for (int v = 0; v < WARPS; ++v) {
        a += sums[v][threadIdx.x * cpg + j][0];
        b += sums[v][threadIdx.x * cpg + j][1];
      }
    const int64_t g = static_cast<int64_t>(tile) * groups + threadIdx.x;
    partial[(n * p.G + g) * blocks + sb] = make_double2(a, b);
  }
}

// The chain (PRO, EPI) on the convolution of x and w with tile (CT, P), when they match; false otherwise (nothing
// launched). y: the convolution's output (N, CO, Do, Ho, Wo); p: the family Problem of y; out: the store output.
template <int CI, int CO, int KD, int K, int CT, int P, int PRO, int EPI>
bool try_conv_group_norm(const at::Tensor& x, const at::Tensor& w, int64_t prologue, int64_t epilogue,
                         const gn_family::Problem& p, at::Tensor& y, at::Tensor& out, cudaStream_t stream) {
  using Pro = gn_family::WithInputBias<typename gn_family::ProOf<PRO, float>::type, float>;
  using Epi = typename gn_family::EpiOf<EPI, float>::type;
  if (prologue != PRO || epilogue != EPI || x.size(1) != CI || w.size(0) != CO || w.size(2) != KD ||
      w.size(3) != K || CT % p.cpg != 0)
    return false;
  const int64_t D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t Do = y.size(2), Ho = y.size(3), Wo = y.size(4);
  const int64_t wgroups = (Wo + P - 1) / P;
  const int64_t per_sample = Do * Ho * wgroups;
  const int64_t blocks = (per_sample + kConvThreads - 1) / kConvThreads;
  const int64_t grid = p.N * blocks * (CO / CT);
  if (D > INT_MAX || H > INT_MAX || W > INT_MAX || per_sample + kConvThreads > INT_MAX || grid > INT_MAX || (p.N * p.G + kConvThreads - 1) / kConvThreads > INT_MAX)
    return false;
  at::Tensor partial = at::empty({p.N * p.G * blocks, 2}, x.options().dtype(at::kDouble));
  at::Tensor stats = at::empty({p.N * p.G, 2}, x.options());
  at::Tensor shifts = at::empty({p.N * p.G}, x.options());
  auto* partial_p = reinterpret_cast<double2*>(partial.data_ptr<double>());
  auto* stats_p = reinterpret_cast<float2*>(stats.data_ptr<float>());
  conv_shift_kernel<CI, KD, K, Pro><<<static_cast<unsigned>((p.N * p.G + kConvThreads - 1) / kConvThreads),
                                      kConvThreads, 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(), D * H * W,
                                                                 H * W, static_cast<int>(W), p, shifts.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  conv_stats_kernel<CI, CO, KD, K, CT, P, Pro><<<static_cast<unsigned>(grid), kConvThreads, 0, stream>>>(
      x.data_ptr<float>(), w.data_ptr<float>(), static_cast<int>(blocks), static_cast<int>(D), static_cast<int>(H),
      static_cast<int>(W), static_cast<int>(Do), static_cast<int>(Ho), static_cast<int>(Wo),
      static_cast<int>(wgroups), p, shifts.data_ptr<float>(), y.data_ptr<float>(), partial_p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gn_family::launch_store_from_partials<float, Pro, Epi>(y, p, blocks, partial_p, shifts.data_ptr<float>(), stats_p,
                                                         out, stream);
  return true;
}

at::Tensor conv_group_norm_cuda(const at::Tensor& x_in, const at::Tensor& w_in, int64_t num_groups,
                                const at::Tensor& weight, const at::Tensor& bias, double eps, int64_t prologue,
                                int64_t epilogue, at::TensorList vectors, at::ArrayRef<double> scalars,
                                int64_t stats_mode, const std::optional<at::Tensor>& input_bias) {
  check_conv3d_direct(x_in, w_in);
  auto two_ops = [&] {
    return gn_family::fused_group_norm_cuda(conv3d_direct_cuda(x_in, w_in), num_groups, weight, bias, eps, prologue,
                                            epilogue, vectors, scalars, 1, gn_family::kStore, 1, stats_mode,
                                            input_bias);
  };
  if (x_in.scalar_type() != at::kFloat || x_in.numel() == 0) return two_ops();
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  at::Tensor y = at::empty({x.size(0), w.size(0), x.size(2) - w.size(2) + 1, x.size(3) - w.size(3) + 1,
                            x.size(4) - w.size(4) + 1}, x.options());
  std::vector<at::Tensor> keep;
  const gn_family::Problem p = gn_family::prepare(y, num_groups, weight, bias, eps, prologue, epilogue, vectors,
                                                  scalars, 1, gn_family::kStore, 1, stats_mode, input_bias, keep);
  at::Tensor out = at::empty(y.sizes(), y.options());
  if (y.numel() == 0) return out;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  if (@CONV_GROUP_NORM_TRIES@) return out;
  return two_ops();
}

}  // namespace gn_conv
""".replace("@CONV_GROUP_NORM_TRIES@", " || ".join(
    f"try_conv_group_norm<{', '.join(map(str, c))}>(x, w, prologue, epilogue, p, y, out, stream)"
    for c in CONV_GROUP_NORM_CHAINS))
