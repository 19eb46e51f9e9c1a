// The OpenCL side of the dialect (kernels/README.md): what every OpenCL program starts with.
// Plain arithmetic is never contracted into fma (GLSL ES 3.1 cannot fuse it either); FMA() fuses
// where the device has a fused multiply-add. FMA() is a product and a sum compiled with contraction on,
// not fma(): PoCL 3.0 (LLVM 14) calls a software fma() (a 1x1 conv ran at 10 GFLOP/s), while a contracted
// product and sum becomes the hardware instruction (156 GFLOP/s), and does on a GPU's compiler too.
#pragma OPENCL FP_CONTRACT ON
#define FMA_OF(T) inline T __attribute__((overloadable)) FMA(T a, T b, T c) { return a * b + c; }
FMA_OF(float) FMA_OF(float2) FMA_OF(float4) FMA_OF(float8) FMA_OF(float16)
#undef FMA_OF
#pragma OPENCL FP_CONTRACT OFF
// T_read16(i) (OpenCL-only kernels): the 4 vec4 from index i on as one float16. A float16 is 64-byte
// aligned by default, a vec4 index only 16: the load goes through this type of vec4 alignment.
typedef float16 __attribute__((aligned(16))) float16_at4;
// PoCL 3.0 as pip ships it links min, max, clamp and select as calls, never inlined: a depthwise 3x3 made
// 60 calls per work item. These inline versions keep the built-ins' meaning (min/max as fmin/fmax: a NaN
// operand yields the other one; select by the mask's sign bit for vectors, by non-zero for scalars).
// clamp's bounds are never NaN here (constants and indices), so it is one max and one min instruction
// (a NaN x still gives lo) instead of fmax/fmin's NaN tests, 8 instructions a vector.
#define GD_MINMAX(T) \
  inline T __attribute__((overloadable)) gd_min(T a, T b) { return (b < a || a != a) ? b : a; } \
  inline T __attribute__((overloadable)) gd_max(T a, T b) { return (a < b || a != a) ? b : a; } \
  inline T __attribute__((overloadable)) gd_clamp(T x, T lo, T hi) { x = x > lo ? x : lo; return x < hi ? x : hi; }
#define GD_MINMAX_V(T, S) GD_MINMAX(T) \
  inline T __attribute__((overloadable)) gd_min(T a, S b) { return gd_min(a, (T)(b)); } \
  inline T __attribute__((overloadable)) gd_max(T a, S b) { return gd_max(a, (T)(b)); } \
  inline T __attribute__((overloadable)) gd_clamp(T x, S lo, S hi) { return gd_clamp(x, (T)(lo), (T)(hi)); }
GD_MINMAX(int) GD_MINMAX(float) GD_MINMAX_V(int4, int)
GD_MINMAX_V(float4, float) GD_MINMAX_V(float8, float) GD_MINMAX_V(float16, float)
#undef GD_MINMAX
#undef GD_MINMAX_V
#undef min
#undef max
#undef clamp
#undef select
#define min(a, b) gd_min((a), (b))
#define max(a, b) gd_max((a), (b))
#define clamp(x, lo, hi) gd_clamp((x), (lo), (hi))
#define select(a, b, c) ((c) ? (b) : (a))
// floor and ceil of a float likewise, where the compiler has the builtins (one instruction each; PoCL calls its
// library: the YOLO-style head's nearest 2x upsampling, 5 calls a work item, 103 -> 49 us). Vectors keep the library's
// functions ((floor)(x) is the function, not this macro): built lane by lane, a GELU's fabs and sign made the ViT
// block 0.30 -> 0.34 ms.
#if defined(__has_builtin)
#if __has_builtin(__builtin_floorf) && __has_builtin(__builtin_ceilf)
#define GD_SCALAR_BUILTIN(NAME, F) \
  inline float __attribute__((overloadable)) gd_##NAME(float x) { return F(x); } \
  inline float2 __attribute__((overloadable)) gd_##NAME(float2 x) { return (NAME)(x); } \
  inline float3 __attribute__((overloadable)) gd_##NAME(float3 x) { return (NAME)(x); } \
  inline float4 __attribute__((overloadable)) gd_##NAME(float4 x) { return (NAME)(x); } \
  inline float8 __attribute__((overloadable)) gd_##NAME(float8 x) { return (NAME)(x); } \
  inline float16 __attribute__((overloadable)) gd_##NAME(float16 x) { return (NAME)(x); }
