// OpenCL's version of dialect/concat.dialect for a CPU device (ops/layout.py, LowerContext.cpu_opencl) where every
// part is read a vec4 at a time (VEC4) and the parts are joined along the batch, the height or the channels, not
// the width: a work item takes 4 consecutive pixels of a row of one slice, which lie in one part, as one float16
// (PART_VEC16: one 64-byte load), and finishes and stores them at once (OUT_FINISH16, OUT_STORE16); a row's last
// work item of fewer than 4 pixels takes them one by one. Same macros and passes as the dialect's, plus OUT_W.
// Grid (ceil(W / 4), H, B * S) of dst. PoCL, all concatenations of a plan: NASNetMobile 1.67 -> 1.07 ms,
// DenseNet121 int8 0.44 -> 0.25 ms.
// Without VEC4 (tensors joined along the channels at offsets inside a slice, in one pass): the 4 pixels' slice
// from each part's two slices there, their lanes shifted (JOINED16: ops/layout.py _joined16), where the dialect's
// work item finds each lane's part and reads it alone; a row's last pixels, fewer than 4, lane by lane.

// @include dialect/concat.inc.dialect
// @body
int b = GID_Z / OUT_S;
int s = GID_Z % OUT_S;
int y = GID_Y;
int x0 = 4 * GID_X;
int i = OUT_IDX(b, y, x0, s);
#if !VEC4  // AXIS == 3, one pass (ops/layout.py)
if (x0 + 3 < OUT_W) {
  float16 v = OUT_FINISH16(JOINED16(b, y, x0, s), (int4)(i) + (int4)(0, 1, 2, 3));
  OUT_STORE16((int4)(i) + (int4)(0, 1, 2, 3), v, 4);
  return;
}
int lane_part[4];
int lane_channel[4];
for (int j = 0; j < 4; j++) {  // a lane past the channels reads the last one; the finish zeroes it
  int c = min(4 * s + j, OUT_C - 1);
  lane_part[j] = part_of(c);
  lane_channel[j] = c - PART_START(lane_part[j]);
}
float4 px[4];  // a row's last pixels, fewer than 4, lane by lane
for (int p = 0; p < 4; p++) {
  int x = min(x0 + p, OUT_W - 1);
  float e[4];
  for (int j = 0; j < 4; j++) {
    e[j] = PART_LANE(lane_part[j], b, y, x, lane_channel[j]);
  }
  px[p] = (float4)(e[0], e[1], e[2], e[3]);
}
for (int p = 0; x0 + p < OUT_W; p++) {
  OUT_WRITE(i + p, px[p]);
}
#else
#if AXIS == 3
int k = part_of(4 * s);
int pb = b;
int py = y;
int ps = s - PART_START(k) / 4;
#else
int k = part_of(AXIS == 0 ? b : y);
int pb = shifted(b, 0, k);
int py = shifted(y, 1, k);
int ps = s;
#endif
if (!in_pass(k)) {
#if LAST_PASS  // the earlier passes' values, finished now
  for (int p = 0; p < 4 && x0 + p < OUT_W; p++) {
    OUT_WRITE(i + p, OUT_READ(i + p));
  }
#endif
  return;
}
if (x0 + 3 < OUT_W) {
  float16 v = OUT_FINISH16(PART_VEC16(k, pb, py, x0, ps), (int4)(i) + (int4)(0, 1, 2, 3));
  OUT_STORE16((int4)(i) + (int4)(0, 1, 2, 3), v, 4);
} else {
  for (int p = 0; x0 + p < OUT_W; p++) {
    OUT_WRITE(i + p, PART_VEC(k, pb, py, x0 + p, ps));
  }
}
#endif
