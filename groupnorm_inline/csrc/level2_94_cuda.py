"""CUDA source of KernelBench level 2 #94: the operand split for the tensor-core GEMMs and the fused
epilogue (both described in `level2_94_cpu`).

Epilogue layout: the GEMM result is (M, N) row-major and a GroupNorm group is C/G = cpg consecutive
columns of one row. A *team* of T lanes (T a power of two <= 32, teams aligned inside a warp) owns one
(row, group) task: lane l holds the vectors l, l + T, l + 2T, ... of the group (VEC = 4 floats each when
everything is 16-byte aligned and cpg % 4 == 0, else single floats) in registers, so the group's values
are read from memory once and written once. The mean and then the centred sum of squares are reduced
across the team with xor shuffles (offsets T/2 .. 1 never leave an aligned team). For #94 (cpg = 32)
T = 8 and each lane holds one float4: four tasks per warp, 128 contiguous bytes per task.
Groups wider than 32 * 8 vectors use one CTA per task that sweeps the group three times (from L2).
"""

from .common_cuda import COMMON_CUDA_HEADER
from .level2_94_cpu import P94_COMMON_TEMPLATE

P94_CUDA_TEMPLATE = COMMON_CUDA_HEADER + P94_COMMON_TEMPLATE + r"""
#include <cuda_fp16.h>
#include <climits>

namespace p94 {

constexpr int kThreads = 256;
constexpr int kMaxPerLane = 8;  // vectors a lane holds in registers (team kernel)

// The GEMM results summed by the epilogue, passed by value (kernel parameter space).
struct PartList {
  const float* ptr[kMaxParts];
  float scale[kMaxParts];
  int count;
};

__device__ __forceinline__ float team_sum(float v, int team) {
  for (int offset = team >> 1; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <int VEC>
__device__ __forceinline__ void load_floats(const float* __restrict__ p, float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = p[k];
  }
}

template <int VEC>
__device__ __forceinline__ void store_floats(float* __restrict__ p, const float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[k] = v[k];
  }
}

// acc = sum_p scale_p * part_p[off .. off + VEC); the loop is unrolled over the fixed maximum so that the
// parameter array is indexed with constants (no copy to local memory).
template <int VEC>
__device__ __forceinline__ void sum_parts(const PartList& parts, int64_t off, float (&acc)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxParts; ++p) {
    if (p < parts.count) {
      float v[VEC];
      load_floats<VEC>(parts.ptr[p] + off, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] = fmaf(parts.scale[p], v[k], acc[k]);
    }
  }
}

// Activation of VEC consecutive columns starting at `col` of row `row`.
template <int VEC>
__device__ __forceinline__ void activations(const PartList& parts, const float* __restrict__ col_scale,
                                            const float* __restrict__ linear_bias, const float* __restrict__ bias,
                                            bool row_scaled, float rs, int64_t row, int64_t N, int64_t col,
                                            float (&u)[VEC]) {
  float acc[VEC], lb[VEC], b[VEC];
  sum_parts<VEC>(parts, row * N + col, acc);
  load_floats<VEC>(linear_bias + col, lb);
  load_floats<VEC>(bias + col, b);
  float cs[VEC];
  if (col_scale != nullptr) load_floats<VEC>(col_scale + col, cs);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float a = acc[k];
    if (row_scaled) a = a * rs;
    if (col_scale != nullptr) a = a * cs[k];
    u[k] = activation(a, lb[k], b[k]);
  }
}

// Team kernel: one team of `team` lanes per (row, group) task, PER_LANE vectors of VEC floats per lane.
// parts: PartList of (M, N); row_scale: (M,) or null; col_scale, linear_bias, bias, gn_w, gn_b: (N,)
// (col_scale may be null); y: (M, N). tasks = M * G.
template <int VEC, int PER_LANE>
__global__ void __launch_bounds__(kThreads) epilogue_team_kernel(
    PartList parts, const float* __restrict__ row_scale, const float* __restrict__ col_scale,
    const float* __restrict__ linear_bias, const float* __restrict__ bias, const float* __restrict__ gn_w,
    const float* __restrict__ gn_b, float* __restrict__ y, int64_t tasks, int64_t N, int64_t G, int64_t cpg,
    int team, float eps) {
  const int64_t gtid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t task = gtid / team;
  const int lane = static_cast<int>(threadIdx.x) & (team - 1);
  const bool task_ok = task < tasks;  // lanes past the end still take part in the shuffles
  const int64_t row = task_ok ? task / G : 0;
  const int64_t c0 = task_ok ? (task - row * G) * cpg : 0;
  const int64_t nvec = cpg / VEC;
  const bool row_scaled = row_scale != nullptr;
  const float rs = (task_ok && row_scaled) ? row_scale[row] : 1.0f;

  float u[PER_LANE][VEC];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int64_t vi = lane + static_cast<int64_t>(j) * team;
    if (task_ok && vi < nvec) {
      activations<VEC>(parts, col_scale, linear_bias, bias, row_scaled, rs, row, N, c0 + vi * VEC, u[j]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum += u[j][k];
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) u[j][k] = 0.0f;
    }
  }
  const float count = static_cast<float>(cpg);
  const float mean = team_sum(sum, team) / count;
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int64_t vi = lane + static_cast<int64_t>(j) * team;
    if (task_ok && vi < nvec) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = u[j][k] - mean;
        sq = fmaf(d, d, sq);
      }
    }
  }
  const float var = team_sum(sq, team) / count;
  const float rstd = 1.0f / sqrtf(var + eps);
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int64_t vi = lane + static_cast<int64_t>(j) * team;
    if (task_ok && vi < nvec) {
      const int64_t col = c0 + vi * VEC;
      float w[VEC], b[VEC], out[VEC];
      load_floats<VEC>(gn_w + col, w);
      load_floats<VEC>(gn_b + col, b);
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[k] = fmaf((u[j][k] - mean) * rstd, w[k], b[k]);
      store_floats<VEC>(y + row * N + col, out);
    }
  }
}

// Wide groups (more than 32 * kMaxPerLane vectors): one CTA per task, three sweeps over the group
// (mean, centred sum of squares, output), recomputing the activations from the parts each time.
__global__ void __launch_bounds__(kThreads) epilogue_block_kernel(
    PartList parts, const float* __restrict__ row_scale, const float* __restrict__ col_scale,
    const float* __restrict__ linear_bias, const float* __restrict__ bias, const float* __restrict__ gn_w,
    const float* __restrict__ gn_b, float* __restrict__ y, int64_t N, int64_t G, int64_t cpg, float eps) {
  __shared__ float scratch[64];
  const int64_t task = blockIdx.x;
  const int64_t row = task / G, c0 = (task - row * G) * cpg;
  const bool row_scaled = row_scale != nullptr;
  const float rs = row_scaled ? row_scale[row] : 1.0f;
  float sum = 0.0f, unused = 0.0f;
  for (int64_t i = threadIdx.x; i < cpg; i += blockDim.x) {
    float u[1];
    activations<1>(parts, col_scale, linear_bias, bias, row_scaled, rs, row, N, c0 + i, u);
    sum += u[0];
  }
  gn_inline::block_sum2(sum, unused, scratch);
  const float count = static_cast<float>(cpg);
  const float mean = sum / count;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < cpg; i += blockDim.x) {
    float u[1];
    activations<1>(parts, col_scale, linear_bias, bias, row_scaled, rs, row, N, c0 + i, u);
    const float d = u[0] - mean;
    sq = fmaf(d, d, sq);
  }
  unused = 0.0f;
  gn_inline::block_sum2(sq, unused, scratch);
  const float rstd = 1.0f / sqrtf(sq / count + eps);
  for (int64_t i = threadIdx.x; i < cpg; i += blockDim.x) {
    float u[1];
    activations<1>(parts, col_scale, linear_bias, bias, row_scaled, rs, row, N, c0 + i, u);
    y[row * N + c0 + i] = fmaf((u[0] - mean) * rstd, gn_w[c0 + i], gn_b[c0 + i]);
  }
}

// Largest value over the CTA (inputs are >= 0); every thread gets it. scratch: 32 floats.
__device__ __forceinline__ float block_max_nonnegative(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ uint32_t half_bits(float x) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(x)));
}

// One CTA per row of src (R, K). FORMAT kFormatTF32: cat is float32 (R, 2K); kFormatFP16: cat is float16
// bits (R, 2K). The high part goes to columns [hi_at, hi_at + K), the low part to [lo_at, lo_at + K).
template <int FORMAT, int VEC>
__global__ void __launch_bounds__(kThreads) split_rows_kernel(const float* __restrict__ src, void* __restrict__ cat,
                                                              float* __restrict__ scale, int64_t K, int64_t hi_at,
                                                              int64_t lo_at) {
  const int64_t r = blockIdx.x;
  const float* x = src + r * K;
  float inv = 1.0f;
  if constexpr (FORMAT == kFormatFP16) {
    __shared__ float scratch[32];
    float amax = 0.0f;
    for (int64_t k = static_cast<int64_t>(threadIdx.x) * VEC; k < K; k += static_cast<int64_t>(blockDim.x) * VEC) {
      float v[VEC];
      load_floats<VEC>(x + k, v);
#pragma unroll
      for (int i = 0; i < VEC; ++i) amax = fmaxf(amax, fabsf(v[i]));
    }
    const int e = row_exponent(block_max_nonnegative(amax, scratch));
    inv = ldexpf(1.0f, -e);
    if (threadIdx.x == 0) scale[r] = ldexpf(1.0f, e);
  } else {
    if (threadIdx.x == 0) scale[r] = 1.0f;
  }
  for (int64_t k = static_cast<int64_t>(threadIdx.x) * VEC; k < K; k += static_cast<int64_t>(blockDim.x) * VEC) {
    float v[VEC];
    load_floats<VEC>(x + k, v);
    if constexpr (FORMAT == kFormatTF32) {
      float hi[VEC], lo[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        hi[i] = round_to_tf32(v[i]);
        lo[i] = isfinite(v[i]) ? round_to_tf32(v[i] - hi[i]) : 0.0f;
      }
      float* out = static_cast<float*>(cat) + r * 2 * K;
      if constexpr (VEC == 4) {
        *reinterpret_cast<float4*>(out + hi_at + k) = make_float4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<float4*>(out + lo_at + k) = make_float4(lo[0], lo[1], lo[2], lo[3]);
      } else {
        out[hi_at + k] = hi[0];
        out[lo_at + k] = lo[0];
      }
    } else {
      uint32_t hi[VEC], lo[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float xs = v[i] * inv;
        const __half h = __float2half_rn(xs);
        const float rest = xs - __half2float(h);  // exact: h is xs rounded to 11 significant bits
        hi[i] = static_cast<uint32_t>(__half_as_ushort(h));
        lo[i] = half_bits(isfinite(xs) ? rest * kLowPartScale : 0.0f);
      }
      uint16_t* out = static_cast<uint16_t*>(cat) + r * 2 * K;
      if constexpr (VEC == 4) {
        *reinterpret_cast<uint2*>(out + hi_at + k) = make_uint2(hi[0] | (hi[1] << 16), hi[2] | (hi[3] << 16));
        *reinterpret_cast<uint2*>(out + lo_at + k) = make_uint2(lo[0] | (lo[1] << 16), lo[2] | (lo[3] << 16));
      } else {
        out[hi_at + k] = static_cast<uint16_t>(hi[0]);
        out[lo_at + k] = static_cast<uint16_t>(lo[0]);
      }
    }
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int next_pow2(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::tuple<at::Tensor, at::Tensor> split_rows_cuda(const at::Tensor& src, int64_t format, bool lo_first) {
  TORCH_CHECK(src.is_cuda(), "p94 split_rows_cuda: expected a CUDA tensor");
  check_split_args(src, format);
  const c10::cuda::CUDAGuard guard(src.device());
  const int64_t R = src.size(0), K = src.size(1);
  TORCH_CHECK(R <= INT_MAX, gn_inline_msg::cat("p94 split_rows: too many rows (", R, ")"));
  at::Tensor cat = at::empty({R, 2 * K}, src.options().dtype(format == kFormatTF32 ? at::kFloat : at::kHalf));
  at::Tensor scale = at::empty({R}, src.options());
  if (R == 0) return {cat, scale};
  const int64_t hi_at = lo_first ? K : 0, lo_at = lo_first ? 0 : K;
  const bool vec4 = K % 4 == 0 && aligned16(src.data_ptr()) && aligned16(cat.data_ptr());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(src.get_device()).stream();
  const dim3 grid(static_cast<unsigned>(R));
  const float* x = src.data_ptr<float>();
  void* out = cat.data_ptr();
  float* s = scale.data_ptr<float>();
  if (format == kFormatTF32) {
    if (vec4) split_rows_kernel<kFormatTF32, 4><<<grid, kThreads, 0, stream>>>(x, out, s, K, hi_at, lo_at);
    else split_rows_kernel<kFormatTF32, 1><<<grid, kThreads, 0, stream>>>(x, out, s, K, hi_at, lo_at);
  } else {
    if (vec4) split_rows_kernel<kFormatFP16, 4><<<grid, kThreads, 0, stream>>>(x, out, s, K, hi_at, lo_at);
    else split_rows_kernel<kFormatFP16, 1><<<grid, kThreads, 0, stream>>>(x, out, s, K, hi_at, lo_at);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {cat, scale};
}

template <int VEC, int PER_LANE>
void launch_team(const PartList& parts, const float* rs, const float* cs, const float* lb, const float* b,
                 const float* gw, const float* gb, float* y, int64_t tasks, int64_t N, int64_t G, int64_t cpg,
                 int team, float eps, cudaStream_t stream) {
  const int64_t blocks = (tasks * team + kThreads - 1) / kThreads;
  TORCH_CHECK(blocks <= INT_MAX, "p94 epilogue: problem too large for one launch");
  epilogue_team_kernel<VEC, PER_LANE><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      parts, rs, cs, lb, b, gw, gb, y, tasks, N, G, cpg, team, eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int VEC>
void dispatch_per_lane(int per_lane, const PartList& parts, const float* rs, const float* cs, const float* lb,
                       const float* b, const float* gw, const float* gb, float* y, int64_t tasks, int64_t N,
                       int64_t G, int64_t cpg, int team, float eps, cudaStream_t stream) {
  switch (per_lane) {
    case 1: launch_team<VEC, 1>(parts, rs, cs, lb, b, gw, gb, y, tasks, N, G, cpg, team, eps, stream); break;
    case 2: launch_team<VEC, 2>(parts, rs, cs, lb, b, gw, gb, y, tasks, N, G, cpg, team, eps, stream); break;
    case 4: launch_team<VEC, 4>(parts, rs, cs, lb, b, gw, gb, y, tasks, N, G, cpg, team, eps, stream); break;
    default: launch_team<VEC, kMaxPerLane>(parts, rs, cs, lb, b, gw, gb, y, tasks, N, G, cpg, team, eps, stream);
  }
}

at::Tensor epilogue_cuda(at::TensorList parts, at::ArrayRef<double> part_scales,
                         const std::optional<at::Tensor>& row_scale, const std::optional<at::Tensor>& col_scale,
                         const at::Tensor& linear_bias, const at::Tensor& bias, const at::Tensor& gn_weight,
                         const at::Tensor& gn_bias, int64_t num_groups, double eps) {
  check_epilogue_args(parts, part_scales, row_scale, col_scale, linear_bias, bias, gn_weight, gn_bias, num_groups);
  TORCH_CHECK(parts[0].is_cuda(), "p94 epilogue_cuda: expected CUDA tensors");
  const c10::cuda::CUDAGuard guard(parts[0].device());
  const int64_t M = parts[0].size(0), N = parts[0].size(1), G = num_groups, cpg = N / G;
  at::Tensor y = at::empty({M, N}, parts[0].options());
  if (M == 0 || N == 0) return y;
  PartList list{};
  bool aligned = cpg % 4 == 0 && aligned16(y.data_ptr());
  for (size_t p = 0; p < parts.size(); ++p) {
    list.ptr[p] = parts[p].data_ptr<float>();
    list.scale[p] = static_cast<float>(part_scales[p]);
    aligned = aligned && aligned16(list.ptr[p]);
  }
  list.count = static_cast<int>(parts.size());
  const float* rs = optional_data(row_scale);
  const float* cs = optional_data(col_scale);
  const float* lb = linear_bias.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  const float* gw = gn_weight.data_ptr<float>();
  const float* gb = gn_bias.data_ptr<float>();
  aligned = aligned && aligned16(lb) && aligned16(b) && aligned16(gw) && aligned16(gb) && (cs == nullptr || aligned16(cs));
  float* yp = y.data_ptr<float>();
  const float feps = static_cast<float>(eps);
  const int64_t tasks = M * G;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(parts[0].get_device()).stream();
  const int vec = aligned ? 4 : 1;
  const int64_t nvec = cpg / vec;
  if (nvec <= 32 * kMaxPerLane) {
    const int team = nvec <= 32 ? next_pow2(nvec) : 32;
    const int per_lane = nvec <= 32 ? 1 : next_pow2((nvec + 31) / 32);
    if (vec == 4) dispatch_per_lane<4>(per_lane, list, rs, cs, lb, b, gw, gb, yp, tasks, N, G, cpg, team, feps, stream);
    else dispatch_per_lane<1>(per_lane, list, rs, cs, lb, b, gw, gb, yp, tasks, N, G, cpg, team, feps, stream);
  } else {
    TORCH_CHECK(tasks <= INT_MAX, "p94 epilogue: problem too large for one launch");
    epilogue_block_kernel<<<static_cast<unsigned>(tasks), kThreads, 0, stream>>>(list, rs, cs, lb, b, gw, gb, yp, N,
                                                                                 G, cpg, feps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

}  // namespace p94

TORCH_LIBRARY_IMPL(GN_NAMESPACE, CUDA, m) {
  m.impl("split_rows", &p94::split_rows_cuda);
  m.impl("epilogue", &p94::epilogue_cuda);
}
"""
