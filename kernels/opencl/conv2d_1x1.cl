// OpenCL's version of dialect/conv2d_1x1.dialect (same defines, weight layout and grid; see there). The BLOCK_S output slices of a
// pixel form one accumulator of two float16 (BLOCK_S 8), one (4), a float8 (2) or float4 (1), and the BLOCK_S
// weight rows of an input channel one value of the same width, so a step is one wide fma of an input value broadcast
// from memory: one wide multiply-add (conv_wide.inc.cl). Measured on PoCL, 1x1 56x56x128->128:
// twice the speed of the float4 version.
// The work item's BLOCK_X pixels go CHUNK at a time: PoCL is fastest at 2-4 pixels per pass (more spill),
// llvmpipe at 8 per work item (the dialect's conv2d_1x1), and both read the same grid. At BLOCK_S 8 a pixel's
// two float16 halves are two independent chains already: one sum a pixel (PoCL, AVX-512, MobileNetV1's 1x1
// layers: 4.52 ms, 4.87 with pairs). 8 pixels in one pass ran 4% faster still but took PoCL 1.25x as long to
// compile.

// @runtime_channels crowded
// Two partial sums a pixel (conv_wide.inc.cl) where the registers hold them: AVX2 has 16, and 4 pixels' pairs of
// float16 (two registers each) took all of them, spilling every step (MobileNetV2's 1x1 layers, each alone, PoCL
// on AVX2: 6.42 -> 4.52 ms with one sum a pixel).
#define WIDE_PAIRS (BLOCK_S != 8 && !GD_AVX2_ONLY)
// @include opencl/conv_wide.inc.cl
#define SRC_PLANE (src_H * src_W)
// SRC_DENSE: the input is the host's dense floats (lowering/dense_inputs.py), a pixel's channels side by side
#if SRC_DENSE
#define SRC_BASE(n) (src_C * (n))
#define SRC_STEP 4
#else
#define SRC_BASE(n) (4 * (((n) / SRC_PLANE) * src_S * SRC_PLANE + (n) % SRC_PLANE))
#define SRC_STEP (4 * SRC_PLANE)
#endif
#define CHUNK (BLOCK_X < 4 ? BLOCK_X : 4)
#define DST_PLANE (dst_H * dst_W)

// @body
#if BLOCKS_INNER  // consecutive work items: every output block of one block of pixels
int order = (GID_Z * GRID_Y + GID_Y) * GRID_X + GID_X;
int blk = order % GRID_Z;
int pb = order / GRID_Z;  // this work item's block of pixels
#else
int blk = GID_Z;
int pb = GID_Y * GRID_X + GID_X;  // this work item's block of pixels
#endif
if (pb >= PIX_BLOCKS) return;
for (int p0 = pb * BLOCK_X; p0 < (pb + 1) * BLOCK_X; p0 += CHUNK) {
  WIDE_ACC acc[CHUNK];
  int base[CHUNK];  // float index of each pixel's slice 0
#pragma unroll
  for (int p = 0; p < CHUNK; p++) {
    acc[p] = WIDE_ZERO;
    int n = min(p0 + p, src_B * SRC_PLANE - 1);  // a pixel past the end recomputes the last one, unwritten
    base[p] = SRC_BASE(n);
  }
  int wi = blk * src_S * 4 * BLOCK_S;
  for (int s = 0; s < src_S; s++, wi += 4 * BLOCK_S) {
#pragma unroll
    for (int p = 0; p < CHUNK; p++) {
      long i = (long)base[p] + (long)SRC_STEP * s;  // 64-bit: no sign extension per load
      acc[p] = wide_step(acc[p], i, 1.0f, s, wi BUFS);
    }
  }
#pragma unroll
  for (int p = 0; p < CHUNK; p++) {
    int n = p0 + p;
    if (n < dst_B * DST_PLANE) {
      conv_store_wide(WIDE_SUM(acc[p]), (n / DST_PLANE) * dst_S * DST_PLANE + n % DST_PLANE, blk * BLOCK_S BUFS);
    }
  }
}
