"""A second Python process for test_jit.py, and the tiny extensions its tests build.

    python jit_worker.py NAMESPACE CACHE_DIR [--cache-var GROUPNORM_INLINE_CACHE_DIR|TORCH_EXTENSIONS_DIR]

imports the package (from the test run's own cache, as any user process would), writes a marker line to
stderr, points the cache variable at CACHE_DIR, loads the tiny extension of NAMESPACE (building it if no
finished build is there) and prints `torch.ops.<NAMESPACE>.times_two(21)`. Everything the JIT layer says
about the tiny extension is on stderr after the marker.
"""

from __future__ import annotations

import argparse
import os
import sys

# One operator, no tensors: the smallest TORCH_LIBRARY a build can produce (~30 s of one core, almost all of
# it parsing torch/extension.h, which load_inline always includes).
TINY_SOURCE = r"""
#include <torch/library.h>

namespace {
int64_t times_two(int64_t v) { return 2 * v; }
}  // namespace

TORCH_LIBRARY(@NAMESPACE@, m) {
  m.def("times_two(int v) -> int", &times_two);
}
"""

# A C++ syntax error on a line that names the namespace, so the test can find the compiler quoting it.
BROKEN_LINE = "int @NAMESPACE@_syntax_error( { return 0; }\n"

# Only planned, never compiled in the tests: a CUDA source makes the plan depend on the toolkit and archs.
TINY_CUDA_SOURCE = "__global__ void @NAMESPACE@_kernel(float* out) { out[threadIdx.x] = 2.0f; }\n"

MARKER = "jit_worker: package imported"


def tiny_spec(namespace: str, broken: bool = False, with_cuda_source: bool = False):
    """An ExtensionSpec registering `torch.ops.<namespace>.times_two`; `namespace` must be unique per build
    (a TORCH_LIBRARY namespace can be defined once per process)."""
    from groupnorm_inline.jit import ExtensionSpec

    source = TINY_SOURCE + (BROKEN_LINE if broken else "")
    cuda = (TINY_CUDA_SOURCE.replace("@NAMESPACE@", namespace),) if with_cuda_source else ()
    # -O0: a quarter less compile time than the default -O3, and this code's speed does not matter.
    return ExtensionSpec(name=f"{namespace}_ext", cpp_sources=(source.replace("@NAMESPACE@", namespace),),
                         cuda_sources=cuda, extra_cflags=("-O0",), description=f"test extension {namespace}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("cache_dir")
    parser.add_argument("--cache-var", default="GROUPNORM_INLINE_CACHE_DIR",
                        choices=["GROUPNORM_INLINE_CACHE_DIR", "TORCH_EXTENSIONS_DIR"])
    args = parser.parse_args()

    import torch

    import groupnorm_inline  # noqa: F401  (builds or loads the package's kernels from the test run's cache)
    from groupnorm_inline.jit import load

    print(MARKER, file=sys.stderr, flush=True)
    os.environ.pop("GROUPNORM_INLINE_CACHE_DIR", None)   # so TORCH_EXTENSIONS_DIR can take effect
    os.environ[args.cache_var] = args.cache_dir
    load(tiny_spec(args.namespace))
    print(getattr(torch.ops, args.namespace).times_two(21), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
