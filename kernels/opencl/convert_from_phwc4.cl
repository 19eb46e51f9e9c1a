// PHWC4 tensor `src` -> its values in the dense row-major BHWC order, float32 in the raw buffer `dst`, on OpenCL:
// a work item copies a run of RUN pixels (phwc4.DENSE_RUN), each slice stored as 4 floats at the pixel's dense
// offset. The backend's conversion of an output on a CPU (the dialect's work item per dense vec4 finds each
// element's pixel and lane at run time: a (6000, 25) output 177 us on PoCL against 42; with whole slices it is one
// vec4, and still 1.2-1.9x this kernel's time) stores them from 0 on; a dense store of lowering/dense_outputs.py
// places them in an output that reshapes and concatenations make of several tensors: ROW values at a time, rows
// STRIDE apart, from OFFSET.
// A pixel's last slice spills its padding lanes into the next pixel's first channels, which that pixel then
// overwrites (where it has more than one channel, so that they are at most its own); the run's last pixel, and a pixel that ends a row, store the last slice lane by lane, so no two work
// items write the same float, nor a store another tensor's values. Grid: phwc4.dense_store_grid.
#define PLANE (src_H * src_W)
#define PIXELS (src_B * PLANE)
#ifndef ROW
#define ROW (PIXELS * src_C)
#define STRIDE ROW
#define OFFSET 0
#endif
// @body
int first = (GID_Y * GRID_X + GID_X) * RUN;
if (first >= PIXELS) return;
int last = min(first + RUN, PIXELS) - 1;
__global float* out = (__global float*)dst_buf;
for (int p = first; p <= last; p++) {
  int base = p + (p / PLANE) * (src_S - 1) * PLANE;
  int e = p * src_C;  // the pixel's first value in src's own dense order; ROW is a multiple of src_C
  __global float* row = out + (e / ROW) * STRIDE + OFFSET + e % ROW;
  for (int s = 0; s < src_S - 1; s++) GD_VSTORE4(src_read(base + s * PLANE), 0, row + 4 * s);
  float4 v = src_read(base + (src_S - 1) * PLANE);
#if src_C % 4 == 0
  GD_VSTORE4(v, 0, row + 4 * (src_S - 1));
#else
  if (src_C > 1 && p < last && (e + src_C) % ROW != 0) {  // one channel: the spill would reach 3 pixels on
    GD_VSTORE4(v, 0, row + 4 * (src_S - 1));
  } else {
    row[4 * (src_S - 1)] = v.x;
#if src_C % 4 > 1
    row[4 * (src_S - 1) + 1] = v.y;
#endif
#if src_C % 4 > 2
    row[4 * (src_S - 1) + 2] = v.z;
#endif
  }
#endif
}
