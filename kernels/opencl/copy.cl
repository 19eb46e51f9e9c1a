// OpenCL's version of dialect/copy.dialect for a CPU device (LowerContext.copy_layout): a work item takes 4
// consecutive pixels of one row and slice as one float16: loads and stores 64 bytes wide, and the fused post-op
// chain on 4 vec4 at once where its names have float16 forms (dst_finish16; an 8-bit op's fake-quant step then
// divides 16 values at a time). Grid (ceil(W / 4), H, B * S) of dst; a row's last work item of fewer than 4 pixels
// takes them one by one. PoCL, a plan's copies each alone: DenseNet121 int8 2.50 -> 1.85 ms, fp32 1.31 -> 1.20,
// EfficientNetB0 int8 0.65 -> 0.55; whole plans in one process: DenseNet121 int8 0.97x, MobileNetV3Large int8 0.93x.
// SRC_DENSE: src is the host's dense floats (lowering/dense_inputs.py): lane k of pixel n's slice s at
// DENSE_C * n + 4 s + k, 0 past DENSE_C, its channel count as a constant (src_C is a run-time value here), which
// picks an RGB image's loads at compile time
// @runtime_channels
#if SRC_DENSE
__attribute__((always_inline)) inline float4 dense_vec4(int n, int s BUFS_DECL) {
  int c = 4 * s;
  int j = DENSE_C * n + c;
  return (float4)(src_read1(j), c + 1 < DENSE_C ? src_read1(j + 1) : 0.0f, c + 2 < DENSE_C ? src_read1(j + 2) : 0.0f,
                  c + 3 < DENSE_C ? src_read1(j + 3) : 0.0f);
}
#define SRC_VEC4(i, n) dense_vec4((n), s BUFS)
#if DENSE_C <= 4  // one slice: 4 pixels are 4 DENSE_C consecutive floats, read in one or two loads (an RGB image:
                  // MobileNetV1 int8's 224x224 input quantized 100 -> 84 us; the conversion and copy before: 123)
__attribute__((always_inline)) inline float16 dense16(int n BUFS_DECL) {
  __global const float* p = (__global const float*)src_buf + DENSE_C * n;
#if DENSE_C == 1
  float4 a = GD_VLOAD4(0, p);
  return (float16)(a.s0, 0.0f, 0.0f, 0.0f, a.s1, 0.0f, 0.0f, 0.0f, a.s2, 0.0f, 0.0f, 0.0f, a.s3, 0.0f, 0.0f, 0.0f);
#elif DENSE_C == 2
  float8 a = GD_VLOAD8(0, p);
  return (float16)(a.s01, 0.0f, 0.0f, a.s23, 0.0f, 0.0f, a.s45, 0.0f, 0.0f, a.s67, 0.0f, 0.0f);
#elif DENSE_C == 3
  float8 a = GD_VLOAD8(0, p);
  float4 b = GD_VLOAD4(0, p + 8);
  return (float16)(a.s012, 0.0f, a.s345, 0.0f, a.s67, b.s0, 0.0f, b.s123, 0.0f);
#else
  return GD_VLOAD16(0, p);
#endif
}
#define SRC_VEC16(i, n) dense16((n) BUFS)
#else
#define SRC_VEC16(i, n) ((float16)(SRC_VEC4(i, n), SRC_VEC4(i, (n) + 1), SRC_VEC4(i, (n) + 2), SRC_VEC4(i, (n) + 3)))
#endif
#else
#define SRC_VEC4(i, n) src_read(i)
#define SRC_VEC16(i, n) src_read16(i)
#endif
// @body
int b = dst_B == 1 ? 0 : GID_Z / dst_S;
int s = dst_B == 1 ? GID_Z : GID_Z % dst_S;
int x0 = 4 * GID_X;
int i = dst_idx(b, GID_Y, x0, s);
int n = (b * dst_H + GID_Y) * dst_W + x0;  // the first pixel's index (SRC_DENSE)
#if SRC_DENSE && DENSE_C == 1 && defined(GD_POSTOP_VALUES)
if (x0 + 3 < dst_W) {  // 4 pixels of one channel: their post-ops on one vec4, not on the 16 lanes stored
  float4 a = postop_values(GD_VLOAD4(0, (__global const float*)src_buf + n) BUFS);
  dst_store16((int4)(i) + (int4)(0, 1, 2, 3),
              (float16)(a.s0, 0.0f, 0.0f, 0.0f, a.s1, 0.0f, 0.0f, 0.0f, a.s2, 0.0f, 0.0f, 0.0f, a.s3, 0.0f, 0.0f, 0.0f), 4);
  return;
}
#elif SRC_DENSE && DENSE_C == 3 && defined(GD_POSTOP_VALUES)
if (x0 + 3 < dst_W) {  // 4 RGB pixels: their 12 values stepped as 3 vec4, not the 16 lanes stored (an int8 model's
                       // QUANTIZE of its image: a division a value)
  __global const float* p = (__global const float*)src_buf + 3 * n;
  float4 a = postop_values(GD_VLOAD4(0, p) BUFS), b = postop_values(GD_VLOAD4(1, p) BUFS), c = postop_values(GD_VLOAD4(2, p) BUFS);
  dst_store16((int4)(i) + (int4)(0, 1, 2, 3),
              (float16)(a.s012, 0.0f, a.s3, b.s01, 0.0f, b.s23, c.s0, 0.0f, c.s123, 0.0f), 4);
  return;
}
#endif
if (x0 + 3 < dst_W) {
  float16 v = dst_finish16(SRC_VEC16(i, n), (int4)(i) + (int4)(0, 1, 2, 3) BUFS);
  dst_store16((int4)(i) + (int4)(0, 1, 2, 3), v, 4);
} else {
  for (int k = 0; x0 + k < dst_W; k++) {
    dst_write(i + k, SRC_VEC4(i + k, n + k));
  }
}
