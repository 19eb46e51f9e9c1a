// OpenCL's version of dialect/resize.dialect (same defines and arithmetic, bit for bit) for a CPU device: a work
// item takes 4 consecutive output pixels of one row and slice, the row's source position found once, and stores
// them as one float16 through the wide post-ops (dst_finish16, dst_store16). Grid (ceil(W / 4), H, B * S) of dst;
// a row's last work item of fewer than 4 pixels stores them one by one. PoCL, the YOLO-style head's nearest 2x
// upsampling of a 20x20x64 tensor: 113 us with the dialect's work item per vec4.
// @include dialect/resize.inc.dialect
#if BILINEAR
// the source indices either side of position f, clamped to the tensor's 0 .. size - 1, and the second one's weight
typedef struct { int lo, hi; FLT4 d; } Taps;
Taps taps(float f, int size) {
  Taps t;
  t.lo = max(TO_INT(floor(f)), 0);
  t.hi = min(TO_INT(ceil(f)), size - 1);
  t.d = SPLAT(f - TO_FLT(t.lo));
  return t;
}
#endif
// @body
int b = dst_B == 1 ? 0 : GID_Z / dst_S;
int s = dst_B == 1 ? GID_Z : GID_Z % dst_S;
int x0 = 4 * GID_X;
#if BILINEAR
Taps y = taps(position(GID_Y, SCALE_Y), src_H);
FLT4 dy = y.d;
FLT4 ry = SPLAT(1.0f) - dy;
int row0 = src_idx(b, y.lo, 0, s);
int row1 = src_idx(b, y.hi, 0, s);
#else
int row = src_idx(b, nearest(GID_Y, SCALE_Y, src_H), 0, s);
#endif
FLT4 v[4];
#pragma unroll
for (int k = 0; k < 4; k++) {
  int x = min(x0 + k, dst_W - 1);
#if BILINEAR
  Taps t = taps(position(x, SCALE_X), src_W);
  FLT4 dx = t.d;
  FLT4 rx = SPLAT(1.0f) - dx;
  // the order of TFLite's reference: value * y weight * x weight, summed left to right
  v[k] = src_read(row0 + t.lo) * ry * rx + src_read(row1 + t.lo) * dy * rx + src_read(row0 + t.hi) * ry * dx
       + src_read(row1 + t.hi) * dy * dx;
#else
  v[k] = src_read(row + nearest(x, SCALE_X, src_W));
#endif
}
int i = dst_idx(b, GID_Y, x0, s);
if (x0 + 3 < dst_W) {
  int4 i4 = (int4)(i) + (int4)(0, 1, 2, 3);
  dst_store16(i4, dst_finish16((float16)(v[0], v[1], v[2], v[3]), i4 BUFS), 4);
} else {
  for (int k = 0; x0 + k < dst_W; k++) dst_write(i + k, v[k]);
}
