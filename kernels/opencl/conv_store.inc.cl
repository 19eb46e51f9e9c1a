// Included by the OpenCL convolutions that store 4 output slices of a pixel as one float16 (conv_wide.inc.cl,
// conv2d_int8.cl). conv_store16(v, base, os): the output's post-ops (dst_finish16) and the stores of slices
// os .. os + 3 of the pixel whose slice 0 is vec4 index base; slices past dst_S are left out.
__attribute__((always_inline)) inline void conv_store16(float16 v, int base, int os BUFS_DECL) {
  const int plane = dst_H * dst_W;
  // a slice past dst_S reads its post-op operands at the last slice
  v = dst_finish16(v, (int4)(base) + min((int4)(os) + (int4)(0, 1, 2, 3), (int4)(dst_S - 1)) * plane BUFS);
  dst_store16((int4)(base + os * plane) + (int4)(0, 1, 2, 3) * plane, v, dst_S - os);
}
