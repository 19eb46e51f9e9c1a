// dst = src, element by element: the carrier of a standalone elementwise op, whose work is all in the
// fused post-op chain applied when dst is written. Grid (W, H, B * S) of dst.
int i = dst_idx(GID_Z / dst_S, GID_Y, GID_X, GID_Z % dst_S);
dst_write(i, src_read(i));
