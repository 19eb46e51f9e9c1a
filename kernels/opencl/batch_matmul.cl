// OpenCL's version of dialect/batch_matmul.dialect (same defines, operands and grid; see there), its products
// on float16 (opencl/batch_matmul.inc.cl).

// @include opencl/batch_matmul.inc.cl
// @body
int sl = GID_Z % NS;  // the slice of columns
int b = GID_Z / NS;
int h = GID_Y;
int m0 = GID_X * 4;
int xbase = b * X_SB + h * X_SH;
int ybase = b * Y_SB + h * Y_SH;
BMM16_ZERO(p0, p1, p2, p3)
for (int kg = 0; kg < KS; kg++) {  // unrolled: 4-7% slower at K = 197 (PoCL)
  BMM16_STEP(p0, p1, p2, p3, xbase, ybase, m0, sl, kg)
}
int dbase = b * D_SB + h * D_SH;
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
