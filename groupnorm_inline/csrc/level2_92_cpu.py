"""C++ sources of KernelBench level 2 #92 (Conv2d 3x3 -> GroupNorm -> Tanh -> HardSwish -> residual add ->
LogSumExp over channels): operator schema, the decomposition shared by the CPU and CUDA kernels, and
the CPU kernels.

One operator, registered under P92_NAMESPACE (a token: `with_namespace` puts the real name in):

  fused_forward(x (N, Cin, H, W) f32, weight (Cout, Cin, 3, 3), bias (Cout,), gn_weight (Cout,),
                gn_bias (Cout,), groups, eps, store_conv, conv_kernel=0) -> (N, 1, H - 2, W - 2)

conv_kernel 0 is the direct float32 convolution below; 1 (CUDA, sm_80+, Cout <= 64, Cin <= 16) the split-TF32
tensor-core convolution of `level2_92_tensor_core`, which keeps the tiles, the statistics and the epilogue
described here but sums each convolution value in another order (its values agree with the direct ones
to about 1e-6 relative, not bitwise). The CPU kernels accept either and compute the direct decomposition.

The decomposition (the CUDA kernels run it with one thread per "slot"; the CPU kernels loop over the
same slots in the same arithmetic order, so their convolution values are bitwise the same):

  weights  packed once per call to wpack[ci][tap][h][s][q] (Cout padded with zeros to 8 * S channels,
           S = the number of channel slices, a power of two): the 8 channels c = 8 s + 4 h + q of
           slice s sit at two 16-byte runs, one per h, and the 8 * S channels of one tap are contiguous.
  tiles    the (OH, OW) output of one sample is cut into tiles of 2 rows x 128 columns; a tile has 32
           pixel groups of 8 consecutive pixels of one row; slot (pixel group, slice) computes
           8 pixels x 8 channels: acc = bias, then acc += x * w over the input channels (in chunks of 8
           staged in shared memory), the 3 kernel rows and the 3 kernel columns, in that order.
  stage 1  per slot and channel the mean and centred sum of squares (M2) of its valid pixels, merged
           over the tile's slots (Chan's formula) into partial[n][tile][c] = (mean, M2);
           with store_conv the convolution is also written, once, to an (N, Cout, OH, OW) buffer.
  stage 2  per (n, group): mean and M2 over the group's channels and tiles in double (first the mean,
           then sum(M2 + count * (mean_t - mean)^2)), rstd = 1 / sqrt(M2 / count + eps), and per
           channel scale = rstd * gamma, shift = beta - mean * scale, as PyTorch's GroupNorm applies.
  stage 3  per pixel: r_c = v_c + hardswish(tanh(v_c * scale_c + shift_c)) for each channel and
           out = m + log(sum_c exp(r_c - m)), m = max_c r_c. With store_conv v is read back from the
           buffer and the sum is kept online (one exponential per value); otherwise the convolution is
           recomputed, tile by tile, and the maximum is taken first.

tanh(t) is computed as sign(t) * (1 - 2 / (exp(2|t|) + 1)); on the GPU with the fast exponential and
division (absolute error below 4e-7; every output is a logsumexp of values of order 1, compared with a
tolerance of 1e-4 + 1e-4 * |out|, |out| ~ 5).
"""

from .message import MESSAGE_HEADER

# torch.library namespace of the #92 operator. The sources spell it GN_NAMESPACE, replaced by
# `group_norm_cpu.with_namespace`, so an exported single file can register it under another name.
P92_NAMESPACE = "groupnorm_inline_p92"

FUSED_SCHEMA = ("fused_forward(Tensor x, Tensor weight, Tensor bias, Tensor gn_weight, Tensor gn_bias, int groups, "
                "float eps, bool store_conv, int conv_kernel=0) -> Tensor")

# Shared by both translation units: error messages (gn_inline_msg), the geometry of the decomposition, the
# element math and the argument checks.
P92_COMMON_TEMPLATE = MESSAGE_HEADER + r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define P92_HD __host__ __device__ __forceinline__
#else
#define P92_HD inline
#endif