GD_SCALAR_BUILTIN(floor, __builtin_floorf) GD_SCALAR_BUILTIN(ceil, __builtin_ceilf)
#undef GD_SCALAR_BUILTIN
#define floor(x) gd_floor(x)
#define ceil(x) gd_ceil(x)
#endif
#endif
// C round() (halves away from zero), inline for the same reason: the fake-quant step after every int8 op
// calls it on every value. Below 2^23, adding and subtracting 2^23 rounds to nearest even (exact; nothing
// is contracted here); a tie that went down is then moved up.
#define GD_ROUND(T) inline T __attribute__((overloadable)) gd_round(T x) { \
    T a = x < (T)(0.0f) ? -x : x; \
    T r = a < (T)(8388608.0f) ? (a + (T)(8388608.0f)) - (T)(8388608.0f) : a; \
    r = r - a == (T)(-0.5f) ? r + (T)(1.0f) : r; \
    return x < (T)(0.0f) ? -r : r; \
  }
GD_ROUND(float) GD_ROUND(float4) GD_ROUND(float16)
#undef GD_ROUND
// QROUND(x, lo, hi) = ROUND(clamp(x, lo, hi)) for integer bounds below 2^22 in magnitude, a NaN giving lo:
// the fake-quant step of every int8 op. Truncating x + copysign(0.5, x) is C round() except within an ulp
// below a half (where x + 0.5 rounds up first), far inside the float emulation's own error against TFLite's
// integer kernels; it takes 7 vector instructions where clamp and gd_round take about 20.
// (Conversions through clang's __builtin_convertvector where the compiler has it: PoCL calls convert_T.)
#if defined(__has_builtin)
#if __has_builtin(__builtin_convertvector)
#define GD_CONVERT(x, T) __builtin_convertvector((x), T)
#endif
#endif
#ifndef GD_CONVERT
#define GD_CONVERT(x, T) convert_##T(x)
#endif
// GD_AVX2_ONLY: the compiler targets x86 with AVX2 but not AVX-512: 16 vector registers of 8 floats (kernels tuned
// on AVX-512's 32 of 16 spill there) and no vpmovdb
#if defined(__AVX2__) && !defined(__AVX512F__)
#define GD_AVX2_ONLY 1
#else
#define GD_AVX2_ONLY 0
#endif
// GD_VLOAD4/8/16(k, p), GD_VSTORE4(v, k, p): vloadN(k, p) and vstore4(v, k, p), floats at any 4-byte boundary. On a CPU
// device (GD_INLINE_HALF) a plain vector load or store of an under-aligned type: PoCL calls vloadN and vstoreN from
// its library, out of line, and the work-group loop around the call stays scalar (an int8 MobileNetV3Small's
// QUANTIZE of its 160x160 RGB image, in plan order: 399 -> 297 us)
#if GD_INLINE_HALF
typedef float4 __attribute__((aligned(4))) gd_float4_a4;
typedef float8 __attribute__((aligned(4))) gd_float8_a4;
typedef float16 __attribute__((aligned(4))) gd_float16_a4;
#define GD_VLOAD4(k, p) (*(__global const gd_float4_a4*)((p) + 4 * (k)))
#define GD_VLOAD8(k, p) (*(__global const gd_float8_a4*)((p) + 8 * (k)))
#define GD_VLOAD16(k, p) (*(__global const gd_float16_a4*)((p) + 16 * (k)))
#define GD_VSTORE4(v, k, p) (*(__global gd_float4_a4*)((p) + 4 * (k)) = (v))
#else
#define GD_VLOAD4(k, p) vload4((k), (p))
#define GD_VLOAD8(k, p) vload8((k), (p))
#define GD_VLOAD16(k, p) vload16((k), (p))
#define GD_VSTORE4(v, k, p) vstore4((v), (k), (p))
#endif
// GD_LOOKUP16(table, c), GD_LOOKUP4(table, c): the 16 (4) floats of a float32 table (a lookup post-op's,
// codegen._postop_step) at the int16 (int4) indices c. On x86 with AVX-512 one gather instruction; elsewhere
// loads, which PoCL (AVX-512, Sapphire Rapids) compiles to scalar loads and inserts: in EfficientNetB0 int8's expand
// convolutions (swish as a table) they were two thirds of the kernel's time (a 1x1 convolution over 80x80 pixels, in
// plan order: 948 -> 485 us gathered); an int8 image's QUANTIZE and rescaling table, 4 values a lookup: 158 -> 133 us.
#if defined(__has_builtin) && defined(__AVX512F__)
#if __has_builtin(__builtin_ia32_gathersiv16sf)
#define GD_LOOKUP16(table, c) __builtin_ia32_gathersiv16sf((float16)(0.0f), (__global const float*)(table), (c), \
                                                           (short)-1, 4)
