// OpenCL's version of dialect/batch_matmul.dialect (same defines and operands; see there).
// With Y's n stored as channels (Y_N_VEC), a work item computes 4 rows by BMM_NS slices (up to 4: 16 columns) as
// outer products: a step over one k is each row's X value broadcast from memory times Y's row k of 16 columns,
// one wide multiply-add a row, as opencl/conv2d_1x1.cl does; the grid's z then counts groups of BMM_NS slices
// (ops/conv.py). The dot-product form below, which spreads each X value over 4 lanes, spent its time in those
// shuffles: a ViT block's attention times V (4 heads of 64 x 16 x 64, PoCL on AVX2), each alone 31 -> 17 us.
// Else its products on float16 (opencl/batch_matmul.inc.cl), one slice a work item.

// @include opencl/batch_matmul.inc.cl
#define BMM_NS (NS < 4 ? NS : 4)
#if X_K_VEC  // X[m, k]: a float broadcast from memory (the row clamped into M: rows past it are never written)
#define X_AT(xbase, m, k) x_read1(4 * ((xbase) + min((m), M - 1) * X_SM + ((k) >> 2) * X_SK) + ((k) & 3))
#else
#define X_AT(xbase, m, k) x_read1(4 * ((xbase) + (min((m), M - 1) >> 2) * X_SM + (k) * X_SK) + (min((m), M - 1) & 3))
#endif
// Y[k, 4 s0 .. 4 s0 + 15] as one float16 (slices past NS read the last one: their columns are never written)
#define Y_ROW16(ybase, k, s0) (float16)(Y_READ((ybase) + (k) * Y_SK + (s0) * Y_SN), \
  Y_READ((ybase) + (k) * Y_SK + min((s0) + 1, NS - 1) * Y_SN), \
  Y_READ((ybase) + (k) * Y_SK + min((s0) + 2, NS - 1) * Y_SN), \
  Y_READ((ybase) + (k) * Y_SK + min((s0) + 3, NS - 1) * Y_SN))
#define ROW_WRITE(dbase, m, s0, acc) if ((m) < M) { \
  dst_write((dbase) + (m) * D_SM + (s0) * D_SN, (acc).s0123); \
  if (BMM_NS > 1 && (s0) + 1 < NS) dst_write((dbase) + (m) * D_SM + ((s0) + 1) * D_SN, (acc).s4567); \
  if (BMM_NS > 2 && (s0) + 2 < NS) dst_write((dbase) + (m) * D_SM + ((s0) + 2) * D_SN, (acc).s89ab); \
  if (BMM_NS > 3 && (s0) + 3 < NS) dst_write((dbase) + (m) * D_SM + ((s0) + 3) * D_SN, (acc).scdef); \
}
// @body
int h = GID_Y;
int m0 = GID_X * 4;
#if Y_N_VEC
int groups = (NS + BMM_NS - 1) / BMM_NS;
int s0 = (GID_Z % groups) * BMM_NS;
int b = GID_Z / groups;
#else
int sl = GID_Z % NS;  // the slice of columns
int b = GID_Z / NS;
#endif
int xbase = b * X_SB + h * X_SH;
int ybase = b * Y_SB + h * Y_SH;
int dbase = b * D_SB + h * D_SH;
#if Y_N_VEC
float16 a0 = (float16)(0.0f);
float16 a1 = (float16)(0.0f);
float16 a2 = (float16)(0.0f);
float16 a3 = (float16)(0.0f);
for (int k = 0; k < K; k++) {
  float16 y = Y_ROW16(ybase, k, s0);
  a0 = FMA((float16)(X_AT(xbase, m0, k)), y, a0);
  a1 = FMA((float16)(X_AT(xbase, m0 + 1, k)), y, a1);
  a2 = FMA((float16)(X_AT(xbase, m0 + 2, k)), y, a2);
  a3 = FMA((float16)(X_AT(xbase, m0 + 3, k)), y, a3);
}
ROW_WRITE(dbase, m0, s0, a0)
ROW_WRITE(dbase, m0 + 1, s0, a1)
ROW_WRITE(dbase, m0 + 2, s0, a2)
ROW_WRITE(dbase, m0 + 3, s0, a3)
#else
BMM16_ZERO(p0, p1, p2, p3)
for (int kg = 0; kg < KS; kg++) {  // unrolled: 4-7% slower at K = 197 (PoCL)
  BMM16_STEP(p0, p1, p2, p3, xbase, ybase, m0, sl, kg)
}
dst_write(dbase + m0 * D_SM + sl * D_SN, BMM16_SUM(p0));
if (m0 + 1 < M) {
  dst_write(dbase + (m0 + 1) * D_SM + sl * D_SN, BMM16_SUM(p1));
}
if (m0 + 2 < M) {
  dst_write(dbase + (m0 + 2) * D_SM + sl * D_SN, BMM16_SUM(p2));
}
if (m0 + 3 < M) {
  dst_write(dbase + (m0 + 3) * D_SM + sl * D_SN, BMM16_SUM(p3));
}
#endif
