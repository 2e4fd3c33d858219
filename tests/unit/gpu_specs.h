/* gpu_specs — the datasheet figures of the GPU kinds the cost-model tests
 * build by hand, as designated-initializer lists (extend one with more
 * fields inside the braces):
 *
 *   static const gpu_spec A100 = {GPU_SPEC_A100};
 *
 * Dense bf16/fp16 and fp32 peaks (TFLOP/s), HBM capacity (GiB) and bandwidth
 * (GB/s), NVLink per GPU per direction (GB/s): NVIDIA's A100 (SXM4 80GB),
 * H100 (SXM5) and H200 (SXM) datasheets, the figures topologies/gpus.csv
 * holds. The fields left out (FP8, TF32, board power) stay 0 on purpose:
 * the tests pin the cost model without them. */
#ifndef TRAINSIM_TESTS_GPU_SPECS_H
#define TRAINSIM_TESTS_GPU_SPECS_H

#include "sim/config/catalog.h"

#define GPU_SPEC_A100                                                                                                  \
    .name = "A100-SXM4-80GB", .bf16_tflops = 312, .fp16_tflops = 312, .fp32_tflops = 19.5, .hbm_gib = 80,              \
    .hbm_gbps = 2039, .nvlink_gbps = 300
#define GPU_SPEC_H100                                                                                                  \
    .name = "H100-SXM5-80GB", .bf16_tflops = 989.4, .fp16_tflops = 989.4, .fp32_tflops = 66.9, .hbm_gib = 80,          \
    .hbm_gbps = 3350, .nvlink_gbps = 450
#define GPU_SPEC_H200                                                                                                  \
    .name = "H200-SXM-141GB", .bf16_tflops = 989.4, .fp16_tflops = 989.4, .fp32_tflops = 66.9, .hbm_gib = 141,         \
    .hbm_gbps = 4800, .nvlink_gbps = 450

#endif