#endif
#if defined(__AVX512VL__) && __has_builtin(__builtin_ia32_gather3siv4sf)
#define GD_LOOKUP4(table, c) __builtin_ia32_gather3siv4sf((float4)(0.0f), (__global const float*)(table), (c), \
                                                          (uchar)0xf, 4)
#endif
#endif
#ifndef GD_LOOKUP4
#define GD_LOOKUP4(table, c) gd_lookup4((__global const float*)(table), (c))
inline float4 gd_lookup4(__global const float* t, int4 c) {
  return (float4)(t[c.x], t[c.y], t[c.z], t[c.w]);
}
#endif
#ifndef GD_LOOKUP16
#define GD_LOOKUP16(table, c) gd_lookup16((__global const float*)(table), (c))
inline float16 gd_lookup16(__global const float* t, int16 c) {
  return (float16)(t[c.s0], t[c.s1], t[c.s2], t[c.s3], t[c.s4], t[c.s5], t[c.s6], t[c.s7], t[c.s8], t[c.s9], t[c.sa],
                   t[c.sb], t[c.sc], t[c.sd], t[c.se], t[c.sf]);
}
#endif
#define GD_QROUND(T, I, U) inline T __attribute__((overloadable)) gd_qround(T x, float lo, float hi) { \
    x = x >= (T)(lo) ? x : (T)(lo); \
    x = x <= (T)(hi) ? x : (T)(hi); \
    T h = as_##T((as_##U(x) & (U)(0x80000000u)) | (U)(0x3f000000u)); \
    return GD_CONVERT(GD_CONVERT(x + h, I), T); \
  }
