// ADD_N: the output = x0 + x1 + ... from left to right. SUM_INPUTS(i) and OUT_WRITE(i, v) come from the
// lowering: the sum of this pass's input reads at vec4 index i (led by the partial sum already in the
// output when the inputs take several passes) and the write to the output argument. All inputs and the
// output share one shape, so one linear index serves them all. Grid (W, H, B * S) of the output.
// @body
int i = (GID_Z * GRID_Y + GID_Y) * GRID_X + GID_X;
OUT_WRITE(i, SUM_INPUTS(i));
