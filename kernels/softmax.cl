// SOFTMAX (LOG_SOFTMAX = 0) or LOG_SOFTMAX (1) of src over its channels (the tensor's last axis), one work
// item per (b, y, x): the max over every slice, the sum of exp(BETA * (x - max)), then each slice written.
// Padding lanes of the last slice take no part. Grid (W, H, B).

// v with the padding lanes of src's last slice set to fill, when s is that slice
FLT4 valid_lanes(FLT4 v, int s, float fill) {
  FLT4 pad = GE4(MAKE_FLT4(0.0f, 1.0f, 2.0f, 3.0f), SPLAT(TO_FLT(src_C - 4 * (src_S - 1))));
  return s == src_S - 1 ? SELECT4(v, SPLAT(fill), pad) : v;
}
// @body
int b = GID_Z;
FLT4 mx = SPLAT(-INF_F);
for (int s = 0; s < src_S; s++) {
  mx = max(mx, valid_lanes(src_read(src_idx(b, GID_Y, GID_X, s)), s, -INF_F));
}
float m = max(max(mx.x, mx.y), max(mx.z, mx.w));
FLT4 acc = SPLAT(0.0f);
for (int s = 0; s < src_S; s++) {
  FLT4 e = exp((src_read(src_idx(b, GID_Y, GID_X, s)) - SPLAT(m)) * SPLAT(BETA));
  acc += valid_lanes(e, s, 0.0f);
}
float sum = (acc.x + acc.y) + (acc.z + acc.w);
for (int s = 0; s < src_S; s++) {
  int i = src_idx(b, GID_Y, GID_X, s);
#if LOG_SOFTMAX
  dst_write(dst_idx(b, GID_Y, GID_X, s), (src_read(i) - SPLAT(m)) - SPLAT(log(sum)));
#else
  dst_write(dst_idx(b, GID_Y, GID_X, s), exp((src_read(i) - SPLAT(m)) * SPLAT(BETA)) / SPLAT(sum));
#endif
}
