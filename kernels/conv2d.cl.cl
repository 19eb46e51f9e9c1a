// OpenCL's conv2d.cl (same defines, weight layout and grid; see there), written as conv2d_1x1.cl.cl is:
// the BLOCK_S output slices of a pixel form one float16 (BLOCK_S 4), float8 (2) or float4 (1) accumulator,
// the BLOCK_S weight rows of an input channel one vector of that width, and an input value is read as a
// scalar and broadcast, so a step is one wide multiply-add. Measured on PoCL, MobileNet's first layer
// (3x3 stride 2, 3 -> 32 channels, 224x224): about twice the speed of the float4 version.

// @include conv_wide.inc.cl
#define SRC_PLANE (src_H * src_W)

// @body
int blk = GID_Z % DST_BLOCKS;
int b = GID_Z / DST_BLOCKS;
int oy = GID_Y;
int ox0 = GID_X * BLOCK_X;
ACCV acc[BLOCK_X];
#pragma unroll
for (int p = 0; p < BLOCK_X; p++) {
  acc[p] = (ACCV)(0.0f);
}
int wi = blk * KH * KW * src_S * 4 * BLOCK_S;
for (int ky = 0; ky < KH; ky++) {
  int iy = oy * SH - PT + ky * DH;
  int yc = clamp(iy, 0, src_H - 1);
  for (int kx = 0; kx < KW; kx++) {
    int base[BLOCK_X];  // float index of each pixel's tap in slice 0
#if MASKED
    float mask[BLOCK_X];
#endif
#pragma unroll
    for (int p = 0; p < BLOCK_X; p++) {
      // pixels past dst_W (the last block's) read a clamped pixel and are not written
      int ix = (ox0 + p) * SW - PL + kx * DW;
      base[p] = 4 * src_idx(b, yc, clamp(ix, 0, src_W - 1), 0);
#if MASKED
      mask[p] = (iy >= 0 && iy < src_H && ix >= 0 && ix < src_W) ? 1.0f : 0.0f;
#endif
    }
    for (int s = 0; s < src_S; s++) {
      ACCV w0 = ROWS(wi);
      ACCV w1 = ROWS(wi + BLOCK_S);
      ACCV w2 = ROWS(wi + 2 * BLOCK_S);
      ACCV w3 = ROWS(wi + 3 * BLOCK_S);
      wi += 4 * BLOCK_S;
#pragma unroll
      for (int p = 0; p < BLOCK_X; p++) {
        int i = base[p] + 4 * s * SRC_PLANE;
#if MASKED
        float m = mask[p];
#else
        float m = 1.0f;
#endif
        acc[p] = FMA((ACCV)(src_read1(i) * m), w0, acc[p]);
        acc[p] = FMA((ACCV)(src_read1(i + 1) * m), w1, acc[p]);
        acc[p] = FMA((ACCV)(src_read1(i + 2) * m), w2, acc[p]);
        acc[p] = FMA((ACCV)(src_read1(i + 3) * m), w3, acc[p]);
      }
    }
  }
}
#pragma unroll
for (int p = 0; p < BLOCK_X; p++) {
  if (ox0 + p < dst_W) {
    conv_store_wide(acc[p], dst_idx(b, oy, ox0 + p, 0), blk * BLOCK_S BUFS);
  }
}
