"""Which tile should the family's direct convolution (csrc/conv3d_direct.py) use for each shape it is built for, and
does it beat cuDNN there? Builds one small extension holding the kernel for every (CI, CO, KD, K, CT, P) of
VARIANTS (CT output channels x P outputs along W per thread) and, per family problem's real convolution:

  - checks every variant against a float64 convolution of the first samples (max |diff| / the output's max |value|;
    the outputs start as NaN, so an element a variant never writes fails) and against cuDNN in float32;
  - times every variant and cuDNN's convolution without bias (PyTorch's default TF32 setting: for these
    few-channel inputs cuDNN's NCHW algorithms compute full float32 anyway), CUDA events, L2 flushed; reports ms
    and TFMA/s (multiply-adds of the convolution / time).

    python benchmarks/conv_direct_variants.py            # log to $OUT/conv_direct_variants.txt when OUT is set

The package's choice is the first variant listed per shape (CONV_DIRECT_SHAPES); the others are candidates.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.utils.deterministic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from report import save_log  # noqa: E402
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

from groupnorm_inline.csrc.common_cuda import COMMON_CUDA_HEADER  # noqa: E402
from groupnorm_inline.csrc.conv3d_direct import CONV_DIRECT_KERNEL, CONV_DIRECT_SHAPES  # noqa: E402
from groupnorm_inline.csrc.message import MESSAGE_HEADER  # noqa: E402
from groupnorm_inline.jit import ExtensionSpec, load  # noqa: E402

# problem: (input shape, weight shape (CO, CI, KD, K, K)); Conv2d problems as their depth-1 3-D form.
PROBLEMS = {
    "2/21": ((128, 8, 1, 256, 256), (32, 8, 1, 3, 3)),
    "2/85": ((128, 8, 1, 128, 128), (64, 8, 1, 3, 3)),
    "2/23": ((128, 3, 24, 32, 32), (24, 3, 3, 3, 3)),
    "2/27": ((1024, 3, 16, 32, 32), (16, 3, 4, 4, 4)),
    "2/83": ((128, 3, 16, 64, 64), (16, 3, 3, 3, 3)),
}
# (CT, P) candidates per (CI, CO, KD, K); the package's own choice is added first.
CANDIDATES = {
    (8, 32, 1, 3): ((32, 4), (8, 4), (16, 2)),
    (8, 64, 1, 3): ((32, 4), (8, 4), (16, 2)),
    (3, 24, 3, 3): ((24, 4), (12, 4), (8, 4), (12, 2)),
    (3, 16, 4, 4): ((8, 4), (16, 2)),
    (3, 16, 3, 3): ((8, 4), (16, 2)),
}
PLAN = TimingPlan(warmup=3, min_iters=10, max_iters=30, target_s=0.3)
LOG: list[str] = []


def log(line: str = "") -> None:
    print(line, flush=True)
    LOG.append(line)


def variants() -> list[tuple[int, ...]]:
    """Every (CI, CO, KD, K, CT, P) to build: the package's choices first, then the candidates."""
    chosen = list(CONV_DIRECT_SHAPES)
    extra = [shape + tile for shape, tiles in CANDIDATES.items() for tile in tiles if shape + tile not in chosen]
    return chosen + extra


