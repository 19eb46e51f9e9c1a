// DEPTHWISE_CONV_2D: dst[b, y, x, c] = act(bias[c] + sum over (ky, kx) of src[b, iy, ix, c / MULT] * w[ky, kx, c])
// with iy = y * SH - PT + ky * DH, ix = x * SW - PL + kx * DW; taps outside the input add nothing.
// A work item computes BLOCK_X pixels along x of one slice (depthwise.inc.cl).
// w: rows [slice][ky][kx], 4 output channels each; bias (HAS_BIAS): a row per slice.
// ACT: clamp to [ACT_MIN, ACT_MAX]. Grid (ceil(dst_W / BLOCK_X), dst_H, dst_B * dst_S).

// @include depthwise.inc.cl
// @body
dw_block(GID_Z / dst_S, GID_Z % dst_S, GID_Y, GID_X * BLOCK_X BUFS);