namespace p92 {

constexpr int kKernel = 3;                        // the fused path handles 3 x 3 convolutions
constexpr int kTaps = kKernel * kKernel;
constexpr int kTileRows = 2;                      // output rows per tile
constexpr int kTileCols = 128;                    // output columns per tile
constexpr int kPixels = 8;                        // consecutive output pixels per slot
constexpr int kChannels = 8;                      // output channels per slot (one channel slice)
constexpr int kGroupsPerRow = kTileCols / kPixels;
constexpr int kPixelGroups = kTileRows * kGroupsPerRow;  // 32: one warp's worth of pixel groups per slice
constexpr int kCiChunk = 8;                       // input channels staged at a time
constexpr int kInRows = kTileRows + kKernel - 1;  // input rows a tile reads
constexpr int kInCols = kTileCols + kKernel - 1;  // input columns a tile reads
constexpr int kInPitch = 132;                     // >= kInCols, a multiple of 4 (16-byte rows)
constexpr int kMaxSlices = 16;                    // CUDA: Cout <= 128
// conv_kernel argument: the direct float32 kernel, or (CUDA, sm_80+) the split-TF32 tensor-core kernel.
constexpr int64_t kConvKernelDirect = 0;
constexpr int64_t kConvKernelTf32x3 = 1;

struct Geometry {
  int64_t N, Cin, H, W, Cout, OH, OW;
  int64_t tiles_y, tiles_x, tiles;
  int slices;    // channel slices S, a power of two
  int cout_pad;  // 8 * S
  int cin_pad;   // Cin rounded up to kCiChunk
};

inline Geometry make_geometry(int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t Cout) {
  Geometry g{};
  g.N = N; g.Cin = Cin; g.H = H; g.W = W; g.Cout = Cout;
  g.OH = H - kKernel + 1;
  g.OW = W - kKernel + 1;
  g.tiles_y = (g.OH + kTileRows - 1) / kTileRows;
  g.tiles_x = (g.OW + kTileCols - 1) / kTileCols;
  g.tiles = g.tiles_y * g.tiles_x;
  int slices = 1;
  while (slices * kChannels < Cout) slices <<= 1;
  g.slices = slices;
  g.cout_pad = slices * kChannels;
  g.cin_pad = static_cast<int>((Cin + kCiChunk - 1) / kCiChunk * kCiChunk);
  return g;
}

// Valid output pixels of a tile (its rows and columns inside the (OH, OW) output).
P92_HD int64_t tile_pixel_count(const Geometry& g, int64_t tile) {
  const int64_t ty = tile / g.tiles_x, tx = tile - ty * g.tiles_x;
  const int64_t rows = g.OH - ty * kTileRows < kTileRows ? g.OH - ty * kTileRows : kTileRows;
  const int64_t cols = g.OW - tx * kTileCols < kTileCols ? g.OW - tx * kTileCols : kTileCols;
  return rows * cols;
}

// Valid pixels of the slot's 8 (0 when its row lies below the output).
P92_HD int slot_valid_pixels(const Geometry& g, int64_t oy, int64_t ox0) {
  if (oy >= g.OH || ox0 >= g.OW) return 0;
  const int64_t left = g.OW - ox0;
  return left < kPixels ? static_cast<int>(left) : kPixels;
}

// Output channel held at position `rem` of a tap's packed run of cout_pad weights.
P92_HD int packed_channel(int rem, int slices) {
  const int q = rem & 3, hs = rem >> 2;
  const int h = hs / slices, s = hs - h * slices;
  return s * kChannels + h * 4 + q;
}

struct Moments {
  float n, mean, m2;
};

// Chan's merge of two (count, mean, M2) summaries.
P92_HD Moments merge_moments(Moments a, Moments b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return Moments{0.0f, 0.0f, 0.0f};
  const float delta = b.mean - a.mean;
  const float fb = b.n / n;
  return Moments{n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.n * fb};
}

P92_HD float fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}

P92_HD float fast_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}

P92_HD float tanh_via_exp(float t) {
  const float e = fast_exp(2.0f * fabsf(t));
  return copysignf(1.0f - fast_div(2.0f, e + 1.0f), t);
}

