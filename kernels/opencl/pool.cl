// OpenCL's version of dialect/pool.dialect (same defines and arithmetic, lane for lane) for a CPU device: a work item
// takes 4 consecutive output pixels of one row and slice as one float16, each window tap of the 4 pixels one float16
// of their 4 columns (a column outside the input masked: 0 for a sum, -INF for a maximum, which changes no lane's
// value), and stores them through the wide post-ops (dst_finish16, dst_store16). The pixels' windows share their
// rows; each has its own count of pixels inside the input. Grid (ceil(W / 4), H, B * S) of dst; past the row's end a
// work item repeats its last pixel and stores only its own.

#if IS_MAX
#define EMPTY (-INF_F)
#else
#define EMPTY 0.0f
#endif
// an int4 of one value per pixel as an int16 or float16 of 4 lanes per pixel
#define SPREAD_INT(v) ((int16)((v).xxxx, (v).yyyy, (v).zzzz, (v).wwww))
#define SPREAD_FLT(v) ((float16)((v).xxxx, (v).yyyy, (v).zzzz, (v).wwww))
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
int x0 = 4 * GID_X;
int y0 = GID_Y * SH - PT;
int ys = max(y0, 0);
int ye = min(y0 + KH, src_H);
int4 first = min((int4)(x0) + (int4)(0, 1, 2, 3), (int4)(dst_W - 1)) * SW - PL;  // each pixel's window's first column
int4 count = (ye - ys) * (min(first + KW, (int4)(src_W)) - max(first, (int4)(0)));
#if QUANT && !src_HALF && KH * KW <= 64
#define SUM_ONCE 1  // the dialect's sum rounded once (fp32 storage)
#else
#define SUM_ONCE 0
#endif
float16 acc = (float16)(EMPTY);
for (int y = ys; y < ye; y++) {
  int row = src_idx(b, y, 0, s);
  for (int kx = 0; kx < KW; kx++) {
    int4 x = first + kx;
    int4 c = clamp(x, 0, src_W - 1);
    float16 v = (float16)(src_read(row + c.x), src_read(row + c.y), src_read(row + c.z), src_read(row + c.w));
#if QUANT && !SUM_ONCE
    v = QROUND(v * (float16)(IN_INV), -4194304.0f, 4194304.0f) + (float16)(IN_ZP);
#endif
    v = select(v, (float16)(EMPTY), SPREAD_INT(x != c));
#if IS_MAX
    acc = max(acc, v);
#else
    acc = acc + v;
#endif
  }
}
#if QUANT
float16 n = SPREAD_FLT(GD_CONVERT(count, float4));
#if SUM_ONCE
acc = QROUND(acc * (float16)(IN_INV), -4194304.0f, 4194304.0f) + n * (float16)(IN_ZP);
#endif
float16 bump = SPREAD_FLT(GD_CONVERT(count / 2, float4));
float16 q = select(trunc((acc - bump) / n), trunc((acc + bump) / n), acc > (float16)(0.0f));
acc = (q - (float16)(IN_ZP)) * (float16)(IN_SCALE);
#elif !IS_MAX
acc = acc / SPREAD_FLT(GD_CONVERT(count, float4));
#endif
#if ACT
acc = clamp(acc, ACT_MIN, ACT_MAX);
#endif
int i = dst_idx(b, GID_Y, x0, s);
if (x0 + 3 < dst_W) {
  int4 i4 = (int4)(i) + (int4)(0, 1, 2, 3);
  dst_store16(i4, dst_finish16(acc, i4 BUFS), 4);
} else {
  dst_write(i, acc.s0123);
  if (x0 + 1 < dst_W) dst_write(i + 1, acc.s4567);
  if (x0 + 2 < dst_W) dst_write(i + 2, acc.s89ab);
}
