// The input of an 8-bit convolution on integer dot products (conv2d_int8.cl) whose producer did not store its
// codes (a model input, a tensor written in parts; ops/conv.py emit_conv_int8): each vec4 of stored values as the
// 32-bit word of its codes q + 128 (gd_code4; INV = 1 / scale, OFFSET = zp + 128), words at src's vec4 indices
// ((b * src_S + s) * src_H + y) * src_W + x. Grid: one work item per 4 pixels of a row of one slice
// (LowerContext.quads_grid of src).
// @body
int b = src_B == 1 ? 0 : GID_Z / src_S;
int s = src_B == 1 ? GID_Z : GID_Z % src_S;
int x0 = 4 * GID_X;
int i = src_idx(b, GID_Y, x0, s);
int word = ((b * src_S + s) * src_H + GID_Y) * src_W + x0;
__global uint* q = (__global uint*)q_buf;
if (x0 + 3 < src_W) {
  uint4 w = gd_code16(src_read16(i), INV, OFFSET);
  q[word] = w.x;
  q[word + 1] = w.y;
  q[word + 2] = w.z;
  q[word + 3] = w.w;
} else {
  for (int k = 0; x0 + k < src_W; k++) q[word + k] = gd_code4(src_read(i + k), INV, OFFSET);
}
