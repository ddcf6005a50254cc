"""CUDA source: the GroupNorm forward of a channels-last input (NHWC, NDHWC), output in the same layout.

Spliced into the forward's translation unit (group_norm_cuda.py) after the NCHW plans, whose helpers it may
use. This first version normalises through an NCHW copy of the input; it exists so the operator takes and
returns channels-last tensors while native kernels are written.
"""

CHANNELS_LAST_FORWARD_CUDA = r"""
// input, y: (N, C, *) channels-last contiguous; params: (C,) affine or none; mean, rstd: (N, G).
void launch_forward_channels_last(const at::Tensor& input, at::Tensor& y, const gn_inline_forward::AffineParams& params,
                                  at::Tensor& mean, at::Tensor& rstd, int64_t G, int64_t HW, double eps,
                                  const gn_act::Params& act, cudaStream_t stream) {
  TORCH_CHECK_NOT_IMPLEMENTED(gn_inline_forward::dispatched_type(input.scalar_type()),
                              gn_inline_msg::not_implemented_for("group_norm_forward_cuda", input.scalar_type()));
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "group_norm_forward_cuda", [&] {
    if (params.affine()) forward_typed<scalar_t, true>(x, out, params.w, params.b, mean, rstd, G, HW, eps, stream, act);
    else forward_typed<scalar_t, false>(x, out, params.w, params.b, mean, rstd, G, HW, eps, stream, act);
  });
  y.copy_(out);
}
"""
