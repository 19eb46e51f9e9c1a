// dst = src with its elements moved by a per-dimension affine map: along each BHWC dimension d of src, the
// source coordinate is START_d + STEP_d * (the dst coordinate FROM_d), where FROM_d is 0..3 for b, y, x, c
// of dst and STEP_d is 0 for a dimension held fixed; with TILE the coordinate wraps around the source size.
// This covers SLICE, STRIDED_SLICE (negative steps too), SPLIT, UNPACK, TRANSPOSE and TILE.
// VEC4: dst channels map to src channels slice for slice (FROM_C = 3, STEP_C = 1, START_C % 4 == 0), so one
// vec4 is copied; otherwise every lane is fetched on its own. Grid (W, H, B * S) of dst.
int pick(int b, int y, int x, int c, int k) { return k == 0 ? b : (k == 1 ? y : (k == 2 ? x : c)); }
int source(int o, int start, int step, int size) {
#if TILE
  return (start + step * o) % size;
#else
  return start + step * o;
#endif
}
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int y = GID_Y;
int x = GID_X;
#if VEC4
int sb = source(pick(b, y, x, 4 * s, FROM_B), START_B, STEP_B, src_B);
int sy = source(pick(b, y, x, 4 * s, FROM_H), START_H, STEP_H, src_H);
int sx = source(pick(b, y, x, 4 * s, FROM_W), START_W, STEP_W, src_W);
int ss = source(s, START_C / 4, 1, src_S);
dst_write(dst_idx(b, y, x, s), src_read(src_idx(sb, sy, sx, ss)));
#else
float e[4];
for (int j = 0; j < 4; j++) {
  int c = 4 * s + j;
  e[j] = 0.0f;
  if (c < dst_C) {
    int sb = source(pick(b, y, x, c, FROM_B), START_B, STEP_B, src_B);
    int sy = source(pick(b, y, x, c, FROM_H), START_H, STEP_H, src_H);
    int sx = source(pick(b, y, x, c, FROM_W), START_W, STEP_W, src_W);
    int sc = source(pick(b, y, x, c, FROM_C), START_C, STEP_C, src_C);
    e[j] = LANE(src_read(src_idx(sb, sy, sx, sc / 4)), sc % 4);
  }
}
dst_write(dst_idx(b, y, x, s), MAKE_FLT4(e[0], e[1], e[2], e[3]));
#endif
