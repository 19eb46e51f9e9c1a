// dst = src with the same elements in the same row-major BHWC order and another shape (RESHAPE, SQUEEZE,
// EXPAND_DIMS when the PHWC4 layouts differ). VEC4: both channel counts are multiples of 4, so four
// consecutive elements starting at a multiple of 4 lie in one source vec4. Grid (W, H, B * S) of dst.
int source_vec(int lin) {
  int t = lin / src_C;
  int x = t % src_W;
  t = t / src_W;
  return src_idx(t / src_H, t % src_H, x, (lin % src_C) / 4);
}
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int lin = ((b * dst_H + GID_Y) * dst_W + GID_X) * dst_C + 4 * s;
#if VEC4
FLT4 v = src_read(source_vec(lin));
#else
float e[4];
for (int j = 0; j < 4; j++) {
  e[j] = 0.0f;
  if (4 * s + j < dst_C) {
    e[j] = LANE(src_read(source_vec(lin + j)), (lin + j) % src_C % 4);
  }
}
FLT4 v = MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
