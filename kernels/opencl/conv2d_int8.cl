// A convolution of an 8-bit model on integer dot products, for a CPU's OpenCL with them (DeviceInfo.int8_dot; x86
// VNNI: vpdpbusd, 64 multiply-adds an instruction where a float FMA does 16; AVX2: vpmaddwd, 16 where an FMA does
// 8). The input comes as its codes, a slice one 32-bit word of 4 unsigned bytes u = q + 128 at the slice's vec4
// index (gd_code4: stored by the input's producer alongside its values, or by quantize_u8.cl); the weights are the
// model's int8 values, [block][ky][kx][src slice][NV][16 output channels][4 input channels] (ops/conv.py
// int8_weight_words), so one step is a pixel's word broadcast to 16 lanes against 16 output channels x 4 inputs.
// The sum over u * w exceeds the one over (q - zp) * w by (zp + 128) * (sum of the channel's weights); CORR, per
// output channel, is the model's int32 bias minus that (exact, in int32), and SCALE the input's scale times the
// channel's: the output channel is (sum + CORR) * SCALE, then the fused activation and post-ops (the output's
// fake-quant among them) as every convolution. A tap outside the input reads PAD_WORD, the input's zero point
// (+ 128) in each byte: TFLite pads an 8-bit input with its real zero, and CORR counts every tap.
// Defines: conv2d.dialect's window (KH, KW, SH, SW, DH, DW, PT, PL), BLOCK_S (4 or 8 output slices), BLOCK_X
// pixels of a row a work item, DST_BLOCKS, IN_H, IN_W, IN_S (the input's shape), ACT. Grid (ceil(dst_W /
// BLOCK_X), dst_H, dst_B * DST_BLOCKS), as conv2d's. PoCL, AVX-512 VNNI, 1x1 layers alone: ~400 GOP/s, 2.5x
// the float kernels (conv2d_1x1.cl, ~160 GFLOP/s); AVX2 (Zen): ResNet50 int8 whole 0.62x the float kernels' time.

// @runtime_channels crowded
// @include opencl/conv_store.inc.cl
#define NV (BLOCK_S / 4)  // int16 accumulators a pixel, 16 output channels each
#define IN_PLANE (IN_H * IN_W)

// GD_DOT4(acc, u, w): acc plus, in each of 16 lanes, the 4 products of u's unsigned bytes and w's signed ones
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#define GD_DOT4(acc, u, w) __builtin_ia32_vpdpbusd512((acc), (u), (w))
#elif defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define GD_DOT4(acc, u, w) ((int16)(__builtin_ia32_vpdpbusd256((acc).lo, (u).lo, (w).lo), \
                                    __builtin_ia32_vpdpbusd256((acc).hi, (u).hi, (w).hi)))
#elif defined(__AVX2__)  // vpmaddwd: 16-bit pairs summed into int32; the bytes split into even and odd 16-bit lanes
// (u's zero-extended, w's sign-extended), so no product saturates, unlike vpmaddubsw's int16 sums
inline int8 gd_dot4_pairs(int8 acc, int8 u, int8 w) {
  short16 ue = as_short16(u & 0x00FF00FF), uo = as_short16((u >> 8) & 0x00FF00FF);
  short16 we = (as_short16(w) << (short16)8) >> (short16)8, wo = as_short16(w) >> (short16)8;
  return acc + __builtin_ia32_pmaddwd256(ue, we) + __builtin_ia32_pmaddwd256(uo, wo);
}
#define GD_DOT4(acc, u, w) ((int16)(gd_dot4_pairs((acc).lo, (u).lo, (w).lo), gd_dot4_pairs((acc).hi, (u).hi, (w).hi)))
#else  // any device: the same sum from shifts (a signed byte is sign-extended by an arithmetic shift)
#define GD_DOT4(acc, u, w) ((acc) + ((u) & 255) * (((w) << 24) >> 24) + (((u) >> 8) & 255) * (((w) << 16) >> 24) + \
                            (((u) >> 16) & 255) * (((w) << 8) >> 24) + (((u) >> 24) & 255) * ((w) >> 24))
#endif

