// OpenCL's version of dialect/copy.dialect for a CPU device (LowerContext.copy_layout): a work item takes 4
// consecutive pixels of one row and slice as one float16: loads and stores 64 bytes wide, and the fused post-op
// chain on 4 vec4 at once where its names have float16 forms (dst_finish16; an 8-bit op's fake-quant step then
// divides 16 values at a time). Grid (ceil(W / 4), H, B * S) of dst; a row's last work item of fewer than 4 pixels
// takes them one by one. PoCL, a plan's copies each alone: DenseNet121 int8 2.50 -> 1.85 ms, fp32 1.31 -> 1.20,
// EfficientNetB0 int8 0.65 -> 0.55; whole plans in one process: DenseNet121 int8 0.97x, MobileNetV3Large int8 0.93x.
// @runtime_channels
int b = dst_B == 1 ? 0 : GID_Z / dst_S;
int s = dst_B == 1 ? GID_Z : GID_Z % dst_S;
int x0 = 4 * GID_X;
int i = dst_idx(b, GID_Y, x0, s);
if (x0 + 3 < dst_W) {
  float16 v = dst_finish16(src_read16(i), (int4)(i) + (int4)(0, 1, 2, 3) BUFS);
  dst_store16((int4)(i) + (int4)(0, 1, 2, 3), v, 4);
} else {
  for (int k = 0; x0 + k < dst_W; k++) {
    dst_write(i + k, src_read(i + k));
  }
}
