// The input of an 8-bit convolution on integer dot products (conv2d_int8.cl), from its stored float values:
// each value's integer code q (the value is (q - ZP) * scale, on the grid since the producer's fake-quant;
// INV = 1 / scale) plus 128, a byte 0..255, the 4 of a slice one 32-bit word of q_buf. Words in src's PHWC4
// order, a row padded to W4 = 4 * ceil(src_W / 4) words: word ((b * src_S + s) * src_H + y) * W4 + x, so a
// work item's 4 pixels are one aligned 16-byte store. OFFSET = ZP + 128. Grid: one work item per 4 pixels of a
// row of one slice (LowerContext.quads_grid of src).
// Integer conversions and shifts only: PoCL calls its library for convert_uchar4_sat_rte and rint (a 56x56x144
// input took 280 us that way); adding 2^23 leaves a float's integer part in its low mantissa bits.
// @body
int b = src_B == 1 ? 0 : GID_Z / src_S;
int s = src_B == 1 ? GID_Z : GID_Z % src_S;
int x0 = 4 * GID_X;
int i = src_idx(b, GID_Y, x0, s);
float16 v;
if (x0 + 3 < src_W) {
  v = src_read16(i);
} else {  // the row's last pixels: the lanes past it repeat the last one (their words are never read)
  int last = src_W - 1 - x0;
  v = (float16)(src_read(i), src_read(i + min(1, last)), src_read(i + min(2, last)), src_read(i + min(3, last)));
}
// the values sit within a few ulps of integers, never at a rounding tie
uint16 u = as_uint16(clamp(v * INV + OFFSET, 0.0f, 255.0f) + 8388608.0f) & 255u;
uint4 w = u.s048c | (u.s159d << 8) | (u.s26ae << 16) | (u.s37bf << 24);
((__global uint4*)q_buf)[((b * src_S + s) * src_H + GID_Y) * ((src_W + 3) / 4) + GID_X] = w;
