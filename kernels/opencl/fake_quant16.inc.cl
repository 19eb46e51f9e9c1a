// dialect/fake_quant.inc.dialect for 4 vec4 at once (the wide kernels' post-ops).
#ifndef GD_FAKE_QUANT16
#define GD_FAKE_QUANT16
float16 fake_quant16(float16 v, float scale, float lo, float hi) {
  return QROUND(v / SPLAT16(scale), lo, hi) * SPLAT16(scale);
}
float16 fake_quant16_rcp(float16 v, float inverse, float scale, float lo, float hi) {
  return QROUND(v * SPLAT16(inverse), lo, hi) * SPLAT16(scale);
}
#endif
