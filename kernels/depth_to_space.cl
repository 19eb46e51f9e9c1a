// DEPTH_TO_SPACE: dst (b, y, x, c) = src (b, y / BLOCK, x / BLOCK, ((y % BLOCK) * BLOCK + x % BLOCK) * dst_C + c).
// VEC4: dst_C is a multiple of 4, so a dst vec4 is one src vec4. Grid (W, H, B * S) of dst.
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int base = ((GID_Y % BLOCK) * BLOCK + GID_X % BLOCK) * dst_C;
int i = src_idx(b, GID_Y / BLOCK, GID_X / BLOCK, 0);
#if VEC4
FLT4 v = src_read(i + (base / 4 + s) * src_H * src_W);
#else
float e[4];
for (int j = 0; j < 4; j++) {
  int c = base + 4 * s + j;
  e[j] = 4 * s + j < dst_C ? LANE(src_read(i + (c / 4) * src_H * src_W), c % 4) : 0.0f;
}
FLT4 v = MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
