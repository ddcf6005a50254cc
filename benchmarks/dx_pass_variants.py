"""The backward's grad-input pass in isolation: which CTA order, store kind and CTA size stream fastest.

    python benchmarks/dx_pass_variants.py [--shapes 56,64,512,512 16,64,256,256] [--reps 15]

The row path's last step reads x and dy and writes dx = a * dy + coef_x * (x - m) + coef_1 with per-row constants;
it is a pure stream (3 bytes moved per byte of x), so its time is set by how the loads and stores meet DRAM.
This builds a small stand-alone extension with that loop in a few variants (CTAs walked from the last or the
first, streaming `st.global.cs` or default stores, 4 or 8 vectors per thread) and times them interleaved call by
call against `torch.compile`'s fused elementwise kernel of the same formula and a plain copy of x, with CUDA
events (the tensors are GBs: no L2 flush needed). Each variant's output is checked against the compiled one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from groupnorm_inline.jit.build import ExtensionSpec, load  # noqa: E402

CUDA_SOURCE = r"""
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

struct alignas(16) F4 { float v[4]; };

// x, dy, dx: (rows, HW) float32, HW a multiple of 4; k: (rows, 4) = (a, mean, coef_x, coef_1).
template <int UNROLL, bool REVERSE, bool STREAM>
__global__ void __launch_bounds__(256) dx_pass(const float* __restrict__ x, const float* __restrict__ dy,
                                               float* __restrict__ dx, const float4* __restrict__ k, int64_t HW,
                                               int64_t splits) {
  const int64_t cta = REVERSE ? static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x : blockIdx.x;
  const int64_t row = cta / splits;
  const int64_t chunk = 256 * 4 * UNROLL;
  const int64_t begin = (cta - row * splits) * chunk;
  const float4 c = k[row];
  const int64_t base = row * HW;
  F4 xv[UNROLL], gv[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t j = begin + (static_cast<int64_t>(u) * 256 + threadIdx.x) * 4;
    if (j < HW) {
      xv[u] = *reinterpret_cast<const F4*>(x + base + j);
      gv[u] = *reinterpret_cast<const F4*>(dy + base + j);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t j = begin + (static_cast<int64_t>(u) * 256 + threadIdx.x) * 4;
    if (j >= HW) continue;
    F4 o;
#pragma unroll
    for (int e = 0; e < 4; ++e) o.v[e] = c.x * gv[u].v[e] + c.z * (xv[u].v[e] - c.y) + c.w;
    if constexpr (STREAM) __stcs(reinterpret_cast<float4*>(dx + base + j), *reinterpret_cast<const float4*>(&o));
    else *reinterpret_cast<F4*>(dx + base + j) = o;
  }
}

template <int UNROLL, bool REVERSE, bool STREAM>
void run(const at::Tensor& x, const at::Tensor& dy, at::Tensor& dx, const at::Tensor& k) {
  const int64_t rows = k.size(0), HW = x.numel() / rows;
  const int64_t splits = (HW + 256 * 4 * UNROLL - 1) / (256 * 4 * UNROLL);
  dx_pass<UNROLL, REVERSE, STREAM><<<static_cast<unsigned>(rows * splits), 256, 0,
                                     c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), dy.data_ptr<float>(), dx.data_ptr<float>(),
      reinterpret_cast<const float4*>(k.data_ptr<float>()), HW, splits);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void dx_variant(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& dx_out, const at::Tensor& k,
                int64_t variant) {
  at::Tensor dx = dx_out;
  switch (variant) {
    case 0: run<4, true, true>(x, dy, dx, k); break;    // the package's choice
    case 1: run<4, false, true>(x, dy, dx, k); break;
    case 2: run<4, true, false>(x, dy, dx, k); break;
    case 3: run<4, false, false>(x, dy, dx, k); break;
    case 4: run<8, true, true>(x, dy, dx, k); break;
    case 5: run<2, true, true>(x, dy, dx, k); break;
    default: TORCH_CHECK(false, "dx_variant: unknown variant ", variant);
  }
}
TORCH_LIBRARY_IMPL(gn_dx_variants, CUDA, m) { m.impl("run", &dx_variant); }
"""
CPP_SOURCE = ('#include <torch/library.h>\nTORCH_LIBRARY(gn_dx_variants, m) '
              '{ m.def("run(Tensor x, Tensor dy, Tensor(a!) dx, Tensor k, int variant) -> ()"); }\n')
VARIANTS = {0: "reverse, .cs stores, 4 vec (ours)", 1: "forward, .cs stores, 4 vec", 2: "reverse, default stores",
            3: "forward, default stores", 4: "reverse, .cs, 8 vec", 5: "reverse, .cs, 2 vec"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["56,64,512,512", "16,64,256,256", "128,64,126,128"])
    parser.add_argument("--reps", type=int, default=24)
    args = parser.parse_args()
    load(ExtensionSpec(name="groupnorm_inline_dx_variants", cpp_sources=(CPP_SOURCE,), cuda_sources=(CUDA_SOURCE,),
                       description=f"{len(VARIANTS)} grad-input pass variants"))
    run = torch.ops.gn_dx_variants.run
    print(f"# dx pass variants, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for spec in args.shapes:
        shape = tuple(int(v) for v in spec.split(","))
        rows = shape[0] * shape[1]
        x = torch.randn(shape, device="cuda")
        dy = torch.randn(shape, device="cuda")
        k = torch.randn(rows, 4, device="cuda")
        a, m, cx, c1 = (k[:, i].view(shape[0], shape[1], 1, 1) for i in range(4))

        def compiled_dx(x, dy, a, m, cx, c1):
            return a * dy + cx * (x - m) + c1

        fn = torch.compile(compiled_dx)
        ref = fn(x, dy, a, m, cx, c1)
        dx = torch.empty_like(x)
        for v in VARIANTS:
            dx.fill_(float("nan"))
            run(x, dy, dx, k, v)
            torch.testing.assert_close(dx, ref, rtol=1e-5, atol=1e-5)
        calls = {name: (lambda v=v: run(x, dy, dx, k, v)) for v, name in VARIANTS.items()}
        calls["torch.compile elementwise"] = lambda: fn(x, dy, a, m, cx, c1)
        calls["copy of x (2 bytes moved per byte)"] = lambda: dx.copy_(x)
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(3):
            for call in calls.values():
                call()
        names = list(calls)
        for rep in range(args.reps):  # the order rotates every round: no variant always runs first
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                call = calls[name]
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
        gb = x.numel() * 4 / 1e9
        print(f"{shape}  float32  {gb:.2f} GB per tensor")
        for name, ts in times.items():
            med = statistics.median(ts)
            moved = 2 * gb if name.startswith("copy") else 3 * gb
            print(f"  {name:38s} {med * 1000:9.1f} us  {moved / med:6.2f} TB/s")
        del x, dy, dx, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
