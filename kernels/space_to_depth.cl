// SPACE_TO_DEPTH: dst (b, y, x, c) = src (b, y * BLOCK + k / BLOCK, x * BLOCK + k % BLOCK, c % src_C) with
// k = c / src_C. VEC4: src_C is a multiple of 4, so a dst vec4 is one src vec4. Grid (W, H, B * S) of dst.
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
#if VEC4
int k = (4 * s) / src_C;
FLT4 v = src_read(src_idx(b, GID_Y * BLOCK + k / BLOCK, GID_X * BLOCK + k % BLOCK, s % src_S));
#else
float e[4];
for (int j = 0; j < 4; j++) {
  int c = 4 * s + j;
  int k = c / src_C;
  int sc = c % src_C;
  e[j] = c < dst_C ? LANE(src_read(src_idx(b, GID_Y * BLOCK + k / BLOCK, GID_X * BLOCK + k % BLOCK, sc / 4)),
                          sc % 4) : 0.0f;
}
FLT4 v = MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
