// Included by depthwise_conv2d.cl and its OpenCL version: the plain depthwise work item.
//
// dw_block computes BLOCK_X pixels along x of one slice. Their taps overlap, so each input row segment
// they read (SPAN = (BLOCK_X - 1) * SW + (KW - 1) * DW + 1 columns) is loaded once and every column serves
// all the taps that fall on it: a 3x3 stride-1 filter over 4 pixels loads 6 columns per row instead of 12.
// The small loops are unrolled (#pragma unroll, see conv2d.cl) to keep row[] and acc[] in registers.
// MASKED = 0 when no column of any work item leaves the input. MULT > 1 (depth multiplier): output
// channel c reads input channel c / MULT, gathered lane by lane.

#define SPAN ((BLOCK_X - 1) * SW + (KW - 1) * DW + 1)

// @include conv_finish.inc.cl

FLT4 dw_fetch(int b, int y, int x, int s BUFS_DECL) {
#if MULT == 1
  return src_read(src_idx(b, y, x, s));
#else
  float e[4];
  #pragma unroll
  for (int k = 0; k < 4; k++) {
    int c = min((4 * s + k) / MULT, src_C - 1);  // lanes past dst_C read any channel: zeroed on write
    e[k] = src_read1(4 * src_idx(b, y, x, c / 4) + c % 4);
  }
  return MAKE_FLT4(e[0], e[1], e[2], e[3]);
#endif
}

void dw_block(int b, int s, int oy, int ox0 BUFS_DECL) {
  FLT4 acc[BLOCK_X];
  #pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
    acc[p] = SPLAT(0.0f);
  }
  int x0 = ox0 * SW - PL;
  for (int ky = 0; ky < KH; ky++) {
    int iy = oy * SH - PT + ky * DH;
    if (iy >= 0 && iy < src_H) {
      FLT4 row[SPAN];
      #pragma unroll
      for (int c = 0; c < SPAN; c++) {
        int ix = x0 + c;
#if MASKED
        FLT4 v = dw_fetch(b, iy, clamp(ix, 0, src_W - 1), s BUFS);
        row[c] = (ix >= 0 && ix < src_W) ? v : SPLAT(0.0f);
#else
        row[c] = dw_fetch(b, iy, min(ix, src_W - 1), s BUFS);
#endif
      }
      #pragma unroll
      for (int kx = 0; kx < KW; kx++) {
        FLT4 wk = w_read((s * KH + ky) * KW + kx);
        #pragma unroll
        for (int p = 0; p < BLOCK_X; p++) {
          acc[p] = FMA(row[p * SW + kx * DW], wk, acc[p]);
        }
      }
    }
  }
  #pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
    int ox = ox0 + p;
    if (ox < dst_W) {
      dst_write(dst_idx(b, oy, ox, s), conv_finish(acc[p], s BUFS));
    }
  }
}
