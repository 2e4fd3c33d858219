/* fp8 — the bytes FP8 training (config.h: --fp8-format, --fp8-recipe,
 * --fp8-param-gather) adds to or saves from a rank's weights and parameter
 * all-gathers, as Transformer Engine keeps them under Megatron-core
 * (docs/cost-model.md#fp8-training). The casts of a layer's passes are
 * layer ops (layer.h: layer_fp8_cast_bytes). Plain functions of their
 * arguments: no state, no allocation.
 */
#ifndef TRAINSIM_FP8_H
#define TRAINSIM_FP8_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"

/* Extra weight bytes for layer_params parameters of the transformer layers
 * on a rank: the FP8 weight and the transpose Hopper's backward GEMM reads,
 * 2 bytes per parameter (MXFP8: row- and column-wise copies with an e8m0
 * scale per 32 elements, 2 + 1/16). With --fp8-param-gather the FP8 weight
 * is the parameter: its dt-byte 16-bit copy is not kept (subtracted). Under
 * full FSDP sharding (fsdp_full) only the gathered parameters (the layers
 * being computed and prefetched) have copies, and the shard stays as it is.
 * 0 without FP8. */
int64_t fp8_weight_copy_bytes(const model_config *m, bool fsdp_full, int dt, int64_t layer_params, int64_t gathered);

/* Bytes of an all-gather of params parameters, extra of them not the
 * layers' (embedding, output layer; 0 <= extra <= params): with
 * --fp8-param-gather the layers' parameters travel in FP8 (1 byte), the
 * rest at dt bytes; without it all at dt. */
int64_t fp8_gather_bytes(const model_config *m, int dt, int64_t params, int64_t extra);

/* Delayed scaling (--fp8-recipe delayed): Transformer Engine all-reduces
 * the amaxes of every FP8 tensor of an fp8_autocast region when the region
 * ends (reduce_amax, DelayedScaling's default: FP8GlobalStateManager.
 * reduce_and_update_fp8_tensors, one all-reduce of the region's amax buffer
 * for the forward and one for the backward), so once per micro-batch per
 * model chunk in each direction, over Megatron-core's amax reduction group
 * (tensor x context x data parallel ranks: parallel_state.
 * get_amax_reduction_group). Bytes of one such all-reduce for a chunk of
 * n_layers layers: 4 FP8 GEMMs a layer, fp32 amaxes, history length 1
 * (--fp8-amax-history-len, accepted at its default only); forward 3 a GEMM
 * (input, weight, output), backward 2 (output and input gradients). 0 for
 * other recipes: current (tensorwise) scaling reduces per tensor over the
 * tensor-parallel ranks instead (layer.h), block scales need no reduction. */
int64_t fp8_amax_reduce_bytes(const model_config *m, int n_layers, bool backward);

/* Bytes of a rows x cols tensor in MXFP8 with its scales along cols (the
 * OCP Microscaling spec, v1.0: 1-byte E4M3 elements, one 8-bit E8M0 scale
 * per block of 32 consecutive elements): rows x (cols + ceil(cols / 32)).
 * A dispatched token row of h elements is fp8_mxfp8_bytes(1, h). */
int64_t fp8_mxfp8_bytes(int64_t rows, int64_t cols);

/* Bytes the quantize kernel moves casting a rows x cols 16-bit (dt bytes)
 * tensor to one MXFP8 copy scaled along cols (the copy a dispatch sends):
 * it reads the tensor and writes the copy with its scales,
 * rows x cols x dt + fp8_mxfp8_bytes(rows, cols). The block's amax is
 * found in the same pass (the scale is local to its 32 elements). */
int64_t fp8_mxfp8_quantize_bytes(int64_t rows, int64_t cols, int dt);

#endif
