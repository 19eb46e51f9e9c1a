// OpenCL's version of dialect/softmax.dialect for a CPU device (ops/reduce.py, LowerContext.pixels_layout): a work
// item takes 4 consecutive pixels of a row, each of their slices one float16 (a 64-byte load), so every pass
// works on 16 values at a time; each pixel's max and sum are then its quarter of a float16 reduced. Three passes:
// the max; the exps, stored raw and summed; each stored exp divided by its sum (finished and stored again). One
// exp per value: taking it again in the last pass instead of storing it ran 1.25x slower. A row's last work item
// of fewer than 4 pixels: opencl/wide_rows.inc.cl. Grid (ceil(W / 4), H, B). PoCL, 8 heads of 197 x 197
// attention scores: 410 -> 213 us, bound by memory (without any exp: 136 us); 16 pixels a work item ran no faster.

// @include opencl/wide_rows.inc.cl
// @include opencl/exp16.inc.cl
// @body
int b = GID_Z;
int y = GID_Y;
int x0 = 4 * GID_X;
float16 mx = (float16)(-INF_F);
for (int s = 0; s < src_S; s++) {
  mx = max(mx, valid_lanes16(pixels4(b, y, x0, s BUFS), s, -INF_F));
}
mx = QUARTERS_MAX(mx);
float16 sum = (float16)(0.0f);
for (int s = 0; s < src_S; s++) {
  float16 e = EXP16((pixels4(b, y, x0, s BUFS) - mx) * BETA);
  sum += valid_lanes16(e, s, 0.0f);
#if !LOG_SOFTMAX
  DST_STORE4(dst_idx(b, y, x0, s), x0, e);
#endif
}
sum = QUARTERS_SUM(sum);
float16 inverse = 1.0f / sum;  // one division a pixel, then products (as XNNPACK does): 16 divisions a slice cost more
#if LOG_SOFTMAX
float16 log_sum = log(sum);
#endif
for (int s = 0; s < src_S; s++) {
  int o = dst_idx(b, y, x0, s);
  int4 px = DST_PIXELS(o, x0);
#if LOG_SOFTMAX
  float16 v = (pixels4(b, y, x0, s BUFS) - mx) - log_sum;
#else
  float16 v = (float16)(dst_read(px.x), dst_read(px.y), dst_read(px.z), dst_read(px.w)) * inverse;
#endif
  DST_STORE4(o, x0, dst_finish16(v, px BUFS));
}