// DOT_STEP(acc, u, wr): every pixel's accumulators plus its word u[p] against the NV weight vectors from wr on
#define DOT_STEP(acc, u, wr) \
  _Pragma("unroll") for (int v = 0; v < NV; v++) { \
    int16 wv = (wr)[v]; \
    _Pragma("unroll") for (int p = 0; p < BLOCK_X; p++) (acc)[p][v] = GD_DOT4((acc)[p][v], (u)[p], wv); \
  }

// inside: every tap of the work item lies inside the input (no clamped indices or pad words). Both call sites
// pass a constant and get their own inlined copy.
__attribute__((always_inline)) inline void conv_int8_block(int b, int blk, int oy, int ox0, bool inside BUFS_DECL) {
  __global const uint* q = (__global const uint*)q_buf;
  __global const int16* w16 = (__global const int16*)w_buf;
  int16 acc[BLOCK_X][NV];
#pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
#pragma unroll
    for (int v = 0; v < NV; v++) acc[p][v] = (int16)(0);
  }
  for (int ky = 0; ky < KH; ky++) {
    int iy = oy * SH - PT + ky * DH;
    bool row_in = iy >= 0 && iy < IN_H;
    for (int kx = 0; kx < KW; kx++) {
      __global const int16* wr = w16 + ((blk * KH + ky) * KW + kx) * IN_S * NV;
      if (inside) {  // the pixels' words lie SW apart: one pointer, constant offsets (no index vector per step)
        __global const int* qp = (__global const int*)q + (b * IN_S * IN_H + iy) * IN_W + ox0 * SW - PL + kx * DW;
        for (int s = 0; s < IN_S; s++, wr += NV, qp += IN_PLANE) {
          int16 u[BLOCK_X];
#pragma unroll
          for (int p = 0; p < BLOCK_X; p++) u[p] = (int16)(qp[p * SW]);
          DOT_STEP(acc, u, wr)
        }
        continue;
      }
      int word[BLOCK_X];  // each pixel's tap in slice 0
      bool tap_in[BLOCK_X];
#pragma unroll
      for (int p = 0; p < BLOCK_X; p++) {
        int ix = (ox0 + p) * SW - PL + kx * DW;
        tap_in[p] = row_in && ix >= 0 && ix < IN_W;
        word[p] = (b * IN_S * IN_H + clamp(iy, 0, IN_H - 1)) * IN_W + clamp(ix, 0, IN_W - 1);
      }
      for (int s = 0; s < IN_S; s++, wr += NV) {
        int16 u[BLOCK_X];
#pragma unroll
        for (int p = 0; p < BLOCK_X; p++) {
          u[p] = (int16)(tap_in[p] ? as_int(q[word[p] + s * IN_PLANE]) : PAD_WORD);
        }
        DOT_STEP(acc, u, wr)
      }
    }
  }
  __global const int16* corr = (__global const int16*)corr_buf;
  __global const float16* scale = (__global const float16*)scale_buf;
#pragma unroll
  for (int p = 0; p < BLOCK_X; p++) {
    if (ox0 + p < dst_W) {
#pragma unroll
      for (int v = 0; v < NV; v++) {
        float16 f = GD_CONVERT(acc[p][v] + corr[blk * NV + v], float16) * scale[blk * NV + v];
#if ACT
        f = clamp(f, ACT_MIN, ACT_MAX);
#endif
        conv_store16(f, dst_idx(b, oy, ox0 + p, 0), blk * BLOCK_S + 4 * v BUFS);
      }
    }
  }
}
// @body
int ox0 = GID_X * BLOCK_X;
int oy = GID_Y;
int iy0 = oy * SH - PT;
int ix0 = ox0 * SW - PL;
if (iy0 >= 0 && iy0 + (KH - 1) * DH < IN_H && ix0 >= 0 && ix0 + (BLOCK_X - 1) * SW + (KW - 1) * DW < IN_W) {
  conv_int8_block(GID_Z / DST_BLOCKS, GID_Z % DST_BLOCKS, oy, ox0, true BUFS);
} else {
  conv_int8_block(GID_Z / DST_BLOCKS, GID_Z % DST_BLOCKS, oy, ox0, false BUFS);
}
