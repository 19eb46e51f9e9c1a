// OpenCL's version of dialect/squeeze_excite.dialect for a CPU device (same arguments, defines and grid; see there),
// which runs the one work group's items one after another on one core and does not vectorize across them: a work
// item takes 4 output slices of each product as one float16, an input value broadcast against their 16 weights in
// one wide multiply-add (as opencl/conv2d_1x1.cl). w1, w2: rows [block of 4 output slices][input slice][c][j < 4],
// 16 for each input slice read as one float16.
// PoCL on AVX2, MobileNetV3Small's 576 -> 144 -> 576 gate alone: 47 us with the dialect's float4 per work item.
// @shared partial GROUP
// @shared pooled src_S
// @shared hidden MID_S

// slice j of 4 output slices held as one float16
#define QUARTER(v, j) ((j) == 0 ? (v).s0123 : (j) == 1 ? (v).s4567 : (j) == 2 ? (v).s89ab : (v).scdef)
// SUM = the product of the N slices of shared array VEC by the block of weight rows from row FIRST on, read by READ16:
// the lanes c = 0, 2 and 1, 3 of each input slice in two chains of multiply-adds
#define BLOCK_PRODUCT(SUM, VEC, N, READ16, FIRST) { \
  float16 even_ = (float16)(0.0f); \
  float16 odd_ = (float16)(0.0f); \
  int wi_ = (FIRST); \
  for (int s_ = 0; s_ < (N); s_++, wi_ += 16) { \
    float4 x_ = VEC[s_]; \
    even_ = FMA((float16)(x_.x), READ16(wi_), even_); \
    odd_ = FMA((float16)(x_.y), READ16(wi_ + 4), odd_); \
    even_ = FMA((float16)(x_.z), READ16(wi_ + 8), even_); \
    odd_ = FMA((float16)(x_.w), READ16(wi_ + 12), odd_); \
  } \
  SUM = even_ + odd_; \
}
// @body
int lid = GID_X;
int plane = src_H * src_W;
for (int j = lid; j < src_S * PARTS; j += GROUP) {
  int first = src_idx(0, 0, 0, j / PARTS);
  float4 a0 = (float4)(0.0f);
  float4 a1 = (float4)(0.0f);
  float4 a2 = (float4)(0.0f);
  float4 a3 = (float4)(0.0f);
  int n = j % PARTS;
  for (; n + 3 * PARTS < plane; n += 4 * PARTS) {
    a0 += src_read(first + n);
    a1 += src_read(first + n + PARTS);
    a2 += src_read(first + n + 2 * PARTS);
    a3 += src_read(first + n + 3 * PARTS);
  }
  for (; n < plane; n += PARTS) {
    a0 += src_read(first + n);
  }
#if PARTS > 1
  partial[j] = (a0 + a1) + (a2 + a3);
#else
  pooled[j] = ((a0 + a1) + (a2 + a3)) / (float4)(COUNT);
#endif
}
BARRIER();
#if PARTS > 1
for (int s = lid; s < src_S; s += GROUP) {
  float4 sum = (float4)(0.0f);
  for (int k = 0; k < PARTS; k++) {
    sum += partial[s * PARTS + k];
  }
  pooled[s] = sum / (float4)(COUNT);
}
BARRIER();
#endif
for (int blk = lid; 4 * blk < MID_S; blk += GROUP) {
  float16 sum;
  BLOCK_PRODUCT(sum, pooled, src_S, w1_read16, blk * src_S * 16)
#pragma unroll
  for (int j = 0; j < 4; j++) {
    int o = 4 * blk + j;
    if (o < MID_S) {
      float4 v = QUARTER(sum, j);
#if HAS_BIAS1
      v += b1_read(o);
#endif
#if ACT1
      v = clamp(v, ACT1_MIN, ACT1_MAX);
#endif
#if HIDDEN_STEPS
      v = hidden_steps(v);
#endif
      hidden[o] = ZERO_PAD(v, o, MID_C);
    }
  }
}
BARRIER();
for (int blk = lid; 4 * blk < dst_S; blk += GROUP) {
  float16 sum;
  BLOCK_PRODUCT(sum, hidden, MID_S, w2_read16, blk * MID_S * 16)
#pragma unroll
  for (int j = 0; j < 4; j++) {
    int o = 4 * blk + j;
    if (o < dst_S) {
      float4 v = QUARTER(sum, j);
#if HAS_BIAS2
      v += b2_read(o);
#endif
#if ACT2
      v = clamp(v, ACT2_MIN, ACT2_MAX);
#endif
      dst_write(dst_idx(0, 0, 0, o), v);
    }
  }
}
