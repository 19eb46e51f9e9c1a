// OpenCL's version of dialect/conv_transpose.dialect (same defines and weight layout; see there), written as
// opencl/conv2d.cl is: the BLOCK_S output slices of a pixel form one wide accumulator, the BLOCK_S weight rows of an
// input channel one value of that width, and each input value is broadcast into one wide multiply-add
// (conv_wide.inc.cl). A work item takes 4 output pixels of a row SW apart: ox = phase + SW * (4 q + k), k < 4. They
// take the same taps (ox + PL - kx is a multiple of SW for all or none of them), from 4 consecutive input pixels, so
// each weight row loaded serves 4 pixels. Grid (SW * ceil(ceil(dst_W / SW) / 4), dst_H, dst_B * DST_BLOCKS)
// (ops/conv.py lower_transpose_conv): x = q * SW + phase. PoCL (AVX2), each layer alone, against the dialect's
// work item per pixel of float4 steps: the DCGAN generator's three 4.36 -> 2.54 ms, the U-Net's 0.91 -> 0.58, the
// autoencoder's 0.79 -> 0.57 (one pixel a work item, wide: 4.12 for the DCGAN's).
// A work item whose 4 pixels lie in the output and read only columns inside the input (all but a row's first and
// last few) runs without masks (PoCL, AVX2, A/B in one process: the DCGAN generator 2.88 -> 2.41 ms a whole invoke;
// the U-Net's two layers, each alone, 0.95 -> 0.73). Every work item steps its taps by the strides from the first of
// its pixels' phase, as dialect/conv_transpose.dialect does.

// @include opencl/conv_wide.inc.cl
// inside: every pixel of the work item is in the output and every column it reads in the input; both call sites
// pass a constant and get their own inlined copy
__attribute__((always_inline)) inline void tconv_block(int b, int blk, int oy, int ox0, bool inside BUFS_DECL) {
  WIDE_ACC acc[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    acc[k] = WIDE_ZERO;
  }
  // taps of the pixels' phase: oy + PT - ky and ox + PL - kx multiples of the strides (both are >= 0 here)
  for (int ky = (oy + PT) % SH; ky < KH; ky += SH) {
    int ty = oy + PT - ky;
    if (ty < 0 || ty / SH >= src_H) continue;
    for (int kx = (ox0 + PL) % SW; kx < KW; kx += SW) {
      long base[4];  // float index of each pixel's input pixel's slice 0
      float mask[4];
      bool any = inside;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        int tx = ox0 + SW * k + PL - kx;  // a multiple of SW: the column tx / SW is in the input or not
        if (inside) {
          base[k] = 4 * (long)src_idx(b, ty / SH, tx / SW, 0);
          mask[k] = 1.0f;
        } else {
          bool in = tx >= 0 && tx < SW * src_W;
          base[k] = 4 * (long)src_idx(b, ty / SH, clamp(tx / SW, 0, src_W - 1), 0);
          mask[k] = in ? 1.0f : 0.0f;
          any = any || in;
        }
      }
      if (!any) continue;
      int wi = ((blk * KH + ky) * KW + kx) * src_S * BLOCK_S * 4;
      for (int s = 0; s < src_S; s++, wi += 4 * BLOCK_S) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
          acc[k] = wide_step(acc[k], base[k] + (long)(4 * src_H * src_W) * s, mask[k], s, wi BUFS);
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if (ox0 + SW * k < dst_W) {
      conv_store_wide(WIDE_SUM(acc[k]), dst_idx(b, oy, ox0 + SW * k, 0), blk * BLOCK_S BUFS);
    }
  }
}
// @body
int blk = GID_Z % DST_BLOCKS;
int b = GID_Z / DST_BLOCKS;
int ox0 = GID_X % SW + SW * 4 * (GID_X / SW);  // the first pixel; the others SW apart
// the columns its taps read: (ox0 + PL - kx) / SW over kx < KW, for the first pixel, to 3 columns on for the last
if (ox0 + 3 * SW < dst_W && ox0 + PL - (KW - 1) >= 0 && (ox0 + PL) / SW + 3 < src_W) {
  tconv_block(b, blk, GID_Y, ox0, true BUFS);
} else {
  tconv_block(b, blk, GID_Y, ox0, false BUFS);
}
