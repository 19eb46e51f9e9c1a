// CONV_2D with a 1x1 window at stride 1 without padding, and FULLY_CONNECTED whose input rows are whole
// pixels: per pixel, dst = act(w x src + bias), a matrix product over channels. Pixels are numbered across
// B, H and W (src and dst hold the same number N of pixels, in shapes that may differ).
// OpenCL has its own version, conv2d_1x1.cl.cl (float16 accumulators: twice as fast on PoCL).
//
// A work item computes BLOCK_X consecutive pixels by BLOCK_S output slices (see conv2d.cl); there is no
// padding to test and no window to walk, only the loop over input slices.
// w: rows [block][src slice][c < 4][j < BLOCK_S], as conv2d.cl's for a 1x1 window.
// bias (HAS_BIAS): one row per output slice, zero-padded to whole blocks. ACT: clamp to [ACT_MIN, ACT_MAX].
// Grid (X, Y, DST_BLOCKS): the PIX_BLOCKS = ceil(N / BLOCK_X) blocks of pixels numbered GID_Y * X + GID_X
// (x and y both, as GL caps each grid dimension at 65535 groups).

#define SRC_PLANE (src_H * src_W)
#define DST_PLANE (dst_H * dst_W)

// @include conv_finish.inc.cl
// @body
int blk = GID_Z;
int pb = GID_Y * GRID_X + GID_X;  // this work item's block of pixels
if (pb >= PIX_BLOCKS) return;
int n0 = pb * BLOCK_X;
FLT4 acc[BLOCK_S * BLOCK_X];
#pragma unroll
for (int k = 0; k < BLOCK_S * BLOCK_X; k++) {
  acc[k] = SPLAT(0.0f);
}
int base[BLOCK_X];  // vec4 index of each pixel's slice 0
#pragma unroll
for (int p = 0; p < BLOCK_X; p++) {
  int n = min(n0 + p, src_B * SRC_PLANE - 1);  // a pixel past the end recomputes the last one, unwritten
  base[p] = (n / SRC_PLANE) * src_S * SRC_PLANE + n % SRC_PLANE;
}
FLT4 wv[4 * BLOCK_S];
int wi = blk * src_S * 4 * BLOCK_S;
for (int s = 0; s < src_S; s++) {
#pragma unroll
  for (int k = 0; k < 4 * BLOCK_S; k++) {
    wv[k] = w_read(wi + k);
  }
  wi += 4 * BLOCK_S;
#pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
    FLT4 v = src_read(base[p] + s * SRC_PLANE);
#pragma unroll
    for (int j = 0; j < BLOCK_S; j++) {
      acc[j * BLOCK_X + p] = FMA(SPLAT(v.x), wv[j], acc[j * BLOCK_X + p]);
      acc[j * BLOCK_X + p] = FMA(SPLAT(v.y), wv[BLOCK_S + j], acc[j * BLOCK_X + p]);
      acc[j * BLOCK_X + p] = FMA(SPLAT(v.z), wv[2 * BLOCK_S + j], acc[j * BLOCK_X + p]);
      acc[j * BLOCK_X + p] = FMA(SPLAT(v.w), wv[3 * BLOCK_S + j], acc[j * BLOCK_X + p]);
    }
  }
}
// The pixels are written one macro each rather than by a loop over p: Mesa unrolls a loop only while its
// body stays small, and a heavier write (fp16 packing, fused post-ops) would leave acc[] indexed at run time,
// which makes llvmpipe keep the whole array in memory: 3x slower. BLOCK_X is a power of two <= 8.
#define WRITE_PIXEL(p) { \
  int n = n0 + (p); \
  if (n < dst_B * DST_PLANE) { \
    int o = (n / DST_PLANE) * dst_S * DST_PLANE + n % DST_PLANE; \
    for (int j = 0; j < BLOCK_S; j++) { \
      int os = blk * BLOCK_S + j; \
      if (os < dst_S) { \
        dst_write(o + os * DST_PLANE, conv_finish(acc[j * BLOCK_X + (p)], os BUFS)); \
      } \
    } \
  } \
}
WRITE_PIXEL(0)
#if BLOCK_X > 1
WRITE_PIXEL(1)
#endif
#if BLOCK_X > 2
WRITE_PIXEL(2)
WRITE_PIXEL(3)
#endif
#if BLOCK_X > 4
WRITE_PIXEL(4)
WRITE_PIXEL(5)
WRITE_PIXEL(6)
WRITE_PIXEL(7)
#endif
