"""From a partition to a plan: one pass per file, run in this order by pipeline.build_plan.

    fold_constants    DEQUANTIZE / DENSIFY of constants computed once
    fuse_index_wrap   Keras' wrap of negative indices (SELECT, LESS, ADD) read by the GATHER it feeds
    drop_reshape      reshapes that are no-ops in PHWC4 share their input's buffer
    merge_pad         a zero PAD of H/W folded into the VALID conv that reads it
    fuse_input_affine  a float convolution's input scaled and shifted by constants: into its weights, bias and
                      padding value (OpenCL)
    fuse_layer_norm   a LayerNormalization chain over the channels as one kernel (float, or 8-bit with its roundings)
    fuse_matmul_transpose  TRANSPOSEs (and RESHAPEs of the channels) around a BATCH_MATMUL read / written through its
                      strides
    fuse_matmul_softmax  a BATCH_MATMUL, a MUL by a scalar and a SOFTMAX over its rows as one kernel (float, or
                      8-bit with its roundings)
    drop_dequantize   a DEQUANTIZE of a non-constant tensor (held as its floats already) shares its input's buffer
    pad_channels      a PAD of zero channels read by an elementwise node: its post-op reads the channels as 0
    fuse_elementwise  activations and elementwise chains folded into their producer; fake-quant steps
    dense_outputs     an output that reshapes and concatenations make of other tensors stored in the host's dense
                      order, each source at its place (OpenCL)
    place_concat      the parts of a channel concatenation written in place by their producers
    fuse_siblings     float 1x1 convolutions and FULLY_CONNECTEDs of one input as one kernel, each output a run of
                      slices of the joined result
    emit              each remaining node lowered to kernel calls by its op (context.LowerContext)
    fuse_channel_scale  a MUL by a per-channel gate (squeeze-and-excite) read by a 1x1 convolution as its input
                      scale (on the emitted kernels)
    fuse_squeeze_excite  squeeze-and-excite's MEAN and two one-pixel 1x1 convolutions as one kernel of one work
                      group (float; on the emitted kernels)
    codes_only        a post-op operand with codes (a residual ADD's) reads them; an 8-bit tensor read as codes alone:
                      its writers store its codes, not its values (on the plan)
    dense_inputs      an input that convolutions alone read, read in the host's dense order (OpenCL; on the plan)
    dense_copies      an output of whole slices: its writers store it in the host's dense order too, which the host
                      reads instead of converting it (OpenCL; on the plan)
    half_weights      weights a kernel streams once an invoke (a one-pixel 1x1 convolution, the gate's products),
                      stored as halves where each value is a float16 exactly (on the plan)
    memory            buffers shared between tensors whose lifetimes do not overlap

Each pass returns a view.PassResult: what it applied, and what it declined with the reason. Op modules import
context.py (the interface their ``lower`` sees); nothing here imports an op module.
"""
