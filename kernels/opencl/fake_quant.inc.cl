// OpenCL's dialect/fake_quant.inc.dialect (see there): v / scale as v * (1 / scale) corrected by two fused
// multiply-adds (Markstein's sequence: with 1 / scale correctly rounded, the result is the correctly rounded
// quotient, the division's to the bit, exact halves included) at a fraction of a division's cost on a CPU (a
// vector division takes 10-20 cycles, an fma half of one). A NaN from an infinite v takes the product instead,
// the division's infinity.
FLT4 fake_quant(FLT4 v, float scale, float lo, float hi) {
  float r = 1.0f / scale;
  float4 q = v * r;
  float4 d = fma(fma(-q, (float4)(scale), v), (float4)(r), q);
  return QROUND(d == d ? d : q, lo, hi) * SPLAT(scale);
}