P92_HD float hardswish(float y) { return y * fminf(fmaxf(y + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f); }

// One channel's value before the logsumexp: conv + hardswish(tanh(groupnorm(conv))).
P92_HD float residual_value(float v, float scale, float shift) {
  return v + hardswish(tanh_via_exp(fmaf(v, scale, shift)));
}

// Online logsumexp with one exponential per value: (m, s) holds max and sum(exp(r - m)).
P92_HD void lse_push(float& m, float& s, float r) {
  const float d = r - m;
  const float e = fast_exp(-fabsf(d));
  const bool larger = d > 0.0f;
  s = larger ? fmaf(s, e, 1.0f) : s + e;
  m = larger ? r : m;
}

inline void check_conv_kernel(int64_t conv_kernel) {
  TORCH_CHECK(conv_kernel == kConvKernelDirect || conv_kernel == kConvKernelTf32x3,
              gn_inline_msg::cat("p92 fused_forward: conv_kernel must be 0 (direct float32) or 1 (tf32x3), got ",
                                 conv_kernel));
}

// Host-side argument checks shared by the CPU and CUDA operators.
inline void check_forward_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                               const at::Tensor& gn_weight, const at::Tensor& gn_bias, int64_t groups) {
  TORCH_CHECK(x.dim() == 4, gn_inline_msg::cat("p92 fused_forward: expected a 4-D input (N, C, H, W), got shape ",
                                               gn_inline_msg::shape(x.sizes())));
  TORCH_CHECK(x.scalar_type() == at::kFloat, gn_inline_msg::cat("p92 fused_forward: expected a float32 input, got ",
                                                                gn_inline_msg::dtype_name(x.scalar_type())));
  TORCH_CHECK(weight.dim() == 4 && weight.size(2) == kKernel && weight.size(3) == kKernel,
              gn_inline_msg::cat("p92 fused_forward: expected a (Cout, Cin, 3, 3) weight, got ",
                                 gn_inline_msg::shape(weight.sizes())));
  TORCH_CHECK(weight.size(1) == x.size(1),
              gn_inline_msg::cat("Given groups=1, weight of size ", gn_inline_msg::shape(weight.sizes()),
                                 ", expected input", gn_inline_msg::shape(x.sizes()), " to have ", weight.size(1),
                                 " channels, but got ", x.size(1), " channels instead"));
  const int64_t Cout = weight.size(0);
  TORCH_CHECK(Cout > 0 && weight.size(1) > 0,
              gn_inline_msg::cat("p92 fused_forward: empty weight ", gn_inline_msg::shape(weight.sizes())));
  TORCH_CHECK(x.size(2) >= kKernel && x.size(3) >= kKernel,
              gn_inline_msg::cat("Calculated padded input size per channel: (", x.size(2), " x ", x.size(3),
                                 "). Kernel size: (3 x 3). Kernel size can't be greater than actual input size"));
  TORCH_CHECK(groups > 0 && Cout % groups == 0,
              gn_inline_msg::cat("Expected number of channels in input to be divisible by num_groups, but got ",
                                 Cout, " channels and num_groups=", groups));
  const at::Tensor* vectors[] = {&bias, &gn_weight, &gn_bias};
  const char* names[] = {"bias", "gn_weight", "gn_bias"};
  for (int i = 0; i < 3; ++i) {
    TORCH_CHECK(vectors[i]->dim() == 1 && vectors[i]->size(0) == Cout,
                gn_inline_msg::cat("p92 fused_forward: expected ", names[i], " of shape [", Cout, "], got ",
                                   gn_inline_msg::shape(vectors[i]->sizes())));
    TORCH_CHECK(vectors[i]->scalar_type() == at::kFloat,
                gn_inline_msg::cat("p92 fused_forward: expected ", names[i], " to be float32, got ",
                                   gn_inline_msg::dtype_name(vectors[i]->scalar_type())));
  }
  const at::Tensor* all[] = {&weight, &bias, &gn_weight, &gn_bias};
  for (const at::Tensor* t : all)
    TORCH_CHECK(t->device() == x.device(),
                gn_inline_msg::cat("Expected all tensors to be on the same device, but found ", x.device().str(),
                                   " and ", t->device().str()));
  TORCH_CHECK(weight.scalar_type() == at::kFloat,
              gn_inline_msg::cat("p92 fused_forward: expected a float32 weight, got ",
                                 gn_inline_msg::dtype_name(weight.scalar_type())));
}

}  // namespace p92
"""

P92_CPU_TEMPLATE = P92_COMMON_TEMPLATE + r"""
#include <ATen/Parallel.h>
#include <algorithm>
#include <limits>
#include <vector>

