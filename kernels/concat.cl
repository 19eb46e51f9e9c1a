// dst = PARTS inputs joined along BHWC dimension AXIS (CONCATENATION, PACK). The lowering defines, as macros
// over the part number k and coordinates in that part's view of itself (its shape with the joined axis in
// place): PART_START(k), its first position along AXIS; PART_VEC(k, b, y, x, s), the vec4 there;
// PART_LANE(k, b, y, x, c), the single element there. A part may be a tensor or a constant buffer.
// VEC4: every part starts on a whole slice (or AXIS is not the channel one), so a dst vec4 is one vec4 of one
// part; otherwise every lane is fetched on its own. Grid (W, H, B * S) of dst.
int index4(int b, int y, int x, int s, int h, int w, int slices) { return ((b * slices + s) * h + y) * w + x; }
// vec4 index and lane of the element at row-major position lin of a tensor (., h, w, c)
int linear_index4(int lin, int h, int w, int c) {
  int t = lin / c;
  int x = t % w;
  t = t / w;
  return index4(t / h, t % h, x, (lin % c) / 4, h, w, (c + 3) / 4);
}
int linear_lane(int lin, int c) { return (lin % c) % 4; }
int part_of(int pos) {
  int k = 0;
  while (k + 1 < PARTS && pos >= PART_START(k + 1)) {
    k++;
  }
  return k;
}
int shifted(int v, int axis, int k) { return axis == AXIS ? v - PART_START(k) : v; }
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int y = GID_Y;
int x = GID_X;
#if VEC4
#if AXIS == 3
int k = part_of(4 * s);
FLT4 v = PART_VEC(k, b, y, x, s - PART_START(k) / 4);
#else
int k = part_of(AXIS == 0 ? b : (AXIS == 1 ? y : x));
FLT4 v = PART_VEC(k, shifted(b, 0, k), shifted(y, 1, k), shifted(x, 2, k), s);
#endif
#else
float e[4];
for (int j = 0; j < 4; j++) {
  int c = 4 * s + j;
  e[j] = 0.0f;
  if (c < dst_C) {
    int k = part_of(AXIS == 0 ? b : (AXIS == 1 ? y : (AXIS == 2 ? x : c)));
    e[j] = PART_LANE(k, shifted(b, 0, k), shifted(y, 1, k), shifted(x, 2, k), shifted(c, 3, k));
  }
}
FLT4 v = MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
dst_write(dst_idx(b, y, x, s), v);
