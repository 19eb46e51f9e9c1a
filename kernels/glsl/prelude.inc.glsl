// The GLSL ES 3.10 side of the dialect (kernels/README.md): what every compute shader starts with.
#define FLT4 vec4
#define INT4 ivec4
#define MAKE_FLT4(a, b, c, d) vec4((a), (b), (c), (d))
#define MAKE_INT4(a, b, c, d) ivec4((a), (b), (c), (d))
#define SPLAT(x) vec4(x)
#define TO_INT(x) int(x)
#define TO_FLT(x) float(x)
#define TO_INT4(v) ivec4(v)
#define TO_FLT4(v) vec4(v)
#define FABS(x) abs(x)
#define RSQRT(x) inversesqrt(x)
// GLSL ES 3.1 has no fma(): llvmpipe rounds the product before the add, a GPU's compiler may fuse them.
#define FMA(a, b, c) ((a) * (b) + (c))
// a work group's shared arrays written before this line are what every invocation reads after it (GLSL ES allows it
// in main() only, outside any branch or loop)
#define BARRIER() memoryBarrierShared(); barrier()
#define RINT(x) roundEven(x)
#define ATAN2(y, x) atan((y), (x))
#define INF_F uintBitsToFloat(0x7f800000u)
#define NAN_F uintBitsToFloat(0x7fc00000u)
// C fmod, exact like OpenCL's: subtract |y| * 2^k, largest first; each step is exact (Sterbenz), and
// there are at most exponent(x) - exponent(y) + 1 of them (the bound only guards against a hang).
float FMOD(float x, float y) {
  if (isinf(x) || isnan(x) || isnan(y) || y == 0.0) return NAN_F;
  float ay = abs(y);
  float r = abs(x);
  for (int it = 0; it < 300 && r >= ay; it++) {
    int er;
    int ey;
    frexp(r, er);
    frexp(ay, ey);
    float d = ldexp(ay, er - ey);
    if (d > r) d *= 0.5;
    r -= d;
  }
  return x < 0.0 ? -r : r;
}
vec4 FMOD(vec4 x, vec4 y) { return vec4(FMOD(x.x, y.x), FMOD(x.y, y.y), FMOD(x.z, y.z), FMOD(x.w, y.w)); }
// C round(): halves away from zero (GLSL round() leaves the direction to the implementation).
float ROUND(float x) { float t = trunc(x); return t + sign(x) * step(0.5, abs(x - t)); }
vec4 ROUND(vec4 x) { vec4 t = trunc(x); return t + sign(x) * step(0.5, abs(x - t)); }
#define QROUND(x, lo, hi) ROUND(clamp((x), (lo), (hi)))
vec4 LT4(vec4 a, vec4 b) { return vec4(lessThan(a, b)); }
vec4 LE4(vec4 a, vec4 b) { return vec4(lessThanEqual(a, b)); }
vec4 GT4(vec4 a, vec4 b) { return vec4(greaterThan(a, b)); }
vec4 GE4(vec4 a, vec4 b) { return vec4(greaterThanEqual(a, b)); }
vec4 EQ4(vec4 a, vec4 b) { return vec4(equal(a, b)); }
vec4 NE4(vec4 a, vec4 b) { return vec4(notEqual(a, b)); }
vec4 SELECT4(vec4 f, vec4 t, vec4 m) { return mix(f, t, notEqual(m, vec4(0.0))); }
float LANE(vec4 v, int k) { return v[k]; }
vec4 ZERO_PAD(vec4 v, int s, int c) {
  return mix(v, vec4(0.0), greaterThanEqual(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(c)));
}
