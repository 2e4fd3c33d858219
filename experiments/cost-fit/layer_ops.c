/* layer_ops — the per-op times of the Korthikanti 22B layer (h 6144, 64 heads,
 * s 2048, b 4, t 8 on one DGX A100, unfused attention, no recomputation) under
 * the default A100 cost model: each op of one pass with its shape or bytes,
 * its time, and its GEMM efficiency, memory bandwidth or NCCL choice; then the
 * sum and the makespan on the two streams (what tests/unit/test_accuracy.c
 * compares with Table 4). Build and run from the repository root after `make`:
 *   cc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I. experiments/cost-fit/layer_ops.c \
 *      build/libtrainsim.a -lgsl -lopenblas -lcsv -lm -lpthread -o /tmp/layer_ops
 *   /tmp/layer_ops [sp] [F|B|I|W|R]      (default: no SP, the forward) */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/model/layer.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec A100 = {GPU_SPEC_A100};

int main(int argc, char **argv)
{
    bool sp = false;
    layer_pass pass = LAYER_PASS_F;
    for (int i = 1; i < argc; i++) {
        bool known = !strcmp(argv[i], "sp");
        sp = sp || known;
        for (int q = 0; q <= (int)LAYER_PASS_R && !known; q++)
            if (!strcmp(argv[i], layer_pass_name((layer_pass)q))) {
                pass = (layer_pass)q;
                known = true;
            }
        if (!known) {
            fprintf(stderr, "layer_ops: argument %d '%s' (expected sp, or a pass: F, B, I, W, R)\n", i, argv[i]);
            return 2;
        }
    }
    cost_params p;
    commcost_params cp;
    cost_model *cm = NULL;
    ts_err e;
    layer_ops o;
    layer_shape L = {.h = 6144,
                     .a = 64,
                     .g = 64,
                     .ffn = 4 * 6144,
                     .s = 2048,
                     .b = 4,
                     .V = 51200,
                     .t = 8,
                     .sp = sp != 0,
                     .dtype_bytes = 2,
                     .recompute = RECOMPUTE_NONE,
                     .attn = ATTN_BACKEND_UNFUSED};
    commcost_group g = {8, 8};
    if (cost_params_default(&A100, PREC_BF16, &p, &e) || commcost_params_default(&A100, &cp, &e) ||
        cost_model_new(&p, &cm, &e) || layer_ops_build(&L, pass, &o, &e)) {
        fprintf(stderr, "layer_ops: %s\n", e.msg);
        cost_model_free(cm);
        return 1;
    }
    double sum_ns = 0;
    for (int i = 0; i < o.n; i++) {
        const layer_op *op = &o.op[i];
        if (op->kind == LAYER_OP_COMM) {
            commcost_choice c;
            commcost_nccl_choose(&cp, op->coll, op->bytes, &g, &c, NULL);
            printf("%-18s %-14s %11lld B      %8.1f us  %s/%s, bus bandwidth %.1f GB/s\n", op->name,
                   commcost_coll_name(op->coll), (long long)op->bytes, c.time_ns / 1e3, commcost_algo_name(c.algo),
                   commcost_proto_name(c.proto), c.busbw_gbps);
            sum_ns += c.time_ns;
            continue;
        }
        double ns = (double)cost_op_ns(cm, op);
        if (op->kind == LAYER_OP_GEMM)
            printf("%-18s gemm %5lld x %5lld x %5lld, %3lld %8.1f us  efficiency %.3f\n", op->name, (long long)op->m,
                   (long long)op->n, (long long)op->k, (long long)op->batch, ns / 1e3,
                   op->flops / ((ns - p.launch_ns) * p.peak_tflops * 1e3));
        else
            printf("%-18s memory %11lld B      %8.1f us  %.0f GB/s\n", op->name, (long long)op->bytes, ns / 1e3,
                   (double)op->bytes / (ns - p.launch_ns));
        sum_ns += ns;
    }
    printf("sum %.3f ms, makespan %.3f ms\n", sum_ns / 1e6, (double)cost_ops_run_ns(cm, &cp, &g, &o, NULL) / 1e6);
    cost_model_free(cm);
    return 0;
}
