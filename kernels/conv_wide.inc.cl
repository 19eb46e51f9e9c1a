// Included by the OpenCL convolutions written with wide vectors (conv2d.cl.cl, conv2d_1x1.cl.cl): the
// BLOCK_S output slices of a pixel form one float16 (BLOCK_S 4), float8 (2) or float4 (1) accumulator
// ACCV; ROWS(i) reads the BLOCK_S weight rows from row i on as one such vector; PART(a, j) is slice j.
#if BLOCK_S == 4
#define ACCV float16
#define ROWS(i) ((float16)(w_read(i), w_read((i) + 1), w_read((i) + 2), w_read((i) + 3)))
#define PART(a, j) ((j) == 0 ? (a).s0123 : (j) == 1 ? (a).s4567 : (j) == 2 ? (a).s89ab : (a).scdef)
#elif BLOCK_S == 2
#define ACCV float8
#define ROWS(i) ((float8)(w_read(i), w_read((i) + 1)))
#define PART(a, j) ((j) == 0 ? (a).s0123 : (a).s4567)
#else
#define ACCV float4
#define ROWS(i) w_read(i)
#define PART(a, j) (a)
#endif
