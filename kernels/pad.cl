// dst = src padded by BEFORE_d positions before each BHWC dimension d (the amounts after follow from the
// shapes). MODE 0 fills with PAD_VALUE; MODE 1 mirrors without repeating the edge (REFLECT), MODE 2 with it
// (SYMMETRIC); paddings never exceed what one reflection covers.
// VEC4: BEFORE_C is a multiple of 4 and whole source slices land on whole dst slices (the lowering checks
// that padding lanes, which hold zero, are never shown where PAD_VALUE belongs). Grid (W, H, B * S) of dst.
bool inside(int i, int size) { return i >= 0 && i < size; }
int mirror(int i, int size) {
#if MODE == 1
  return i < 0 ? -i : (i >= size ? 2 * size - 2 - i : i);
#else
  return i < 0 ? -i - 1 : (i >= size ? 2 * size - 1 - i : i);
#endif
}
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int sb = b - BEFORE_B;
int sy = GID_Y - BEFORE_H;
int sx = GID_X - BEFORE_W;
#if MODE != 0
sb = mirror(sb, src_B);
sy = mirror(sy, src_H);
sx = mirror(sx, src_W);
#endif
bool here = inside(sb, src_B) && inside(sy, src_H) && inside(sx, src_W);
#if VEC4
int ss = s - BEFORE_C / 4;
FLT4 v = SPLAT(PAD_VALUE);
if (here && inside(ss, src_S)) {
  v = src_read(src_idx(sb, sy, sx, ss));
}
#else
float e[4];
for (int j = 0; j < 4; j++) {
  int sc = 4 * s + j - BEFORE_C;
#if MODE != 0
  sc = mirror(sc, src_C);
#endif
  e[j] = PAD_VALUE;
  if (here && inside(sc, src_C)) {
    e[j] = LANE(src_read(src_idx(sb, sy, sx, sc / 4)), sc % 4);
  }
}
FLT4 v = MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
