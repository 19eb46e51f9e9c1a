// Included by opencl/batch_matmul.cl and opencl/batch_matmul_softmax.cl (a CPU's OpenCL: LowerContext.cpu_opencl):
// the dialect's products (dialect/batch_matmul.inc.dialect: same defines, reads and padding rules) with a work
// item's 4 rows of partial products as four float16, so a step over 4 k is 4 wide multiply-adds instead of 16 on
// float4.
// PoCL does not vectorize these kernels across work items (a one-row-per-work-item scalar version ran 3x slower
// than the float4 one), so the width has to be in the work item's own vectors.
// A step multiplies row i's 4 k (BMM_READ_X) against a tile of Y as it is stored, with no transpose:
// - Y_N_VEC (n stored as channels): the tile is 4 rows k of 4 columns (k-major); row i's lanes are spread to
//   each k's 4 lanes (.s0000111122223333) and BMM16_SUM adds the 4 rows k of the products;
// - else (k stored as channels): the tile is 4 columns n of 4 k (n-major); row i is repeated 4 times and
//   BMM16_SUM adds each column's 4 k.
// Measured on PoCL (AVX-512), a ViT block's 4 heads of 64 x 64 x 16: the scores and softmax 45 -> 21 us.

// @include dialect/batch_matmul.inc.dialect
#if Y_CONST
#define Y_READ16(i) yc_read16(i)
#else
#define Y_READ16(i) y_read16(i)
#endif

#if Y_N_VEC
#define BMM16_Y(ybase, sl, kg) (float16)(Y_READ((ybase) + 4 * (kg) * Y_SK + (sl) * Y_SN), \
  4 * (kg) + 1 < K ? Y_READ((ybase) + (4 * (kg) + 1) * Y_SK + (sl) * Y_SN) : SPLAT(0.0f), \
  4 * (kg) + 2 < K ? Y_READ((ybase) + (4 * (kg) + 2) * Y_SK + (sl) * Y_SN) : SPLAT(0.0f), \
  4 * (kg) + 3 < K ? Y_READ((ybase) + (4 * (kg) + 3) * Y_SK + (sl) * Y_SN) : SPLAT(0.0f))
#define BMM16_SPREAD(r) (r).s0000111122223333
#define BMM16_SUM(p) (((p).s0123 + (p).s4567) + ((p).s89ab + (p).scdef))
#else
#if Y_SN == 1 && N % 4 == 0  // the 4 columns side by side: one read (the scores and softmax 0.88x the time alone)
#define BMM16_Y(ybase, sl, kg) Y_READ16((ybase) + 4 * (sl) + (kg) * Y_SK)
#else
#define BMM16_Y(ybase, sl, kg) (float16)(Y_READ((ybase) + 4 * (sl) * Y_SN + (kg) * Y_SK), \
  Y_READ((ybase) + min(4 * (sl) + 1, N - 1) * Y_SN + (kg) * Y_SK), \
  Y_READ((ybase) + min(4 * (sl) + 2, N - 1) * Y_SN + (kg) * Y_SK), \
  Y_READ((ybase) + min(4 * (sl) + 3, N - 1) * Y_SN + (kg) * Y_SK))
#endif
#define BMM16_SPREAD(r) (float16)((r), (r), (r), (r))
#define BMM16_PAIRS(p) ((p).s02468ace + (p).s13579bdf)
#define BMM16_SUM(p) (BMM16_PAIRS(p).s0246 + BMM16_PAIRS(p).s1357)
#endif

// BMM16_STEP(P0, P1, P2, P3, xbase, ybase, m0, sl, kg): rows m0 .. m0 + 3's partial products (columns
// 4 sl .. 4 sl + 3) plus those over k = 4 kg .. 4 kg + 3; BMM16_SUM(Pi) is then row i's float4 of columns.
#define BMM16_STEP(P0, P1, P2, P3, xbase, ybase, m0, sl, kg) { \
  BMM_READ_X(bx0_, bx1_, bx2_, bx3_, xbase, m0, kg) \
  float16 bw_ = BMM16_Y(ybase, sl, kg); \
  P0 = FMA(BMM16_SPREAD(bx0_), bw_, P0); \
  P1 = FMA(BMM16_SPREAD(bx1_), bw_, P1); \
  P2 = FMA(BMM16_SPREAD(bx2_), bw_, P2); \
  P3 = FMA(BMM16_SPREAD(bx3_), bw_, P3); \
}
// BMM16_ZERO(P0, P1, P2, P3): declares 4 rows' partial products
#define BMM16_ZERO(P0, P1, P2, P3) \
  float16 P0 = (float16)(0.0f); \
  float16 P1 = (float16)(0.0f); \
  float16 P2 = (float16)(0.0f); \
  float16 P3 = (float16)(0.0f);
