// OpenCL's version of dialect/depthwise_conv2d.dialect (same defines, weights and grid). A work item takes its
// BLOCK_X pixels 4 at a time as one float16 (4 pixels x 4 channels), so a tap of 4 pixels is one wide
// multiply-add: at stride 1 its 4 input columns are adjacent and one float16 load; at stride 2 they are the even
// columns of two loads. On PoCL a 56x56x144 3x3 layer ran at 12 GB/s with one float4 per pixel: each pixel's
// arithmetic, not memory, was the bound. A work item with columns outside the row (a padded edge) loads the
// same, its neighbours' pixels included, and zeroes those columns: every one but where a load would leave its
// batch's first or last vec4 (the first row's left edge, the last row's right edge), which take the plain work
// item (dialect/depthwise.inc.dialect), as depth multipliers and other strides do. Gathering an edge's columns
// one by one into the wide path measured no faster than the plain work item; the masked loads made PoCL's small
// layers faster (14x14x384 3x3: 50 -> 42 us, 10x10x240 5x5: 42 -> 37 us).

// @runtime_channels
// @include dialect/depthwise.inc.dialect
#define WIDE (MULT == 1 && BLOCK_X % 4 == 0 && (SW == 1 || SW == 2))
// the last column a work item reads, counted from its first; the stride-2 loads read one past the last tap
#define LAST_COL (SW == 1 ? BLOCK_X - 1 + (KW - 1) * DW : 2 * (BLOCK_X - 1) + (KW - 1) * DW + 1)

#if WIDE
// always inlined: PoCL's compiler called it per work item where the body grew (an 8-bit output's fake-quant step);
// MobileNetV2's depthwise layers, each alone on PoCL: int8 1.43 -> 1.35 ms, fp32 1.16 -> 1.04 ms
__attribute__((always_inline)) inline void dw_wide(int b, int s, int oy, int ox0, bool edge BUFS_DECL) {
  float16 acc[BLOCK_X / 4];
  #pragma unroll
  for (int q = 0; q < BLOCK_X / 4; q++) {
    acc[q] = (float16)(0.0f);
  }
  int x0 = ox0 * SW - PL;
  for (int ky = 0; ky < KH; ky++) {
    int iy = oy * SH - PT + ky * DH;
    if (iy >= 0 && iy < src_H) {
      int i0 = src_idx(b, iy, x0, s);
      #pragma unroll
      for (int kx = 0; kx < KW; kx++) {
        float4 wk = w_read((s * KH + ky) * KW + kx);
        float16 w4 = (float16)(wk, wk, wk, wk);
        #pragma unroll
        for (int q = 0; q < BLOCK_X / 4; q++) {
#if SW == 1
          float16 v = src_read16(i0 + 4 * q + kx * DW);
#else
          float16 lo = src_read16(i0 + 8 * q + kx * DW);
          float16 hi = src_read16(i0 + 8 * q + kx * DW + 4);
          float16 v = (float16)(lo.s0123, lo.s89ab, hi.s0123, hi.s89ab);
#endif
          if (edge) {  // the 4 pixels' columns of this tap outside the row read as zero
            int c = x0 + 4 * q * SW + kx * DW;
            int16 col = (int16)(c) + SW * (int16)(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
            v = (col >= (int16)(0) && col < (int16)(src_W)) ? v : (float16)(0.0f);
          }
          acc[q] = FMA(v, w4, acc[q]);
        }
      }
    }
  }
  #pragma unroll
  for (int q = 0; q < BLOCK_X / 4; q++) {
    float16 v = acc[q];
#if HAS_BIAS
    float4 bb = bias_read(s);
    v = v + (float16)(bb, bb, bb, bb);
#endif
#if ACT
    v = clamp(v, ACT_MIN, ACT_MAX);
#endif
    int ox = ox0 + 4 * q;
    int o = dst_idx(b, oy, ox, s);
    // the post-ops of the 4 pixels at once (a pixel past the row reads its operands at the row's last)
    v = dst_finish16(v, (int4)(o - ox) + min((int4)(ox) + (int4)(0, 1, 2, 3), (int4)(dst_W - 1)) BUFS);
    dst_store16((int4)(o) + (int4)(0, 1, 2, 3), v, dst_W - ox);
  }
}
#endif
// @body
int ox0 = GID_X * BLOCK_X;
int b = dst_B == 1 ? 0 : GID_Z / dst_S;  // dst_B is a constant, dst_S not
int s = dst_B == 1 ? GID_Z : GID_Z % dst_S;
#if WIDE
int x0 = ox0 * SW - PL;
if (x0 >= 0 && x0 + LAST_COL < src_W) {
  dw_wide(b, s, GID_Y, ox0, false BUFS);
  return;
}
// the first and last vec4 the loads would touch (rows outside skipped) stay in this batch's run of slices,
// where a placed tensor's vec4 are consecutive in its buffer (codegen._placed_index)
int iy0 = GID_Y * SH - PT;
int first = src_idx(b, max(iy0, 0), 0, s) + x0;
int last = src_idx(b, min(iy0 + (KH - 1) * DH, src_H - 1), 0, s) + x0 + LAST_COL;
if (first >= b * src_S * src_H * src_W && last < (b + 1) * src_S * src_H * src_W) {
  dw_wide(b, s, GID_Y, ox0, true BUFS);
  return;
}
#endif
dw_block(b, s, GID_Y, ox0 BUFS);
