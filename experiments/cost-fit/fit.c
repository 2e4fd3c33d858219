/* cost-fit — the objective of the A100 cost-model fit (sim/model/cost.c): the
 * worst error, relative to its target, over the calibration set:
 *  - Korthikanti et al. 2022 Table 4, 22B per-layer forward and backward
 *    times (5 rows x 2, target 4%), from the layer's ops on one GPU;
 *  - Narayanan et al. 2021 Table 1, three Megatron rows (target 3%),
 *    simulated end to end with micro-batch 1 and 2 chunks (interleaved rows).
 * Built and run by run.sh once per grid point, with the A100 constants of
 * sim/model/cost.c overridden by -D. Prints one line: "worst W layer L megatron M";
 * with FIT_VERBOSE set, one line per row before it (run.sh reads the layer
 * lines; it takes the Megatron rows from `trainsim simulate` with the presets,
 * which set bias and dropout as this file's hand-built configs do not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/config.h"
#include "sim/core/simulate.h"
#include "sim/model/cost.h"
#include "sim/model/layer.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec A100 = {GPU_SPEC_A100};

static double layer_worst(void)
{
    static const struct {
        bool sp;
        config_recompute r;
        double f_ms, b_ms;
    } K[] = {{false, RECOMPUTE_NONE, 7.7, 11.9},
             {true, RECOMPUTE_NONE, 7.2, 11.8},
             {false, RECOMPUTE_FULL, 7.7, 19.5},
             {false, RECOMPUTE_SELECTIVE, 7.7, 13.2},
             {true, RECOMPUTE_SELECTIVE, 7.2, 13.1}};
    cost_params p;
    commcost_params cp;
    cost_model *cm;
    commcost_group g = {8, 8};
    double worst = 0;
    if (cost_params_default(&A100, PREC_BF16, &p, NULL) || commcost_params_default(&A100, &cp, NULL) ||
        cost_model_new(&p, &cm, NULL))
        return INFINITY;
    for (int i = 0; i < 5; i++) {
        layer_shape L = {.h = 6144,
                         .a = 64,
                         .g = 64,
                         .ffn = 4 * 6144,
                         .s = 2048,
                         .b = 4,
                         .V = 51200,
                         .t = 8,
                         .sp = K[i].sp,
                         .dtype_bytes = 2,
                         .recompute = K[i].r,
                         .attn = ATTN_BACKEND_UNFUSED};
        layer_ops o;
        double f, b;
        layer_ops_build(&L, LAYER_PASS_F, &o, NULL);
        f = (double)cost_ops_run_ns(cm, &cp, &g, &o, NULL) / 1e6;
        layer_ops_build(&L, LAYER_PASS_R, &o, NULL);
        b = (double)cost_ops_run_ns(cm, &cp, &g, &o, NULL) / 1e6;
        layer_ops_build(&L, LAYER_PASS_B, &o, NULL);
        b += (double)cost_ops_run_ns(cm, &cp, &g, &o, NULL) / 1e6;
        if (getenv("FIT_VERBOSE"))
            printf("layer %d: f %.2f vs %.1f (%+.1f%%) b %.2f vs %.1f (%+.1f%%)\n", i, f, K[i].f_ms,
                   100 * (f / K[i].f_ms - 1), b, K[i].b_ms, 100 * (b / K[i].b_ms - 1));
        worst = fmax(worst, fabs(f / K[i].f_ms - 1) / 0.04);
        worst = fmax(worst, fabs(b / K[i].b_ms - 1) / 0.04);
    }
    cost_model_free(cm);
    return worst;
}

static double megatron_worst(void)
{
    static const struct {
        int a, h, l, t, p, gpus, B;
        double tflops;
    } R[] = {{24, 2304, 24, 1, 1, 32, 512, 137},
             {64, 8192, 48, 8, 2, 512, 1536, 138},
             {128, 16384, 96, 8, 16, 1920, 2160, 155}};
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        config c;
        int v = R[i].p > 1 ? 2 : 1;
        memset(&c, 0, sizeof c);
        strcpy(c.model.name, "gpt");
        c.model.num_layers = R[i].l;
        c.model.hidden_size = R[i].h;
        c.model.num_attention_heads = c.model.num_query_groups = R[i].a;
        c.model.ffn_hidden_size = 4 * R[i].h;
        c.model.seq_length = 2048;
        c.model.padded_vocab_size = 51200;
        c.model.precision = PREC_FP16;
        c.par.micro_batch_size = 1;
        c.par.global_batch_size = R[i].B;
        c.par.tp = R[i].t;
        c.par.pp = R[i].p;
        c.par.schedule = v > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
        c.par.layers_per_virtual_stage = v > 1 ? R[i].l / (R[i].p * v) : 0;
        c.par.recompute = RECOMPUTE_FULL;
        c.par.sync_tp_allreduce = true; /* the 2021 code: see docs/cost-model.md */
        c.cluster.gpus = R[i].gpus;
        c.cluster.gpus_per_node = 8;
        c.cluster.gpu = A100;
        simulate_opts o;
        simulate_result *r;
        memset(&o, 0, sizeof o);
        if (config_resolve(&c, NULL) || simulate_run(&c, &o, &r, NULL))
            return INFINITY;
        worst = fmax(worst, fabs(r->megatron_tflops_per_gpu / R[i].tflops - 1) / 0.03);
        if (getenv("FIT_VERBOSE"))
            printf("megatron %d: %.1f vs %.0f (%+.1f%%)\n", i, r->megatron_tflops_per_gpu, R[i].tflops,
                   100 * (r->megatron_tflops_per_gpu / R[i].tflops - 1));
        simulate_result_free(r);
        config_free(&c);
    }
    return worst;
}

int main(void)
{
    double l = layer_worst(), m = megatron_worst();
    printf("worst %.3f layer %.3f megatron %.3f\n", fmax(l, m), l, m);
    return 0;
}
