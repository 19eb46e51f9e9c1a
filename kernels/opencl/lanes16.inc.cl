// Included by OpenCL kernels holding 4 vec4 (4 rows, or 4 pixels) as one float16: each quarter reduced to one
// value and spread back over its 4 lanes.
#define QUARTERS_MAX(v) (float16)((float4)(max(max((v).s0, (v).s1), max((v).s2, (v).s3))), \
  (float4)(max(max((v).s4, (v).s5), max((v).s6, (v).s7))), (float4)(max(max((v).s8, (v).s9), max((v).sa, (v).sb))), \
  (float4)(max(max((v).sc, (v).sd), max((v).se, (v).sf))))
#define QUARTERS_SUM(v) (float16)((float4)(((v).s0 + (v).s1) + ((v).s2 + (v).s3)), \
  (float4)(((v).s4 + (v).s5) + ((v).s6 + (v).s7)), (float4)(((v).s8 + (v).s9) + ((v).sa + (v).sb)), \
  (float4)(((v).sc + (v).sd) + ((v).se + (v).sf)))
// each lane's index within its vec4
#define LANES16 ((float16)(0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, \
  3.0f))
