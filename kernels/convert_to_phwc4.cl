// Dense BHWC float data (raw buffer `src`, read one float at a time) -> PHWC4 tensor `dst`.
// One work item per output vec4; grid (dst_W, dst_H, dst_B * dst_S). Padding channels get 0.
int b = GID_Z / dst_S;
int s = GID_Z - b * dst_S;
int c = 4 * s;
int j = ((b * dst_H + GID_Y) * dst_W + GID_X) * dst_C + c;
FLT4 v = MAKE_FLT4(src_read1(j),
                   c + 1 < dst_C ? src_read1(j + 1) : 0.0f,
                   c + 2 < dst_C ? src_read1(j + 2) : 0.0f,
                   c + 3 < dst_C ? src_read1(j + 3) : 0.0f);
dst_write(dst_idx(b, GID_Y, GID_X, s), v);
