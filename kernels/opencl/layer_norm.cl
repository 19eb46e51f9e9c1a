// OpenCL's version of dialect/layer_norm.dialect for a CPU device (lowering/fuse_layer_norm.py,
// LowerContext.pixels_layout), written as opencl/softmax.cl is: a work item takes 4 consecutive pixels of a row, each
// of their slices one float16, and each pixel's sums are its quarter of a float16 reduced, in the dialect's order
// (a lane's sum over the slices, then (x + y) + (z + w)): the same values. Grid (ceil(W / 4), H, B).
// PoCL: 197 x 768 83 -> 70 us, 64 x 64 10.2 -> 8.4 us.

// @include opencl/wide_rows.inc.cl
#define SPREAD4(v) (float16)((v), (v), (v), (v))
// @body
int b = GID_Z;
int y = GID_Y;
int x0 = 4 * GID_X;
float16 acc = (float16)(0.0f);
for (int s = 0; s < src_S; s++) {
  acc += valid_lanes16(pixels4(b, y, x0, s BUFS), s, 0.0f);
}
float16 mean = QUARTERS_SUM(acc) / TO_FLT(src_C);
float16 sq = (float16)(0.0f);
for (int s = 0; s < src_S; s++) {
  float16 d = pixels4(b, y, x0, s BUFS) - mean;
  sq += valid_lanes16(d * d, s, 0.0f);
}
float16 var = QUARTERS_SUM(sq) / TO_FLT(src_C);
float16 r = 1.0f / sqrt(var + EPS);
for (int s = 0; s < src_S; s++) {
  float16 inv = r * SPREAD4(gamma_read(s));
  float16 v = pixels4(b, y, x0, s BUFS) * inv + (SPREAD4(beta_read(s)) - mean * inv);
  int o = dst_idx(b, y, x0, s);
  DST_STORE4(o, x0, dst_finish16(v, DST_PIXELS(o, x0) BUFS));
}