namespace p92 {

// The packed weights (cin_pad * 9 * cout_pad) followed by the padded bias (cout_pad).
std::vector<float> pack_weights_cpu(const Geometry& g, const float* w, const float* b) {
  const int64_t total = static_cast<int64_t>(g.cin_pad) * kTaps * g.cout_pad;
  std::vector<float> out(static_cast<size_t>(total + g.cout_pad));
  for (int64_t i = 0; i < total; ++i) {
    const int64_t row = i / g.cout_pad;
    const int ci = static_cast<int>(row / kTaps), tap = static_cast<int>(row % kTaps);
    const int c = packed_channel(static_cast<int>(i % g.cout_pad), g.slices);
    out[i] = (c < g.Cout && ci < g.Cin) ? w[(c * g.Cin + ci) * kTaps + tap] : 0.0f;
  }
  for (int c = 0; c < g.cout_pad; ++c) out[total + c] = c < g.Cout ? b[c] : 0.0f;
  return out;
}

// The 8 x 8 accumulators of every slot of one tile: acc[(slot * 8 + p) * 8 + j], slot = pixel_group * S + s,
// in the CUDA kernel's arithmetic order (same chunks, same fma sequence).
void conv_tile_cpu(const Geometry& g, const float* x, const std::vector<float>& wb, int64_t n, int64_t tile,
                   std::vector<float>& acc, std::vector<float>& xs) {
  const int S = g.slices, slots = kPixelGroups * S;
  const int64_t ty = tile / g.tiles_x, tx = tile - ty * g.tiles_x;
  const float* bias_pad = wb.data() + static_cast<int64_t>(g.cin_pad) * kTaps * g.cout_pad;
  acc.assign(static_cast<size_t>(slots) * kPixels * kChannels, 0.0f);
  for (int slot = 0; slot < slots; ++slot)
    for (int p = 0; p < kPixels; ++p)
      for (int j = 0; j < kChannels; ++j) acc[(slot * kPixels + p) * kChannels + j] = bias_pad[(slot % S) * kChannels + j];
  xs.assign(static_cast<size_t>(kCiChunk) * kInRows * kInPitch, 0.0f);
  for (int ci0 = 0; ci0 < g.cin_pad; ci0 += kCiChunk) {
    for (int i = 0; i < kCiChunk * kInRows * kInPitch; ++i) {  // the shared-memory staging, zero outside
      const int ci = i / (kInRows * kInPitch), rem = i % (kInRows * kInPitch);
      const int row = rem / kInPitch, col = rem % kInPitch;
      const int64_t iy = ty * kTileRows + row, ix = tx * kTileCols + col, cig = ci0 + ci;
      xs[i] = (cig < g.Cin && iy < g.H && ix < g.W && col < kInCols) ? x[((n * g.Cin + cig) * g.H + iy) * g.W + ix]
                                                                      : 0.0f;
    }
    const float* ws = wb.data() + static_cast<int64_t>(ci0) * kTaps * g.cout_pad;
    const int cn = static_cast<int>(std::min<int64_t>(kCiChunk, g.Cin - ci0));
    for (int slot = 0; slot < slots; ++slot) {
      const int s = slot % S, pg = slot / S, r = pg / kGroupsPerRow, cg = pg % kGroupsPerRow;
      float* a = acc.data() + static_cast<int64_t>(slot) * kPixels * kChannels;
      for (int ci = 0; ci < cn; ++ci)
        for (int ky = 0; ky < kKernel; ++ky) {
          const float* xr = xs.data() + (ci * kInRows + r + ky) * kInPitch + cg * kPixels;
          for (int kx = 0; kx < kKernel; ++kx) {
            const float* wt = ws + ((ci * kKernel + ky) * kKernel + kx) * g.cout_pad;
            for (int p = 0; p < kPixels; ++p)
              for (int j = 0; j < kChannels; ++j) {
                const float w = wt[((j / 4) * S + s) * 4 + (j % 4)];
                a[p * kChannels + j] = std::fma(xr[p + kx], w, a[p * kChannels + j]);
              }
          }
        }
    }
  }
}

at::Tensor fused_forward_cpu(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias,
                             const at::Tensor& gn_weight, const at::Tensor& gn_bias, int64_t groups, double eps,
                             bool store_conv, int64_t conv_kernel) {
  check_forward_args(x_in, weight, bias, gn_weight, gn_bias, groups);
  check_conv_kernel(conv_kernel);  // the CPU runs the direct float32 decomposition for either kernel
  TORCH_CHECK(x_in.device().is_cpu(), "p92 fused_forward_cpu: expected CPU tensors");
  const at::Tensor x = x_in.contiguous();
  const Geometry g = make_geometry(x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0));
  at::Tensor out = at::empty({g.N, 1, g.OH, g.OW}, x.options());
  if (g.N == 0) return out;
  const at::Tensor wc = weight.contiguous(), bc = bias.contiguous();
  const std::vector<float> wb = pack_weights_cpu(g, wc.data_ptr<float>(), bc.data_ptr<float>());
  const float* xp = x.data_ptr<float>();
  const int S = g.slices, slots = kPixelGroups * S;
  const int64_t P = g.OH * g.OW;
  std::vector<float> partial(static_cast<size_t>(g.N * g.tiles * g.Cout * 2));
  at::Tensor conv = store_conv ? at::empty({g.N, g.Cout, g.OH, g.OW}, x.options()) : at::Tensor();
  float* convp = store_conv ? conv.data_ptr<float>() : nullptr;

