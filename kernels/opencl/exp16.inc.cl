// Included by the OpenCL softmaxes (a CPU's OpenCL): EXP16(x), the exp of 16 values, where those are at most 0
// (a softmax's scores less their maximum, times a beta >= 0) an inline polynomial instead of the library's exp,
// whose out-of-line call was half a ViT block's fused scores-and-softmax kernel (PoCL on AVX2).
// exp_nonpos16: x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, so r is exact), e^r by a degree-6
// polynomial (least squares over Chebyshev nodes: at most 1.0e-7 relative, float32 evaluation included, the
// library's bound being 3 ulp), times 2^k built in the exponent bits. k is rounded by adding and subtracting
// 1.5 * 2^23 (the built-in rint and fma are library calls in PoCL 3.0; FMA is prelude.inc.cl's). Below -87,
// e^x (< 1.7e-38) is taken as e^-87; a NaN stays NaN.
#define EXP_MAGIC 12582912.0f
inline float16 exp_nonpos16(float16 x) {
  x = x < (float16)(-87.0f) ? (float16)(-87.0f) : x;
  float16 big = x * 1.44269504f + EXP_MAGIC;
  float16 k = big - EXP_MAGIC;
  float16 r = FMA(k, (float16)(-0.693145751953125f), x);
  r = FMA(k, (float16)(-1.428606765330187e-06f), r);
  float16 p = FMA((float16)(0.0013828279916197062f), r, (float16)(0.008375619538128376f));
  p = FMA(p, r, (float16)(0.041668426245450974f));
  p = FMA(p, r, (float16)(0.16666410863399506f));
  p = FMA(p, r, (float16)(0.49999991059303284f));
  p = FMA(p, r, (float16)(1.0f));
  p = FMA(p, r, (float16)(1.0f));
  return p * as_float16(((as_int16(big) - as_int(EXP_MAGIC)) + 127) << 23);
}
#define EXP16(x) (BETA >= 0.0f ? exp_nonpos16(x) : exp(x))
