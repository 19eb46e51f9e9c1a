// CONV_2D with any window: dst = act(conv(src, w) + bias). 1x1 windows at stride 1 without padding take
// conv2d_1x1.cl instead.
//
// A work item computes BLOCK_X pixels (consecutive along x) by BLOCK_S output slices, so each weight row
// it loads serves BLOCK_X pixels and each input value BLOCK_S * 4 output channels. The inner step is
// acc += x.c * w[c] for the 4 input channels c of a slice: a multiply-add of a broadcast scalar by a row.
// The small loops are unrolled (#pragma unroll; GLSL ignores it, Mesa unrolls them anyway) so that the
// accumulator arrays live in registers: without it PoCL keeps them in memory and runs at half the speed.
//
// w: rows [block][ky][kx][src slice][c < 4][j < BLOCK_S]; the row holds output channels
//    4 * (block * BLOCK_S + j) + 0..3 for input channel 4 * (src slice) + c. Zero rows pad the last block
//    and the input channels of the last slice.
// bias (HAS_BIAS): one row per output slice, zero-padded to whole blocks.
// Window: KH KW SH SW DH DW, pads PT PL; MASKED = 0 when no tap of a written pixel leaves the input.
// ACT: clamp to [ACT_MIN, ACT_MAX] (the fused activation) before the post-ops.
// Grid (ceil(dst_W / BLOCK_X), dst_H, dst_B * DST_BLOCKS).

// @include conv_finish.inc.cl
// @body
int blk = GID_Z % DST_BLOCKS;
int b = GID_Z / DST_BLOCKS;
int oy = GID_Y;
int ox0 = GID_X * BLOCK_X;
FLT4 acc[BLOCK_S * BLOCK_X];
#pragma unroll
for (int k = 0; k < BLOCK_S * BLOCK_X; k++) {
  acc[k] = SPLAT(0.0f);
}
FLT4 wv[4 * BLOCK_S];
int wi = blk * KH * KW * src_S * 4 * BLOCK_S;
for (int ky = 0; ky < KH; ky++) {
  int iy = oy * SH - PT + ky * DH;
  int yc = clamp(iy, 0, src_H - 1);
  for (int kx = 0; kx < KW; kx++) {
    int base[BLOCK_X];
#if MASKED
    float mask[BLOCK_X];
#endif
#pragma unroll
    for (int p = 0; p < BLOCK_X; p++) {
      // pixels past dst_W (the last block's) read a clamped pixel and are not written
      int ix = (ox0 + p) * SW - PL + kx * DW;
      base[p] = src_idx(b, yc, clamp(ix, 0, src_W - 1), 0);
#if MASKED
      mask[p] = (iy >= 0 && iy < src_H && ix >= 0 && ix < src_W) ? 1.0f : 0.0f;
#endif
    }
    for (int s = 0; s < src_S; s++) {
#pragma unroll
      for (int k = 0; k < 4 * BLOCK_S; k++) {
        wv[k] = w_read(wi + k);
      }
      wi += 4 * BLOCK_S;
#pragma unroll
      for (int p = 0; p < BLOCK_X; p++) {
        FLT4 v = src_read(base[p] + s * src_H * src_W);
#if MASKED
        v = v * mask[p];
#endif
#pragma unroll
        for (int j = 0; j < BLOCK_S; j++) {
          acc[j * BLOCK_X + p] = FMA(SPLAT(v.x), wv[j], acc[j * BLOCK_X + p]);
          acc[j * BLOCK_X + p] = FMA(SPLAT(v.y), wv[BLOCK_S + j], acc[j * BLOCK_X + p]);
          acc[j * BLOCK_X + p] = FMA(SPLAT(v.z), wv[2 * BLOCK_S + j], acc[j * BLOCK_X + p]);
          acc[j * BLOCK_X + p] = FMA(SPLAT(v.w), wv[3 * BLOCK_S + j], acc[j * BLOCK_X + p]);
        }
      }
    }
  }
}
#pragma unroll
for (int p = 0; p < BLOCK_X; p++) {
  int ox = ox0 + p;
  if (ox < dst_W) {
#pragma unroll
    for (int j = 0; j < BLOCK_S; j++) {
      int os = blk * BLOCK_S + j;
      if (os < dst_S) {
        dst_write(dst_idx(b, oy, ox, os), conv_finish(acc[j * BLOCK_X + p], os BUFS));
      }
    }
  }
}
