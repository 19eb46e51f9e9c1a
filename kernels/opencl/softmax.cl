// OpenCL's version of dialect/softmax.dialect for a CPU device (ops/reduce.py, LowerContext.wide_rows): a work
// item takes 4 consecutive pixels of a row, each of their slices one float16 (a 64-byte load), so every pass
// works on 16 values at a time; each pixel's max and sum are then its quarter of a float16 reduced. Three passes:
// the max; the exps, stored raw and summed; each stored exp divided by its sum (finished and stored again). One
// exp per value: taking it again in the last pass instead of storing it ran 1.25x slower. A row's last work item
// of fewer than 4 pixels reads the last pixel again in the lanes past the row and writes only its own.
// Grid (ceil(W / 4), H, B). PoCL, 8 heads of 197 x 197 attention scores: 410 -> 213 us, bound by memory
// (without any exp: 136 us); 16 pixels a work item ran no faster.

// @include opencl/lanes16.inc.cl

// slice s of the 4 pixels from x0 on
float16 pixels4(int b, int y, int x0, int s BUFS_DECL) {
  int i = src_idx(b, y, x0, s);
  if (x0 + 3 < src_W) {
    return src_read16(i);
  }
  int last = src_W - 1 - x0;
  return (float16)(src_read(i), src_read(i + min(1, last)), src_read(i + min(2, last)), src_read(i + min(3, last)));
}
// v with the padding lanes of src's last slice set to fill, when s is that slice
float16 valid_lanes16(float16 v, int s, float fill) {
  return s == src_S - 1 ? (LANES16 >= (float16)(TO_FLT(src_C - 4 * (src_S - 1))) ? (float16)(fill) : v) : v;
}
// stores the work item's pixels of v, from vec4 index o on
#define DST4(o, v) { \
  dst_store(o, (v).s0123); \
  if (x0 + 1 < dst_W) dst_store((o) + 1, (v).s4567); \
  if (x0 + 2 < dst_W) dst_store((o) + 2, (v).s89ab); \
  if (x0 + 3 < dst_W) dst_store((o) + 3, (v).scdef); \
}
// @body
int b = GID_Z;
int y = GID_Y;
int x0 = 4 * GID_X;
float16 mx = (float16)(-INF_F);
for (int s = 0; s < src_S; s++) {
  mx = max(mx, valid_lanes16(pixels4(b, y, x0, s BUFS), s, -INF_F));
}
mx = QUARTERS_MAX(mx);
int4 px = min((int4)(x0) + (int4)(0, 1, 2, 3), (int4)(dst_W - 1));  // the pixels read: past the row, its last
float16 sum = (float16)(0.0f);
for (int s = 0; s < src_S; s++) {
  float16 e = exp((pixels4(b, y, x0, s BUFS) - mx) * BETA);
  sum += valid_lanes16(e, s, 0.0f);
#if !LOG_SOFTMAX
  DST4(dst_idx(b, y, x0, s), e)
#endif
}
sum = QUARTERS_SUM(sum);
#if LOG_SOFTMAX
float16 log_sum = log(sum);
#endif
for (int s = 0; s < src_S; s++) {
  int o = dst_idx(b, y, x0, s);
#if LOG_SOFTMAX
  float16 v = (pixels4(b, y, x0, s BUFS) - mx) - log_sum;
#else
  float16 v = (float16)(dst_read(o), dst_read(o + px.y - x0), dst_read(o + px.z - x0), dst_read(o + px.w - x0)) / sum;
#endif
  v = dst_finish16(v, (int4)(o - x0) + px BUFS);
  DST4(o, v)
}
