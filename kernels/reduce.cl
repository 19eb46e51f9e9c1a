// MEAN / SUM / REDUCE_MAX / REDUCE_MIN / REDUCE_PROD of src over the BHWC axes flagged RED_B, RED_H, RED_W,
// RED_C (defines, 0 or 1). From the lowering: REDUCE_OP(x, y) (on floats and FLT4s alike), INIT (its
// identity) and FINISH(v) (MEAN divides by the count). The output is read in the "keep" frame, src's shape
// with the reduced axes set to 1 (KEEP_H, KEEP_W; its channels are src_C, or 1 when RED_C): its elements lie
// in the same row-major order as dst's, whatever dims keep_dims=false dropped. Grid (W, H, B * S) of dst.

#if RED_C
// the lanes of src's last slice that are padding, as a mask (1.0 where padding)
FLT4 pad_lanes() { return GE4(MAKE_FLT4(0.0f, 1.0f, 2.0f, 3.0f), SPLAT(TO_FLT(src_C - 4 * (src_S - 1)))); }
// the whole reduction at keep-frame position (kb, ky, kx): every channel of every reduced b, y, x
float reduce_channels(int kb, int ky, int kx BUFS_DECL) {
  FLT4 acc = SPLAT(INIT);
  FLT4 pad = pad_lanes();
  for (int b = RED_B != 0 ? 0 : kb; b < (RED_B != 0 ? src_B : kb + 1); b++) {
    for (int y = RED_H != 0 ? 0 : ky; y < (RED_H != 0 ? src_H : ky + 1); y++) {
      for (int x = RED_W != 0 ? 0 : kx; x < (RED_W != 0 ? src_W : kx + 1); x++) {
        for (int s = 0; s < src_S - 1; s++) {
          acc = REDUCE_OP(acc, src_read(src_idx(b, y, x, s)));
        }
        acc = REDUCE_OP(acc, SELECT4(src_read(src_idx(b, y, x, src_S - 1)), SPLAT(INIT), pad));
      }
    }
  }
  return REDUCE_OP(REDUCE_OP(acc.x, acc.y), REDUCE_OP(acc.z, acc.w));
}
#else
// slice s reduced over the reduced b, y, x at keep-frame position (kb, ky, kx), lane by lane
FLT4 reduce_slice(int kb, int ky, int kx, int s BUFS_DECL) {
  FLT4 acc = SPLAT(INIT);
  for (int b = RED_B != 0 ? 0 : kb; b < (RED_B != 0 ? src_B : kb + 1); b++) {
    for (int y = RED_H != 0 ? 0 : ky; y < (RED_H != 0 ? src_H : ky + 1); y++) {
      for (int x = RED_W != 0 ? 0 : kx; x < (RED_W != 0 ? src_W : kx + 1); x++) {
        acc = REDUCE_OP(acc, src_read(src_idx(b, y, x, s)));
      }
    }
  }
  return acc;
}
#endif
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int p = (b * dst_H + GID_Y) * dst_W + GID_X;  // dst's (b, y, x) as a linear position
#if RED_C
// dst's channels are not src's: each lane is a keep-frame position of its own
float r[4];
for (int k = 0; k < 4; k++) {
  int q = p * dst_C + 4 * s + k;
  r[k] = 0.0f;
  if (4 * s + k < dst_C) {
    r[k] = reduce_channels(q / (KEEP_H * KEEP_W), (q / KEEP_W) % KEEP_H, q % KEEP_W BUFS);
  }
}
FLT4 v = MAKE_FLT4(r[0], r[1], r[2], r[3]);
#else
// dst's channels are src's, so slice s of keep-frame position p
FLT4 v = reduce_slice(p / (KEEP_H * KEEP_W), (p / KEEP_W) % KEEP_H, p % KEEP_W, s BUFS);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), FINISH(v));
