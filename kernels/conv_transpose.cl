// TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias, as a gather. Input pixel (iy, ix) adds its
// products with tap (ky, kx) to output pixel (iy * SH - PT + ky, ix * SW - PL + kx), so output (oy, ox)
// sums, over the taps with oy + PT - ky a non-negative multiple of SH (and likewise along x), the input
// pixel ((oy + PT - ky) / SH, (ox + PL - kx) / SW) when it lies inside the input.
// A work item computes BLOCK_S output slices of one pixel.
// w: rows [block][ky][kx][src slice][c < 4][j < BLOCK_S] as in conv2d.cl; bias (HAS_BIAS): a row per
// output slice, zero-padded to whole blocks. ACT: clamp to [ACT_MIN, ACT_MAX].
// Grid (dst_W, dst_H, dst_B * DST_BLOCKS).

// @include conv_finish.inc.cl
// @body
int blk = GID_Z % DST_BLOCKS;
int b = GID_Z / DST_BLOCKS;
FLT4 acc[BLOCK_S];
#pragma unroll
for (int j = 0; j < BLOCK_S; j++) {
  acc[j] = SPLAT(0.0f);
}
for (int ky = 0; ky < KH; ky++) {
  int ty = GID_Y + PT - ky;
  if (ty >= 0 && ty % SH == 0 && ty / SH < src_H) {
    for (int kx = 0; kx < KW; kx++) {
      int tx = GID_X + PL - kx;
      if (tx >= 0 && tx % SW == 0 && tx / SW < src_W) {
        int wi = ((blk * KH + ky) * KW + kx) * src_S * BLOCK_S * 4;
        int i = src_idx(b, ty / SH, tx / SW, 0);
        for (int s = 0; s < src_S; s++) {
          FLT4 v = src_read(i + s * src_H * src_W);
#pragma unroll
          for (int j = 0; j < BLOCK_S; j++) {
            acc[j] = FMA(SPLAT(v.x), w_read(wi + j), acc[j]);
            acc[j] = FMA(SPLAT(v.y), w_read(wi + BLOCK_S + j), acc[j]);
            acc[j] = FMA(SPLAT(v.z), w_read(wi + 2 * BLOCK_S + j), acc[j]);
            acc[j] = FMA(SPLAT(v.w), w_read(wi + 3 * BLOCK_S + j), acc[j]);
          }
          wi += BLOCK_S * 4;
        }
      }
    }
  }
}
#pragma unroll
for (int j = 0; j < BLOCK_S; j++) {
  int os = blk * BLOCK_S + j;
  if (os < dst_S) {
    dst_write(dst_idx(b, GID_Y, GID_X, os), conv_finish(acc[j], os BUFS));
  }
}
