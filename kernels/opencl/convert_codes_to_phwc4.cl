// Dense BHWC int8 (CODE char) or uint8 (CODE uchar) codes, uploaded as raw bytes into `src`, -> the PHWC4
// float tensor `dst` of their values SCALE * (q - ZERO_POINT): to_device of a quantized model input, so
// the host neither dequantizes nor uploads 4 bytes a value. Same grid as dialect/convert_to_phwc4.dialect.
// The product is rounded once, as the host's float64 product of the same float32 operands would be.
// @body
__global const CODE* codes = (__global const CODE*)src_buf;
int b = GID_Z / dst_S;
int s = GID_Z - b * dst_S;
int c = 4 * s;
int j = ((b * dst_H + GID_Y) * dst_W + GID_X) * dst_C + c;
float4 q = (float4)((float)codes[j], c + 1 < dst_C ? (float)codes[j + 1] : ZERO_POINT,
                    c + 2 < dst_C ? (float)codes[j + 2] : ZERO_POINT, c + 3 < dst_C ? (float)codes[j + 3] : ZERO_POINT);
dst_store(dst_idx(b, GID_Y, GID_X, s), (q - (float4)(ZERO_POINT)) * (float4)(SCALE));  // padding lanes: 0 exactly
