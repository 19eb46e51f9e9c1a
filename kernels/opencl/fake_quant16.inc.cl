// opencl/fake_quant.inc.cl for 4 vec4 at once (the wide kernels' post-ops).
float16 fake_quant16(float16 v, float scale, float lo, float hi) {
  float r = 1.0f / scale;
  float16 q = v * r;
  float16 d = fma(fma(-q, (float16)(scale), v), (float16)(r), q);
  return QROUND(d == d ? d : q, lo, hi) * SPLAT16(scale);
}