GD_QROUND(float4, int4, uint4) GD_QROUND(float16, int16, uint16)
#undef GD_QROUND
// gd_code4(v, inv, off): a vec4 of an 8-bit tensor's stored values, each (q - zp) * scale, as one 32-bit word of
// their codes q + 128 (inv = 1 / scale, off = zp + 128), a byte each: what conv2d_int8.cl sums. The values sit
// within a few ulps of integers, never at a rounding tie: adding 2^23 leaves the integer in the low mantissa bits
// (PoCL calls its library for rint). A kernel's t_write also stores these where the plan gives the
// argument a t_codes buffer (codegen._cl_accessors).
// The low byte of each lane is the code: a conversion to uchar4 (one vpmovdb on AVX-512) packs the word. AVX2 has
// no such instruction, and the compiler moved the bytes one by one (a vpextrd and a vpinsrb each); there the
// conversion to int32 rounds (to nearest even, as the 2^23 above) and two saturating packs make the bytes
// (ResNet50 int8's kernels that store codes, each alone, fastest of 25: 5.47 -> 5.23 ms).
#if GD_AVX2_ONLY
inline uint gd_code4(float4 v, float inv, float off) {
  int4 i = __builtin_ia32_cvtps2dq(clamp(v * inv + off, 0.0f, 255.0f));
  return as_uint4(__builtin_ia32_packuswb128(__builtin_ia32_packssdw128(i, i), (short8)(0))).x;
}
// gd_code16: the words of 4 vec4 at once (a wide kernel's t_store16). The 256-bit packs work per 128-bit half:
// the words come out as vec4 0, 2 | 1, 3 (dwords 0, 1 | 4, 5).
inline uint4 gd_code16(float16 v, float inv, float off) {
  float16 x = clamp(v * inv + off, 0.0f, 255.0f);
  short16 words = __builtin_ia32_packssdw256(__builtin_ia32_cvtps2dq256(x.lo), __builtin_ia32_cvtps2dq256(x.hi));
  uint8 bytes = as_uint8(__builtin_ia32_packuswb256(words, words));
  return (uint4)(bytes.s0, bytes.s4, bytes.s1, bytes.s5);
}
#else
inline uint gd_code4(float4 v, float inv, float off) {
  return as_uint(GD_CONVERT(as_uint4(clamp(v * inv + off, 0.0f, 255.0f) + 8388608.0f), uchar4));
}
// gd_code16: the words of 4 vec4 at once (a wide kernel's t_store16)
inline uint4 gd_code16(float16 v, float inv, float off) {
  return as_uint4(GD_CONVERT(as_uint16(clamp(v * inv + off, 0.0f, 255.0f) + 8388608.0f), uchar16));
}
#endif
// gd_decode4(w, scale, off): the vec4 of values whose codes word w holds (gd_code4's inverse: (code - off) * scale),
// the stored values to the bit (a post-op operand read from its codes: PostOp.codes_of)
inline float4 gd_decode4(uint w, float scale, float off) {
  return (GD_CONVERT(as_uchar4(w), float4) - off) * scale;
}
// gd_decode16: 4 words at once (one widening conversion of their 16 bytes)
inline float16 gd_decode16(uint4 w, float scale, float off) {
  return (GD_CONVERT(as_uchar16(w), float16) - off) * scale;
}
// fp16 storage: t_read, t_read1, t_read16 and t_write go through GD_VLOAD_HALF4, GD_VLOAD_HALF (one value: the 1x1
// convolutions' inner loop), GD_VLOAD_HALF16 and GD_VSTORE_HALF4: OpenCL's vload_half4, vload_half, vload_half16
// and vstore_half4_rte, which a GPU's compiler turns into instructions and PoCL calls from its library, vloadN
// included (the built-in model with fp16 storage: 21.4 ms, fp32 storage 5.5). On a CPU device (the backend's
// build options say GD_INLINE_HALF) they are written here and inlined:
// - on x86 with F16C, its conversion instructions on plain vector loads (vcvtph2ps: halves to floats, exact;
//   vcvtps2ph, imm 0: to nearest even): the built-in model 15.0 -> 8.6 ms; the same instructions behind the
//   library's vloadN ran 12% slower than the library's conversions;
// - elsewhere the one-value load in integer operations but for a subnormal half's (an exact conversion and a
//   power of two), the vector ones the library's. No step may make a subnormal float, which an x86 core handles
//   in microcode: placing the 15 bits in a float and scaling by 2^112 made one of every subnormal half (|x| <
//   6.1e-5, common among activations: MobileNetV2 with fp16 storage 57 -> 17.6 ms).
#if GD_INLINE_HALF && defined(__F16C__)
typedef ushort4 __attribute__((aligned(8))) gd_ushort4_a8;  // a vec4 of halves: 8-byte aligned
typedef ushort16 __attribute__((aligned(8))) gd_ushort16_a8;
inline float gd_vload_half(long j, __global const half* p) {
  float4 f = __builtin_ia32_vcvtph2ps((short8)(as_short(((__global const ushort*)p)[j]), 0, 0, 0, 0, 0, 0, 0));
  return f.x;
}
inline float4 gd_vload_half4(long i, __global const half* p) {
  ushort4 u = *(__global const gd_ushort4_a8*)(p + 4 * i);
  return __builtin_ia32_vcvtph2ps((short8)(as_short4(u), (short4)(0)));
}
inline float16 gd_vload_half16(__global const half* p) {
  short16 h = as_short16(*(__global const gd_ushort16_a8*)p);
  return (float16)(__builtin_ia32_vcvtph2ps256(h.lo), __builtin_ia32_vcvtph2ps256(h.hi));
}
inline void gd_vstore_half4_rte(float4 v, long i, __global half* p) {
  short8 h = __builtin_ia32_vcvtps2ph(v, 0);
  *(__global gd_ushort4_a8*)(p + 4 * i) = as_ushort4(h.lo);
}
#define GD_VLOAD_HALF(j, p) gd_vload_half((j), (p))
#define GD_VLOAD_HALF4(i, p) gd_vload_half4((i), (p))
#define GD_VLOAD_HALF16(p) gd_vload_half16(p)
#define GD_VSTORE_HALF4(v, i, p) gd_vstore_half4_rte((v), (i), (p))
#else
#if GD_INLINE_HALF
inline float gd_half_to_float(uint h) {
  uint em = h & 0x7fffu;
  float f = as_float((em << 13) + 0x38000000u);  // a normal half: its exponent rebiased, 15 -> 127
  f = em < 0x0400u ? (float)em * 0x1p-24f : f;  // a subnormal one: its 10 bits, scaled
  f = em >= 0x7c00u ? as_float((em << 13) | 0x7f800000u) : f;
  return as_float(as_uint(f) | ((h & 0x8000u) << 16));
}
#define GD_VLOAD_HALF(j, p) gd_half_to_float((uint)(((__global const ushort*)(p))[j]))
#else
#define GD_VLOAD_HALF(j, p) vload_half((j), (p))
#endif
#define GD_VLOAD_HALF4(i, p) vload_half4((i), (p))
#define GD_VLOAD_HALF16(p) vload_half16(0, (p))
#define GD_VSTORE_HALF4(v, i, p) vstore_half4_rte((v), (i), (p))
#endif
#define FLT4 float4
#define INT4 int4
#define MAKE_FLT4(a, b, c, d) ((float4)((a), (b), (c), (d)))
#define MAKE_INT4(a, b, c, d) ((int4)((a), (b), (c), (d)))
#define SPLAT(x) ((float4)(x))
// a work group's shared arrays written before this line are what every work item reads after it
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define SPLAT16(x) ((float16)(x))
#define TO_INT(x) ((int)(x))
#define TO_FLT(x) ((float)(x))
#define TO_INT4(v) GD_CONVERT((v), int4)
#define TO_FLT4(v) GD_CONVERT((v), float4)
#define FABS(x) fabs(x)
#define RSQRT(x) rsqrt(x)
#define FMOD(x, y) fmod((x), (y))
#define ROUND(x) gd_round(x)
#define QROUND(x, lo, hi) gd_qround((x), (lo), (hi))
#define RINT(x) rint(x)
#define ATAN2(y, x) atan2((y), (x))
#define INF_F INFINITY
#define NAN_F NAN
float4 LT4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a < b); }
float4 LE4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a <= b); }
float4 GT4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a > b); }
float4 GE4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a >= b); }
float4 EQ4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a == b); }
float4 NE4(float4 a, float4 b) { return select((float4)(0.0f), (float4)(1.0f), a != b); }
float4 SELECT4(float4 f, float4 t, float4 m) { return select(f, t, m != (float4)(0.0f)); }
// their float16 twins (the post-ops of 4 vec4 at once, codegen._WIDE_NAMES): macros, which cost a kernel that
// does not use them nothing to compile (each argument appears once)
#define GD_CMP16(a, b, OP) select((float16)(0.0f), (float16)(1.0f), (a) OP (b))
#define LT16(a, b) GD_CMP16(a, b, <)
#define LE16(a, b) GD_CMP16(a, b, <=)
#define GT16(a, b) GD_CMP16(a, b, >)
#define GE16(a, b) GD_CMP16(a, b, >=)
#define EQ16(a, b) GD_CMP16(a, b, ==)
#define NE16(a, b) GD_CMP16(a, b, !=)
#define SELECT16(f, t, m) select((f), (t), (m) != (float16)(0.0f))
float LANE(float4 v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
float4 ZERO_PAD(float4 v, int s, int c) {
  return select(v, (float4)(0.0f), (int4)(4 * s) + (int4)(0, 1, 2, 3) >= (int4)(c));
}
