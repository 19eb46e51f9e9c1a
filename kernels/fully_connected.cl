// FULLY_CONNECTED whose input rows cut across pixels (the input, of any shape, read as N rows of K values
// in row-major BHWC order). Inputs whose rows are whole pixels go through conv2d.cl instead (FLAT).
// dst pixel n, slice s = act(bias + sum over k of row n's element k times w row (s, k)).
// w: rows [output slice][k], 4 output channels each; bias (HAS_BIAS): a row per output slice.
// ACT: clamp to [ACT_MIN, ACT_MAX]. Grid (N, dst_S, 1).

// element e of src in row-major BHWC order
float fc_input(int e BUFS_DECL) {
  int c = e % src_C;
  int pix = e / src_C;
  int i = src_idx(pix / (src_H * src_W), (pix / src_W) % src_H, pix % src_W, c / 4);
  return src_read1(4 * i + c % 4);
}
// @include conv_finish.inc.cl
// @body
int n = GID_X;
int s = GID_Y;
FLT4 acc = SPLAT(0.0f);
for (int k = 0; k < K; k++) {
  acc = FMA(SPLAT(fc_input(n * K + k BUFS)), w_read(s * K + k), acc);
}
int plane = dst_H * dst_W;
dst_write((n / plane * dst_S + s) * plane + n % plane, conv_finish(acc, s BUFS));
