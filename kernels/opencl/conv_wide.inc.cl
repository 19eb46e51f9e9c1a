// Included by the OpenCL convolutions written with wide vectors (conv2d.cl, conv2d_1x1.cl): the
// BLOCK_S output slices of a pixel form one accumulator ACCV: two float16 (BLOCK_S 8, chosen where the device's
// vectors hold 16 floats: ops/conv.py gpu_blocking), one float16 (4), float8 (2) or float4 (1); ROWS(i) reads
// the BLOCK_S weight rows from row i on as one such value; PART(a, j) is slice j (BLOCK_S <= 4); V_FMA, V_ZERO,
// V_ADD, V_MUL and V_CLAMP are the arithmetic every ACCV has.
// WIDE_ACC: a pixel's accumulator (WIDE_ZERO starts it, WIDE_SUM ends it). Where the including kernel defines
// WIDE_PAIRS 1, two partial sums (lanes 0 and 2 of each input slice in one, 1 and 3 in the other): a work item of
// 4 pixels then has 8 independent chains of multiply-adds, as many as two FMA units of 4 cycles' latency keep
// busy. With one sum a pixel, the 1x1 convolutions ran 4-11% slower (PoCL, AVX-512); the 3x3 convolutions ran
// 2.5% faster with one (ResNet50), their window's taps giving the core other work.
// wide_step(acc, i, m, s, wi): acc plus input slice s of one pixel (its 4 floats from float index i on, masked
// by m: PADDED_LANE) against the weight rows of those 4 input channels from row wi on; lanes past src_C (zero in a
// partial last slice) are skipped. The weight rows are read per call: the compiler keeps one load for all pixels.
// conv_store_wide(v, base, os): bias, fused activation, the output's post-ops and the stores of one pixel's
// accumulator v, output slices os .. os + BLOCK_S - 1 (those past dst_S left out); base is the pixel's
// vec4 index at slice 0. At BLOCK_S 4 and 8 the post-ops run on each float16 (conv_store.inc.cl).

// @include opencl/conv_store.inc.cl
#if BLOCK_S == 8
typedef struct { float16 lo, hi; } ACCV;
#define ROWS(i) ((ACCV){w_read16(i), w_read16((i) + 4)})
#define BIAS_ROWS(i) ((ACCV){bias_read16(i), bias_read16((i) + 4)})
#elif BLOCK_S == 4
#define ACCV float16
#define ROWS(i) w_read16(i)
#define BIAS_ROWS(i) bias_read16(i)
#define PART(a, j) ((j) == 0 ? (a).s0123 : (j) == 1 ? (a).s4567 : (j) == 2 ? (a).s89ab : (a).scdef)
#elif BLOCK_S == 2
#define ACCV float8
#define ROWS(i) ((float8)(w_read(i), w_read((i) + 1)))
#define BIAS_ROWS(i) ((float8)(bias_read(i), bias_read((i) + 1)))
#define PART(a, j) ((j) == 0 ? (a).s0123 : (a).s4567)
#else
#define ACCV float4
#define ROWS(i) w_read(i)
#define BIAS_ROWS(i) bias_read(i)
#define PART(a, j) (a)
#endif

// V_FMA(acc, x, rows): acc plus the float x times rows (at BLOCK_S 8, one broadcast of x for both halves)
#if BLOCK_S == 8
#define V_FMA(acc, x, rows) { float16 x_ = (float16)(x); (acc).lo = FMA(x_, (rows).lo, (acc).lo); \
                              (acc).hi = FMA(x_, (rows).hi, (acc).hi); }
#define V_ZERO ((ACCV){(float16)(0.0f), (float16)(0.0f)})
#define V_ADD(a, b) ((ACCV){(a).lo + (b).lo, (a).hi + (b).hi})
#define V_MUL(r, x) ((ACCV){(r).lo * (x), (r).hi * (x)})
#define V_CLAMP(a, mn, mx) ((ACCV){clamp((a).lo, mn, mx), clamp((a).hi, mn, mx)})
#else
#define V_FMA(acc, x, rows) { acc = FMA((ACCV)(x), (rows), (acc)); }
#define V_ZERO ((ACCV)(0.0f))
#define V_ADD(a, b) ((a) + (b))
#define V_MUL(r, x) ((r) * (x))
#define V_CLAMP(a, mn, mx) clamp((a), (mn), (mx))
#endif

