// OpenCL's version of dialect/layer_norm.dialect for a CPU device (lowering/fuse_layer_norm.py,
// LowerContext.pixels_layout), written as opencl/softmax.cl is: a work item takes 4 consecutive pixels of a row, each
// of their slices one float16, and each pixel's sums are its quarter of a float16 reduced, in the dialect's order
// (a lane's sum over the slices, then (x + y) + (z + w)): the same values. Grid (ceil(W / 4), H, B).
// PoCL: 197 x 768 83 -> 70 us, 64 x 64 10.2 -> 8.4 us. QUANT (an 8-bit chain): the dialect's roundings, 16 values
// at a time.

// @include opencl/wide_rows.inc.cl
#define SPREAD4(v) (float16)((v), (v), (v), (v))
#if QUANT
// @include opencl/fake_quant16.inc.cl
#define LN_FQ(v, S, LO, HI) fake_quant16((v), S, LO, HI)
// the scale (inv) of slice s of the 4 pixels, whose reciprocal deviations are r
float16 scale_of(float16 r, int s BUFS_DECL) {
#if HAS_INV
  return LN_FQ(r * SPREAD4(gamma_read(s)), Q_INV_S, Q_INV_LO, Q_INV_HI);
#else
  return r;
#endif
}
#endif
// @body
int b = GID_Z;
int y = GID_Y;
int x0 = 4 * GID_X;
float16 acc = (float16)(0.0f);
for (int s = 0; s < src_S; s++) {
  acc += valid_lanes16(pixels4(b, y, x0, s BUFS), s, 0.0f);
}
float16 mean = QUARTERS_SUM(acc) / TO_FLT(src_C);
#if QUANT
mean = LN_FQ(mean, Q_MEAN_S, Q_MEAN_LO, Q_MEAN_HI);
#endif
float16 sq = (float16)(0.0f);
for (int s = 0; s < src_S; s++) {
  float16 d = pixels4(b, y, x0, s BUFS) - mean;
#if QUANT
  sq += valid_lanes16(LN_FQ(d * d, Q_SQ_S, Q_SQ_LO, Q_SQ_HI), s, 0.0f);
#else
  sq += valid_lanes16(d * d, s, 0.0f);
#endif
}
float16 var = QUARTERS_SUM(sq) / TO_FLT(src_C);
#if QUANT
var = LN_FQ(var, Q_VAR_S, Q_VAR_LO, Q_VAR_HI);
int16 code = GD_CONVERT(QROUND((var + EPS) / (float16)(Q_RIN_S), Q_RIN_LO, Q_RIN_HI), int16) + RSQRT_OFFSET;
float16 r = (float16)((float4)(rsqrt_read1(code.s0)), (float4)(rsqrt_read1(code.s4)), (float4)(rsqrt_read1(code.s8)),
                      (float4)(rsqrt_read1(code.sc)));
#if NEG_FORM
float16 neg_mean = LN_FQ(-mean, Q_NEG_S, Q_NEG_LO, Q_NEG_HI);
#endif
for (int s = 0; s < src_S; s++) {
  float16 inv = scale_of(r, s BUFS);
#if NEG_FORM
  float16 t = LN_FQ(neg_mean * inv, Q_SP_S, Q_SP_LO, Q_SP_HI);
#else
  float16 t = LN_FQ(SPREAD4(beta_read(s)) - LN_FQ(mean * inv, Q_SP_S, Q_SP_LO, Q_SP_HI), Q_SHIFT_S, Q_SHIFT_LO,
                    Q_SHIFT_HI);
#endif
  float16 v = LN_FQ(pixels4(b, y, x0, s BUFS) * inv, Q_SCALED_S, Q_SCALED_LO, Q_SCALED_HI) + t;
#else
float16 r = 1.0f / sqrt(var + EPS);
for (int s = 0; s < src_S; s++) {
  float16 inv = r * SPREAD4(gamma_read(s));
  float16 v = pixels4(b, y, x0, s BUFS) * inv + (SPREAD4(beta_read(s)) - mean * inv);
#endif
  int o = dst_idx(b, y, x0, s);
  DST_STORE4(o, x0, dst_finish16(v, DST_PIXELS(o, x0) BUFS));
}
