// dst = EXPR(a, b) with numpy broadcasting of a and b to dst's BHWC shape. EXPR is a helper macro from the
// lowering. A size-1 channel dimension is broadcast across the vec4 lanes. Grid (W, H, B * S) of dst.
FLT4 fetch_a(int b, int y, int x, int s BUFS_DECL) {
  int i = (((b % a_B) * a_S + (a_C == 1 ? 0 : s)) * a_H + (y % a_H)) * a_W + (x % a_W);
  FLT4 v = a_read(i);
  return a_C == 1 ? SPLAT(v.x) : v;
}
FLT4 fetch_b(int b, int y, int x, int s BUFS_DECL) {
  int i = (((b % b_B) * b_S + (b_C == 1 ? 0 : s)) * b_H + (y % b_H)) * b_W + (x % b_W);
  FLT4 v = b_read(i);
  return b_C == 1 ? SPLAT(v.x) : v;
}
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int i = dst_idx(b, GID_Y, GID_X, s);
dst_write(i, EXPR(fetch_a(b, GID_Y, GID_X, s BUFS), fetch_b(b, GID_Y, GID_X, s BUFS)));