// LANE_USED(s, k): input channel 4 s + k exists (always, when the channels fill whole slices)
#if src_FULL
#define LANE_USED(s, k) 1
#else
#define LANE_USED(s, k) (4 * (s) + (k) < src_C)
#endif

// SCALED_ROWS(wi, s, k): ROWS(wi), the weight rows of input channel 4 s + k, times that channel's scale where
// the input's channels are scaled (SRC_SCALE: lowering/fuse_channel_scale.py), one multiply for all the pixels
#if SRC_SCALE
#define SCALED_ROWS(wi, s, k) V_MUL(ROWS(wi), scale_read1(4 * (s) + (k)))
#else
#define SCALED_ROWS(wi, s, k) ROWS(wi)
#endif

#if WIDE_PAIRS
typedef struct { ACCV even, odd; } WIDE_ACC;
#define WIDE_ZERO ((WIDE_ACC){V_ZERO, V_ZERO})
#define WIDE_SUM(acc) V_ADD((acc).even, (acc).odd)
#define WIDE_EVEN(acc) (acc).even
#define WIDE_ODD(acc) (acc).odd
#else
#define WIDE_ACC ACCV
#define WIDE_ZERO V_ZERO
#define WIDE_SUM(acc) (acc)
#define WIDE_EVEN(acc) (acc)
#define WIDE_ODD(acc) (acc)
#endif

// SRC_LANE(x4, i, k): input value k of the slice at float index i. With fp16 storage (src_HALF) the slice's 4
// values are read and converted as one vec4 (x4) and broadcast from it; with fp32 storage each is read on its
// own, which the compiler makes a broadcast straight from memory.
#if src_HALF
#define SRC_LANES(x4, i) float4 x4 = src_read((i) >> 2);
#define SRC_LANE(x4, i, k) ((k) == 0 ? (x4).x : (k) == 1 ? (x4).y : (k) == 2 ? (x4).z : (x4).w)
#else
#define SRC_LANES(x4, i)
#define SRC_LANE(x4, i, k) src_read1((i) + (k))
#endif

// PADDED_LANE(x, m, k): input value x of lane k where m is 1, what the padding reads where m is 0: 0, or under SRC_PAD
// (lowering/fuse_input_affine.py) PADV<k>, which the folded scale and shift map to 0. A call with m the constant 1 is
// x itself either way.
#if SRC_PAD
#define PADDED_LANE(x, m, k) ((m) != 0.0f ? (x) : PADV##k)
#else
#define PADDED_LANE(x, m, k) ((x) * (m))
#endif

__attribute__((always_inline)) inline WIDE_ACC wide_step(WIDE_ACC acc, long i, float m, int s, int wi BUFS_DECL) {
  SRC_LANES(x4, i)
  V_FMA(WIDE_EVEN(acc), PADDED_LANE(SRC_LANE(x4, i, 0), m, 0), SCALED_ROWS(wi, s, 0))
  if (LANE_USED(s, 1))
    V_FMA(WIDE_ODD(acc), PADDED_LANE(SRC_LANE(x4, i, 1), m, 1), SCALED_ROWS(wi + BLOCK_S, s, 1))
  if (LANE_USED(s, 2))
    V_FMA(WIDE_EVEN(acc), PADDED_LANE(SRC_LANE(x4, i, 2), m, 2), SCALED_ROWS(wi + 2 * BLOCK_S, s, 2))
  if (LANE_USED(s, 3))
    V_FMA(WIDE_ODD(acc), PADDED_LANE(SRC_LANE(x4, i, 3), m, 3), SCALED_ROWS(wi + 3 * BLOCK_S, s, 3))
  return acc;
}

__attribute__((always_inline)) inline ACCV conv_finish_wide(ACCV v, int os BUFS_DECL) {
#if HAS_BIAS
  v = V_ADD(v, BIAS_ROWS(os));
#endif
#if ACT
  v = V_CLAMP(v, ACT_MIN, ACT_MAX);
#endif
  return v;
}

__attribute__((always_inline)) inline void conv_store_wide(ACCV v, int base, int os BUFS_DECL) {
  v = conv_finish_wide(v, os BUFS);
#if BLOCK_S == 8
  conv_store16(v.lo, base, os BUFS);
  conv_store16(v.hi, base, os + 4 BUFS);
#elif BLOCK_S == 4
  conv_store16(v, base, os BUFS);
#else
#pragma unroll
  for (int j = 0; j < BLOCK_S; j++) {
    if (os + j < dst_S) {
      dst_write(base + (os + j) * (dst_H * dst_W), PART(v, j));
    }
  }
#endif
}
