// dst = src gathered along one dimension of its original shape by a constant index table. In row-major
// element order, dst element (o * COUNT + j) * INNER + i is src element (o * AXIS_SIZE + index[j]) * INNER + i.
// index[j] = table[2j] + 2048 * table[2j + 1]: both parts are integers <= 2048, exact in fp16 storage too.
// VEC4: the gathered dimension is not the channel one, so a dst vec4 is one src vec4. Grid (W, H, B * S).
int source_vec(int lin) {
  int t = lin / src_C;
  int x = t % src_W;
  t = t / src_W;
  return src_idx(t / src_H, t % src_H, x, (lin % src_C) / 4);
}
int gathered(int lin BUFS_DECL) {
  int i = lin % INNER;
  int t = lin / INNER;
  int j = t % COUNT;
  int index = TO_INT(table_read1(2 * j)) + 2048 * TO_INT(table_read1(2 * j + 1));
  return ((t / COUNT) * AXIS_SIZE + index) * INNER + i;
}
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int lin = ((b * dst_H + GID_Y) * dst_W + GID_X) * dst_C + 4 * s;
#if VEC4
FLT4 v = src_read(source_vec(gathered(lin BUFS)));
#else
float e[4];
for (int j = 0; j < 4; j++) {
  e[j] = 0.0f;
  if (4 * s + j < dst_C) {
    int k = gathered(lin + j BUFS);
    e[j] = LANE(src_read(source_vec(k)), k % src_C % 4);
  }
}
FLT4 v = MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