def build(table: list[tuple[int, ...]]):
    cases = "\n".join(f"    case {i}: ok = try_conv_direct<{', '.join(map(str, v))}>(x, w, y, stream); break;"
                      for i, v in enumerate(table))
    cuda = MESSAGE_HEADER + COMMON_CUDA_HEADER + "#include <climits>\n#include <ATen/ATen.h>\n#include <torch/library.h>\n" \
        + CONV_DIRECT_KERNEL + r"""
namespace gn_conv {
at::Tensor run_variant(const at::Tensor& x, const at::Tensor& w, int64_t variant) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && w.is_contiguous() && x.scalar_type() == at::kFloat);
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  at::Tensor y;
  bool ok = false;
  switch (variant) {
@CASES@
    default: break;
  }
  TORCH_CHECK(ok, "variant ", variant, " does not take these shapes");
  return y;
}
}  // namespace gn_conv
TORCH_LIBRARY_IMPL(gn_conv_variants, CUDA, m) { m.impl("run", &gn_conv::run_variant); }
""".replace("@CASES@", cases)
    cpp = "#include <torch/library.h>\nTORCH_LIBRARY(gn_conv_variants, m) { m.def(\"run(Tensor x, Tensor w, int variant) -> Tensor\"); }\n"
    load(ExtensionSpec(name="groupnorm_inline_conv_variants", cpp_sources=(cpp,), cuda_sources=(cuda,),
                       description=f"{len(table)} direct-convolution variants"))
    return torch.ops.gn_conv_variants.run


def main() -> int:
    if not torch.cuda.is_available():
        print("conv_direct_variants: needs a CUDA device")
        return 0
    table = variants()
    run = build(table)
    flusher = L2Flusher(torch.device("cuda"))
    log(f"# direct convolution variants, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    log("variant (CI, CO, KD, K, CT, P); err64 = max |y - float64| / max |float64| over the first 4 samples; "
        "errdnn = the same against cuDNN float32 over every sample")
    for key, (xs, ws) in PROBLEMS.items():
        gen = torch.Generator(device="cuda").manual_seed(5)
        x = torch.rand(xs, device="cuda", generator=gen)
        bound = 1.0 / math.sqrt(ws[1] * ws[2] * ws[3] * ws[4])  # nn.Conv's default init range
        w = (torch.rand(ws, device="cuda", generator=gen) * 2 - 1) * bound
        ref64 = torch.nn.functional.conv3d(x[:4].double(), w.double())
        two_d = ws[2] == 1
        x2, w2 = (x.squeeze(2), w.squeeze(2)) if two_d else (x, w)
        dnn = (lambda: torch.nn.functional.conv2d(x2, w2)) if two_d else (lambda: torch.nn.functional.conv3d(x2, w2))
        y_dnn = dnn()
        fma = y_dnn.numel() * ws[1] * ws[2] * ws[3] * ws[4]
        t = time_cuda(dnn, PLAN, flusher).median_ms
        err = (y_dnn[:4].double() - ref64.squeeze(2) if two_d else y_dnn[:4].double() - ref64).abs().max().item()
        log(f"\n## {key}: x {xs}, weight {ws}, {fma / 1e9:.1f} G multiply-adds")
        log(f"  cuDNN              {t:8.3f} ms  {fma / t / 1e9:6.2f} TFMA/s  err64 {err / ref64.abs().max().item():.2e}")
        for i, v in enumerate(table):
            if v[:4] != (ws[1], ws[0], ws[2], ws[3]):
                continue
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.utils.deterministic.fill_uninitialized_memory = True  # outputs start as NaN
            y = run(x, w, i)
            torch.use_deterministic_algorithms(False)
            torch.utils.deterministic.fill_uninitialized_memory = False
            err64 = (y[:4].double() - ref64).abs().max().item() / ref64.abs().max().item()
            errdnn = (y.squeeze(2) if two_d else y).sub(y_dnn).abs().max().item() / y_dnn.abs().max().item()
            tv = time_cuda(lambda: run(x, w, i), PLAN, flusher).median_ms
            mark = " (package)" if v in CONV_DIRECT_SHAPES else ""
            ok = "ok" if math.isfinite(err64) and err64 < 1e-5 and math.isfinite(errdnn) and errdnn < 1e-5 else "FAIL"
            log(f"  {str(v):18} {tv:8.3f} ms  {fma / tv / 1e9:6.2f} TFMA/s  err64 {err64:.2e}  errdnn {errdnn:.2e}  "
                f"{ok}  {t / tv:.2f}x cuDNN{mark}")
        del x, y_dnn, ref64
        torch.cuda.empty_cache()
    save_log("conv_direct_variants.txt", LOG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
