// OpenCL's version of dialect/batch_matmul_softmax.dialect (same defines, operands, passes and grid; see there),
// with the work item's 4 rows of one slice as a float16 (row i in lanes 4i .. 4i + 3) in every pass: the products
// (opencl/batch_matmul.inc.cl), each row's max and sum (a float16 of lanes, reduced per row after the pass), one
// exp (opencl/exp16.inc.cl) and one product by the row sum's inverse of 16 values at a time. A ViT block's 4 heads of
// 64 x 64 x 16 on PoCL: 45 -> 21 us (AVX-512); 47 -> 34 us with the inline exp and the inverse (AVX2), each alone.

// @include opencl/batch_matmul.inc.cl
// @include opencl/lanes16.inc.cl
// @include opencl/exp16.inc.cl

#if QUANT  // dialect/batch_matmul_softmax.dialect's roundings, 16 values at a time
// @include opencl/fake_quant16.inc.cl
float16 scores16(float16 v BUFS_DECL) {
  int16 c = GD_CONVERT(QROUND(v * (float16)(Q_IN_INV), Q_IN_LO, Q_IN_HI), int16) + SCORES_OFFSET;
  return GD_LOOKUP16(scores_buf, c);  // a float32 table (ops/conv.py)
}
#define SCORES16(v) scores16((v) BUFS)
#define PROBABILITY16(v) fake_quant16((v), Q_OUT_S, Q_OUT_LO, Q_OUT_HI)
#else
#define SCORES16(v) ((v) * SCALE)
#define PROBABILITY16(v) (v)
#endif
// the lanes of columns past N in slice sl (the last: N % 4 != 0 only)
#define PAST_N(sl) (LANES16 >= (float16)(TO_FLT(N - 4 * (sl))))
// the 4 rows of slice i0 (a row's index past M reads the last row: its values are never written)
#define ROWS_READ(i0) (float16)(dst_read((i0) + m0 * D_SM), dst_read((i0) + r1), dst_read((i0) + r2), \
  dst_read((i0) + r3))
#define ROWS_WRITE(i0, v) { \
  dst_write((i0) + m0 * D_SM, (v).s0123); \
  if (m0 + 1 < M) dst_write((i0) + r1, (v).s4567); \
  if (m0 + 2 < M) dst_write((i0) + r2, (v).s89ab); \
  if (m0 + 3 < M) dst_write((i0) + r3, (v).scdef); \
}
// @body
int m0 = GID_X * 4;
int h = GID_Y;
int b = GID_Z;
int xbase = b * X_SB + h * X_SH;
int ybase = b * Y_SB + h * Y_SH;
int dbase = b * D_SB + h * D_SH;
int r1 = min(m0 + 1, M - 1) * D_SM;
int r2 = min(m0 + 2, M - 1) * D_SM;
int r3 = min(m0 + 3, M - 1) * D_SM;
float16 mx = (float16)(-INF_F);
for (int sl = 0; sl < NS; sl++) {
  BMM16_ZERO(p0, p1, p2, p3)
#pragma unroll
  for (int kg = 0; kg < KS; kg++) {  // unrolled: 8 heads of 197 x 64 x 197 25% faster (PoCL)
    BMM16_STEP(p0, p1, p2, p3, xbase, ybase, m0, sl, kg)
  }
  float16 s = SCORES16((float16)(BMM16_SUM(p0), BMM16_SUM(p1), BMM16_SUM(p2), BMM16_SUM(p3)));
  ROWS_WRITE(dbase + sl * D_SN, s)
#if N % 4 != 0
  if (sl == NS - 1) {  // columns past N take no part
    s = PAST_N(sl) ? (float16)(-INF_F) : s;
  }
#endif
  mx = max(mx, s);
}
mx = QUARTERS_MAX(mx);
// the exps of the real columns summed (selected, not multiplied by 0: a padding column's exp may be inf)
float16 sum = (float16)(0.0f);
for (int sl = 0; sl < NS; sl++) {
  float16 e = EXP16((ROWS_READ(dbase + sl * D_SN) - mx) * BETA);
  ROWS_WRITE(dbase + sl * D_SN, e)
#if N % 4 != 0
  if (sl == NS - 1) {
    e = PAST_N(sl) ? (float16)(0.0f) : e;
  }
#endif
  sum += e;
}
sum = QUARTERS_SUM(sum);
float16 inverse = 1.0f / sum;  // one division a row (as opencl/softmax.cl)
for (int sl = 0; sl < NS; sl++) {
  float16 d = PROBABILITY16(ROWS_READ(dbase + sl * D_SN) * inverse);
  ROWS_WRITE(dbase + sl * D_SN, d)
}
