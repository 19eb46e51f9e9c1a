// Included by the convolution, depthwise and fully-connected kernels: bias, then the fused activation (clamp
// to [ACT_MIN, ACT_MAX]), of output slice os, before the post-ops. HAS_BIAS: bias holds one row per slice.
FLT4 conv_finish(FLT4 v, int os BUFS_DECL) {
#if HAS_BIAS
  v = v + bias_read(os);
#endif
#if ACT
  v = clamp(v, ACT_MIN, ACT_MAX);
#endif
  return v;
}