  // Stage 1: per tile, per-slot moments merged over the tile's slots; the convolution stored if asked.
  at::parallel_for(0, g.N * g.tiles, 1, [&](int64_t first, int64_t last) {
    std::vector<float> acc, xs;
    std::vector<Moments> tile_moments(static_cast<size_t>(g.cout_pad));
    for (int64_t task = first; task < last; ++task) {
      const int64_t n = task / g.tiles, tile = task % g.tiles;
      const int64_t ty = tile / g.tiles_x, tx = tile - ty * g.tiles_x;
      conv_tile_cpu(g, xp, wb, n, tile, acc, xs);
      std::fill(tile_moments.begin(), tile_moments.end(), Moments{0.0f, 0.0f, 0.0f});
      for (int slot = 0; slot < slots; ++slot) {
        const int s = slot % S, pg = slot / S;
        const int64_t oy = ty * kTileRows + pg / kGroupsPerRow, ox0 = tx * kTileCols + (pg % kGroupsPerRow) * kPixels;
        const int nv = slot_valid_pixels(g, oy, ox0);
        const float* a = acc.data() + static_cast<int64_t>(slot) * kPixels * kChannels;
        for (int j = 0; j < kChannels; ++j) {
          const int c = s * kChannels + j;
          float sum = 0.0f;
          for (int p = 0; p < nv; ++p) sum += a[p * kChannels + j];
          const float mean = nv > 0 ? sum / static_cast<float>(nv) : 0.0f;
          float m2 = 0.0f;
          for (int p = 0; p < nv; ++p) m2 += (a[p * kChannels + j] - mean) * (a[p * kChannels + j] - mean);
          tile_moments[c] = merge_moments(tile_moments[c], Moments{static_cast<float>(nv), mean, m2});
          if (convp != nullptr && c < g.Cout)
            for (int p = 0; p < nv; ++p) convp[((n * g.Cout + c) * g.OH + oy) * g.OW + ox0 + p] = a[p * kChannels + j];
        }
      }
      for (int64_t c = 0; c < g.Cout; ++c) {
        partial[((n * g.tiles + tile) * g.Cout + c) * 2] = tile_moments[c].mean;
        partial[((n * g.tiles + tile) * g.Cout + c) * 2 + 1] = tile_moments[c].m2;
      }
    }
  });

