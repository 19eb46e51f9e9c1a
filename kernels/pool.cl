// AVERAGE_POOL_2D and MAX_POOL_2D (IS_MAX): a KH x KW window with strides SH SW and pads PT PL. As in
// TFLite, only the window's pixels inside the input take part: the maximum is theirs, and the average
// divides their sum (taken row by row, as TFLite does) by their count. ACT: clamp to [ACT_MIN, ACT_MAX].
// QUANT (an average over an 8-bit tensor, held as floats on the grid of IN_SCALE, IN_ZP): TFLite's integer
// average instead, the sum of the stored integers divided by the count with halves rounded away from zero
// (the float average, rounded by the fake-quant step, rounds halves away from the zero point instead and
// misses 5% of TFLite's values). Grid (dst_W, dst_H, dst_B * dst_S).
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int y0 = GID_Y * SH - PT;
int x0 = GID_X * SW - PL;
int ys = max(y0, 0);
int ye = min(y0 + KH, src_H);
int xs = max(x0, 0);
int xe = min(x0 + KW, src_W);
#if IS_MAX
FLT4 acc = SPLAT(-INF_F);
for (int y = ys; y < ye; y++) {
  for (int x = xs; x < xe; x++) {
    acc = max(acc, src_read(src_idx(b, y, x, s)));
  }
}
#elif QUANT
FLT4 acc = SPLAT(0.0f);
for (int y = ys; y < ye; y++) {
  for (int x = xs; x < xe; x++) {
    acc = acc + ROUND(src_read(src_idx(b, y, x, s)) / SPLAT(IN_SCALE)) + SPLAT(IN_ZP);
  }
}
int count = (ye - ys) * (xe - xs);
FLT4 n = SPLAT(TO_FLT(count));
FLT4 bump = SPLAT(TO_FLT(count / 2));
// exact: the sums are small integers, and a quotient is never within an ulp of an integer it is not
FLT4 q = SELECT4(trunc((acc - bump) / n), trunc((acc + bump) / n), GT4(acc, SPLAT(0.0f)));
acc = (q - SPLAT(IN_ZP)) * SPLAT(IN_SCALE);
#else
FLT4 acc = SPLAT(0.0f);
for (int y = ys; y < ye; y++) {
  for (int x = xs; x < xe; x++) {
    acc = acc + src_read(src_idx(b, y, x, s));
  }
}
acc = acc / SPLAT(TO_FLT((ye - ys) * (xe - xs)));
#endif
#if ACT
acc = clamp(acc, ACT_MIN, ACT_MAX);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), acc);
