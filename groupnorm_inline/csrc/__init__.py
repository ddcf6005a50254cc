"""C++ and CUDA sources, kept as Python string constants (compiled by `groupnorm_inline.jit`)."""
