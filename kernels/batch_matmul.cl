// BATCH_MATMUL: dst[b, h, m, n] = sum over k of X[b, h, m, k] * Y[b, h, k, n], where X is x or, with
// ADJ_X, x with its last two dims swapped (and Y likewise y with ADJ_Y). Operands of rank <= 4 are seen
// as BHWC (batch dims B, H; rows W; columns C); a batch dim of size 1 broadcasts. y is a tensor, or with
// Y_CONST a constant "yc" in PHWC4 of geometry Y_B Y_H Y_W Y_C Y_S (const args have no geometry of
// their own). K: the contraction length. Grid (dst_W, dst_H, dst_B * dst_S).

#if Y_CONST
#define Y_READ(i) yc_read(i)
#define Y_READ1(j) yc_read1(j)
#else
#define Y_READ(i) y_read(i)
#define Y_READ1(j) y_read1(j)
#endif
#define Y_IDX(b, h, r, s) ((((b) * Y_S + (s)) * Y_H + (h)) * Y_W + (r))

// element (b, h, r, c) of x
float bmm_x(int b, int h, int r, int c BUFS_DECL) {
  return x_read1(4 * x_idx(b, h, r, c / 4) + c % 4);
}
// element (b, h, r, c) of y
float bmm_y(int b, int h, int r, int c BUFS_DECL) {
  return Y_READ1(4 * Y_IDX(b, h, r, c / 4) + c % 4);
}
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int h = GID_Y;
int m = GID_X;
int xb = b % x_B;
int xh = h % x_H;
int yb = b % Y_B;
int yh = h % Y_H;
FLT4 acc = SPLAT(0.0f);
for (int k = 0; k < K; k++) {
#if ADJ_X
  float xv = bmm_x(xb, xh, k, m BUFS);
#else
  float xv = bmm_x(xb, xh, m, k BUFS);
#endif
#if ADJ_Y
  // Y[k, n] = y[n, k]: the 4 columns n of this slice are 4 rows of y (clamped past the end: those lanes
  // are padding, zeroed on write)
  int n0 = 4 * s;
  FLT4 yv = MAKE_FLT4(bmm_y(yb, yh, min(n0, Y_W - 1), k BUFS), bmm_y(yb, yh, min(n0 + 1, Y_W - 1), k BUFS),
                      bmm_y(yb, yh, min(n0 + 2, Y_W - 1), k BUFS), bmm_y(yb, yh, min(n0 + 3, Y_W - 1), k BUFS));
#else
  FLT4 yv = Y_READ(Y_IDX(yb, yh, k, s));
#endif
  acc = FMA(SPLAT(xv), yv, acc);
}
dst_write(dst_idx(b, h, m, s), acc);
