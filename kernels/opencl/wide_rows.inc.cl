// Included by the OpenCL kernels of a CPU device that take 4 consecutive pixels of a row per work item
// (LowerContext.wide_rows: softmax.cl, layer_norm.cl), each slice of them one float16, src and dst alike in
// shape: a row's last work item of fewer than 4 pixels reads the row's last pixel again in the lanes past the row
// and writes only its own.

// @include opencl/lanes16.inc.cl

// slice s of the 4 pixels of src from x0 on
float16 pixels4(int b, int y, int x0, int s BUFS_DECL) {
  int i = src_idx(b, y, x0, s);
  if (x0 + 3 < src_W) {
    return src_read16(i);
  }
  int last = src_W - 1 - x0;
  return (float16)(src_read(i), src_read(i + min(1, last)), src_read(i + min(2, last)), src_read(i + min(3, last)));
}
// v with the padding lanes of src's last slice set to fill, when s is that slice
float16 valid_lanes16(float16 v, int s, float fill) {
  return s == src_S - 1 ? (LANES16 >= (float16)(TO_FLT(src_C - 4 * (src_S - 1))) ? (float16)(fill) : v) : v;
}
// the 4 pixels' indices (past the row: its last pixel) from dst's vec4 index o of pixel x0 on
#define DST_PIXELS(o, x0) ((int4)((o) - (x0)) + min((int4)(x0) + (int4)(0, 1, 2, 3), (int4)(dst_W - 1)))
// stores those of the 4 pixels of v from x0 (vec4 index o) on that lie within the row
#define DST_STORE4(o, x0, v) dst_store16((int4)(o) + (int4)(0, 1, 2, 3), (v), dst_W - (x0))