  // Stage 2: group statistics in double, folded into per-channel scale and shift.
  const int64_t cpg = g.Cout / groups;
  std::vector<float> scale(static_cast<size_t>(g.N * g.Cout)), shift(static_cast<size_t>(g.N * g.Cout));
  const at::Tensor gwc = gn_weight.contiguous(), gbc = gn_bias.contiguous();
  const float* gamma = gwc.data_ptr<float>();
  const float* beta = gbc.data_ptr<float>();
  at::parallel_for(0, g.N * groups, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t n = task / groups, grp = task % groups;
      const double total = static_cast<double>(cpg) * static_cast<double>(P);
      double s1 = 0;
      for (int64_t e = 0; e < g.tiles * cpg; ++e) {
        const int64_t t = e / cpg, c = grp * cpg + e % cpg;
        s1 += static_cast<double>(tile_pixel_count(g, t)) * partial[((n * g.tiles + t) * g.Cout + c) * 2];
      }
      const double mean = s1 / total;
      double s2 = 0;
      for (int64_t e = 0; e < g.tiles * cpg; ++e) {
        const int64_t t = e / cpg, c = grp * cpg + e % cpg;
        const double d = partial[((n * g.tiles + t) * g.Cout + c) * 2] - mean;
        s2 += partial[((n * g.tiles + t) * g.Cout + c) * 2 + 1] + static_cast<double>(tile_pixel_count(g, t)) * d * d;
      }
      const double rstd = 1.0 / std::sqrt(s2 / total + eps);
      for (int64_t c = grp * cpg; c < (grp + 1) * cpg; ++c) {
        const double sc = rstd * gamma[c];
        scale[n * g.Cout + c] = static_cast<float>(sc);
        shift[n * g.Cout + c] = static_cast<float>(beta[c] - mean * sc);
      }
    }
  });

  // Stage 3: the epilogue and the logsumexp over channels.
  float* outp = out.data_ptr<float>();
  if (store_conv) {
    at::parallel_for(0, g.N, 1, [&](int64_t first, int64_t last) {
      for (int64_t n = first; n < last; ++n)
        for (int64_t q = 0; q < P; ++q) {
          float m = -std::numeric_limits<float>::infinity(), s = 0.0f;
          for (int64_t c = 0; c < g.Cout; ++c)
            lse_push(m, s, residual_value(convp[(n * g.Cout + c) * P + q], scale[n * g.Cout + c], shift[n * g.Cout + c]));
          outp[n * P + q] = m + std::log(s);
        }
    });
  } else {
    at::parallel_for(0, g.N * g.tiles, 1, [&](int64_t first, int64_t last) {
      std::vector<float> acc, xs, res(static_cast<size_t>(S) * kChannels);
      for (int64_t task = first; task < last; ++task) {
        const int64_t n = task / g.tiles, tile = task % g.tiles;
        const int64_t ty = tile / g.tiles_x, tx = tile - ty * g.tiles_x;
        conv_tile_cpu(g, xp, wb, n, tile, acc, xs);
        for (int pg = 0; pg < kPixelGroups; ++pg) {
          const int64_t oy = ty * kTileRows + pg / kGroupsPerRow, ox0 = tx * kTileCols + (pg % kGroupsPerRow) * kPixels;
          const int nv = slot_valid_pixels(g, oy, ox0);
          for (int p = 0; p < nv; ++p) {
            float m = -std::numeric_limits<float>::infinity();
            for (int s = 0; s < S; ++s)
              for (int j = 0; j < kChannels; ++j) {
                const int64_t c = s * kChannels + j;
                const float v = acc[((static_cast<int64_t>(pg) * S + s) * kPixels + p) * kChannels + j];
                const float r = c < g.Cout ? residual_value(v, scale[n * g.Cout + c], shift[n * g.Cout + c])
                                           : -std::numeric_limits<float>::infinity();
                res[s * kChannels + j] = r;
                m = std::fmax(m, r);
              }
            float sum = 0.0f;
            for (int i = 0; i < S * kChannels; ++i) sum += fast_exp(res[i] - m);
            outp[(n * g.OH + oy) * g.OW + ox0 + p] = m + std::log(sum);
          }
        }
      }
    });
  }
  return out;
}

}  // namespace p92

TORCH_LIBRARY(GN_NAMESPACE, m) {
  m.def("@FUSED_SCHEMA@");
}

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CPU, m) {
  m.impl("fused_forward", &p92::fused_forward_cpu);
}
""".replace("@FUSED_SCHEMA@", FUSED_SCHEMA)
