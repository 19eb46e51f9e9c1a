// RESIZE_BILINEAR (BILINEAR 1) and RESIZE_NEAREST_NEIGHBOR (BILINEAR 0) with TFLite's float index math.
// SCALE_Y / SCALE_X are the float32 scales TFLite computes (in / out, or (in - 1) / (out - 1) with
// ALIGN_CORNERS); with FP_CONTRACT off the positions below round exactly as TFLite's do. Grid (W, H, B * S).
#if BILINEAR
float position(int o, float scale) {
#if HALF_PIXEL
  return (TO_FLT(o) + 0.5f) * scale - 0.5f;
#else
  return TO_FLT(o) * scale;
#endif
}
#else
int nearest(int o, float scale, int size) {
#if HALF_PIXEL
  float p = (TO_FLT(o) + 0.5f) * scale;
#else
  float p = TO_FLT(o) * scale;
#endif
#if ALIGN_CORNERS
  int i = min(TO_INT(ROUND(p)), size - 1);
#else
  int i = min(TO_INT(floor(p)), size - 1);
#endif
  return max(i, 0);
}
#endif
// @body
int b = GID_Z / dst_S;
int s = GID_Z % dst_S;
#if BILINEAR
float fy = position(GID_Y, SCALE_Y);
float fx = position(GID_X, SCALE_X);
int y0 = max(TO_INT(floor(fy)), 0);
int y1 = min(TO_INT(ceil(fy)), src_H - 1);
int x0 = max(TO_INT(floor(fx)), 0);
int x1 = min(TO_INT(ceil(fx)), src_W - 1);
FLT4 dy = SPLAT(fy - TO_FLT(y0));
FLT4 dx = SPLAT(fx - TO_FLT(x0));
FLT4 ry = SPLAT(1.0f) - dy;
FLT4 rx = SPLAT(1.0f) - dx;
// the order of TFLite's reference: value * y weight * x weight, summed left to right
FLT4 v = src_read(src_idx(b, y0, x0, s)) * ry * rx + src_read(src_idx(b, y1, x0, s)) * dy * rx
       + src_read(src_idx(b, y0, x1, s)) * ry * dx + src_read(src_idx(b, y1, x1, s)) * dy * dx;
#else
FLT4 v = src_read(src_idx(b, nearest(GID_Y, SCALE_Y, src_H), nearest(GID_X, SCALE_X, src_W), s));
#endif
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
