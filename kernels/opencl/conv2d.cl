// OpenCL's version of dialect/conv2d.dialect (same defines, weight layout and grid; see there), written as opencl/conv2d_1x1.cl is:
// the BLOCK_S output slices of a pixel form one float16 (BLOCK_S 4), float8 (2) or float4 (1) accumulator,
// the BLOCK_S weight rows of an input channel one vector of that width, and an input value is read as a
// scalar and broadcast, so a step is one wide multiply-add. Measured on PoCL, MobileNet's first layer
// (3x3 stride 2, 3 -> 32 channels, 224x224): about twice the speed of the float4 version.
// A work item whose taps all lie inside the input runs without masks or clamped indices (they cost that
// layer a third of its time).

// @include opencl/conv_wide.inc.cl
#define SRC_PLANE (src_H * src_W)
// SRC_BASE(b, y, x): the float index of a pixel's channel 0; SRC_STEP: from one input slice to the next. SRC_DENSE:
// the input is the host's dense BHWC floats (lowering/dense_inputs.py), its channels side by side
#if SRC_DENSE
#define SRC_BASE(b, y, x) (src_C * (((b) * src_H + (y)) * src_W + (x)))
#define SRC_STEP 4
#else
#define SRC_BASE(b, y, x) (4 * src_idx(b, y, x, 0))
#define SRC_STEP (4 * SRC_PLANE)
#endif
#if GROUPED  // dialect/conv2d.dialect's grouped weights: a block reads its group's GROUP_S input slices
#define IN_SLICES GROUP_S
#define FIRST_SLICE(blk) (((blk) / GROUP_BLOCKS) * GROUP_S)
#else
#define IN_SLICES src_S
#define FIRST_SLICE(blk) 0
#endif

// inside: every tap of the work item lies inside the input. Both call sites pass a constant and get their
// own inlined copy.
__attribute__((always_inline)) inline void conv_block(int b, int blk, int oy, int ox0, bool inside BUFS_DECL) {
  WIDE_ACC acc[BLOCK_X];
#pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
    acc[p] = WIDE_ZERO;
  }
  for (int ky = 0; ky < KH; ky++) {
    int iy = oy * SH - PT + ky * DH;
#if SRC_PAD  // a row of padding adds its value times the weights: read a clamped row, masked
    float row = iy >= 0 && iy < src_H ? 1.0f : 0.0f;
    if (!inside) iy = clamp(iy, 0, src_H - 1);
#else
    const float row = 1.0f;
    if (!inside && (iy < 0 || iy >= src_H)) continue;  // a row of zero padding adds nothing
#endif
    for (int kx = 0; kx < KW; kx++) {
      int base[BLOCK_X];  // float index of each pixel's tap in slice 0 (SRC_BASE)
      float mask[BLOCK_X];
#pragma unroll
      for (int p = 0; p < BLOCK_X; p++) {
        int ix = (ox0 + p) * SW - PL + kx * DW;
        if (inside) {
          base[p] = SRC_BASE(b, iy, ix);
          mask[p] = 1.0f;
        } else {  // pixels past dst_W (the last block's) read a clamped pixel and are not written
          base[p] = SRC_BASE(b, iy, clamp(ix, 0, src_W - 1));
          mask[p] = ix >= 0 && ix < src_W ? row : 0.0f;
        }
      }
      int wi = ((blk * KH + ky) * KW + kx) * IN_SLICES * 4 * BLOCK_S;
      for (int s = FIRST_SLICE(blk); s < FIRST_SLICE(blk) + IN_SLICES; s++, wi += 4 * BLOCK_S) {
#pragma unroll
        for (int p = 0; p < BLOCK_X; p++) {
          long i = (long)base[p] + (long)SRC_STEP * s;  // 64-bit: no sign extension per load
          acc[p] = wide_step(acc[p], i, mask[p], s, wi BUFS);
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
    if (ox0 + p < dst_W) {
      conv_store_wide(WIDE_SUM(acc[p]), dst_idx(b, oy, ox0 + p, 0), blk * BLOCK_S BUFS);
    }
  }
}
// @body
int ox0 = GID_X * BLOCK_X;
int oy = GID_Y;
int iy0 = oy * SH - PT;
int ix0 = ox0 * SW - PL;
// (checked whatever MASKED says: the last block's pixels past dst_W may reach past the input)
if (iy0 >= 0 && iy0 + (KH - 1) * DH < src_H && ix0 >= 0 && ix0 + (BLOCK_X - 1) * SW + (KW - 1) * DW < src_W) {
  conv_block(GID_Z / DST_BLOCKS, GID_Z % DST_BLOCKS, oy, ox0, true BUFS);
} else {
  conv_block(GID_Z / DST_BLOCKS, GID_Z % DST_BLOCKS, oy, ox0, false BUFS);
}
