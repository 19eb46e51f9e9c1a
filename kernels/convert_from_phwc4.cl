// PHWC4 tensor `src` -> dense BHWC float data (raw buffer `dst`).
// One work item per vec4 of the dense output, so no two work items write the same word (a float16
// buffer in GL packs two values per uint). The grid is 2-D, DST_N4 = ceil(B * H * W * C / 4) items.

// Element j of the dense BHWC array, 0 past its end.
float dense_element(int j BUFS_DECL) {
  if (j >= src_B * src_H * src_W * src_C) return 0.0f;
  int c = j % src_C;
  int p = j / src_C;
  int x = p % src_W;
  p = p / src_W;
  int y = p % src_H;
  int b = p / src_H;
  return LANE(src_read(src_idx(b, y, x, c >> 2)), c & 3);
}
// @body
int j4 = GID_Y * GRID_X + GID_X;
if (j4 >= DST_N4) return;
dst_write(j4, MAKE_FLT4(dense_element(4 * j4 BUFS), dense_element(4 * j4 + 1 BUFS),
                        dense_element(4 * j4 + 2 BUFS), dense_element(4 * j4 + 3 BUFS)));
