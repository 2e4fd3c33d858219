/* simulate_run against the closed forms of formulas.md where their
 * assumptions hold: FLOPs per iteration, activation bytes per layer from the
 * memory timeline (Korthikanti et al. 2022 Table 2; 1F1B and interleaved
 * peaks), Megatron's tensor-parallel volume per layer, static memory per
 * parameter; and byte-identical outputs across runs. Configurations are
 * built by hand (GPT shapes, A100 80GB figures from gpus.csv). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/plan.h"
#include "sim/core/report.h"
#include "sim/core/simulate.h"
#include "sim/core/trace.h"
#include "sim/model/commcost.h"
#include "sim/model/flops.h"
#include "sim/model/layer.h"
#include "tests/unit/gpu_specs.h"

/* A100-SXM4-80GB, NVIDIA datasheet (../shared/reference/gpus.csv). */
static const gpu_spec A100 = {GPU_SPEC_A100, .tf32_tflops = 156, .tdp_w = 400};

typedef struct {
    int l, h, a, s, V, b, B, t, p, d, v;
    sched_kind kind;
    config_recompute rc;
    bool sp, distopt, overlap;
} spec;

static config make(const spec *x)
{
    config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model.name, sizeof c.model.name, "test-gpt");
    c.model.num_layers = x->l;
    c.model.hidden_size = x->h;
    c.model.num_attention_heads = x->a;
    c.model.num_query_groups = x->a;
    c.model.ffn_hidden_size = 4 * x->h;
    c.model.seq_length = x->s;
    c.model.padded_vocab_size = x->V;
    c.model.attention_dropout = c.model.hidden_dropout = 0.1; /* Megatron-LM's default */
    c.model.precision = PREC_BF16;
    c.par.micro_batch_size = x->b;
    c.par.global_batch_size = x->B;
    c.par.tp = x->t;
    c.par.pp = x->p;
    c.par.dp = x->d;
    c.par.vp = x->v;
    c.par.schedule = x->kind;
    c.par.recompute = x->rc;
    c.par.sequence_parallel = x->sp;
    c.par.distributed_optimizer = x->distopt;
    c.par.overlap_grad_reduce = x->overlap;
    c.cluster.gpus = x->t * x->p * x->d;
    c.cluster.gpus_per_node = 8;
    c.cluster.gpu = A100;
    return c;
}

static simulate_result *run(const config *c, bool keep)
{
    simulate_opts o = {.keep_trace = keep};
    simulate_result *r = NULL;
    ts_err err;
    cr_assert_eq(simulate_run(c, &o, &r, &err), TS_OK, "%s", err.msg);
    return r;
}

static const spec SMALL = {.l = 8,
                           .h = 1024,
                           .a = 16,
                           .s = 1024,
                           .V = 51200,
                           .b = 1,
                           .B = 16,
                           .t = 2,
                           .p = 2,
                           .d = 2,
                           .v = 1,
                           .kind = SCHED_1F1B};

Test(simulate, flops_equal_the_closed_forms)
{
    const config_recompute modes[3] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    for (int k = 0; k < 3; k++) {
        spec x = SMALL;
        x.rc = modes[k];
        config c = make(&x);
        simulate_result *r = run(&c, false);
        double model = flops_closed_model(x.B, x.s, x.l, x.h, x.V);
        double hw = k == 0   ? model
                    : k == 1 ? flops_closed_selective_ops(x.B, x.s, x.l, x.h, x.V)
                             : flops_closed_full_recompute(x.B, x.s, x.l, x.h, x.V);
        /* float sums of exact integers: relative 1e-12 */
        cr_expect_float_eq(r->model_flops, model, 1e-12 * model, "mode %d", k);
        cr_expect_float_eq(r->hw_flops, hw, 1e-12 * hw, "mode %d: simulated %.6e, formula %.6e", k, r->hw_flops, hw);
        simulate_result_free(r);
    }
}

/* Peak activation bytes on rank 0, from the memory timeline. */
static int64_t act_peak(const simulate_result *r)
{
    return mem_cat_peak_bytes(r->mem, 0, MEM_ACTIV);
}

static void shape_of(const config *c, layer_shape *L, int64_t *emb_bytes)
{
    ts_err err;
    cr_assert_eq(layer_shape_from_config(c, L, &err), TS_OK, "%s", err.msg);
    layer_saved_list sl;
    cr_assert_eq(layer_embedding_saved(L, &sl, &err), TS_OK);
    *emb_bytes = layer_saved_kept_bytes(&sl);
}

Test(simulate, activations_1f1b_first_stage_holds_p_microbatches)
{
    /* 1F1B: the first stage holds p micro-batches of its l/p layers, each
     * layer sbh(10 + 24/t + 5as/(ht)) (TP) or sbh(34 + 5as/h)/t (TP+SP) */
    for (int sp = 0; sp < 2; sp++) {
        spec x = {.l = 8,
                  .h = 1024,
                  .a = 16,
                  .s = 1024,
                  .V = 51200,
                  .b = 2,
                  .B = 16,
                  .t = 2,
                  .p = 4,
                  .d = 1,
                  .v = 1,
                  .kind = SCHED_1F1B,
                  .rc = RECOMPUTE_NONE,
                  .sp = sp};
        config c = make(&x);
        layer_shape L;
        int64_t emb;
        shape_of(&c, &L, &emb);
        simulate_result *r = run(&c, true);
        int64_t per_layer = layer_korthikanti_bytes(&L);
        int64_t expect = (int64_t)x.p * ((int64_t)(x.l / x.p) * per_layer + emb);
        cr_expect_eq(act_peak(r), expect, "sp=%d: simulated %lld, closed form %lld", sp, (long long)act_peak(r),
                     (long long)expect);
        simulate_result_free(r);
    }
}

Test(simulate, activations_interleaved_factor)
{
    /* interleaved: l layers' worth x (1 + (p-1)/(p v)), i.e. v*p + p - 1
     * chunks of l/(p v) layers on the first rank (plus their small
     * embedding dropout masks) */
    spec x = {.l = 16,
              .h = 1024,
              .a = 16,
              .s = 1024,
              .V = 51200,
              .b = 1,
              .B = 16,
              .t = 2,
              .p = 4,
              .d = 1,
              .v = 2,
              .kind = SCHED_INTERLEAVED,
              .rc = RECOMPUTE_NONE};
    config c = make(&x);
    layer_shape L;
    int64_t emb;
    shape_of(&c, &L, &emb);
    simulate_result *r = run(&c, true);
    int64_t chunks = (int64_t)x.v * x.p + x.p - 1;
    int64_t layers = chunks * (x.l / (x.p * x.v));
    int64_t got = act_peak(r), expect = layers * layer_korthikanti_bytes(&L);
    cr_expect_geq(got, expect);
    cr_expect_leq(got, expect + chunks * emb, "simulated %lld, closed form %lld", (long long)got, (long long)expect);
    simulate_result_free(r);
}

Test(simulate, static_memory_per_parameter)
{
    /* 2 (bf16 weights) + 4 (fp32 gradients) + 12 (Adam), the 12 sharded
     * over d with the distributed optimizer */
    for (int distopt = 0; distopt < 2; distopt++) {
        spec x = SMALL;
        x.distopt = distopt;
        config c = make(&x);
        simulate_result *r = run(&c, true);
        for (int rank = 0; rank < x.p; rank++) {
            int64_t params = flops_params_stage(&c.model, x.t, x.l / x.p, rank == 0, rank == x.p - 1);
            int64_t optim = distopt ? (params + x.d - 1) / x.d * 12 : params * 12;
            cr_expect_eq(mem_live_bytes(r->mem, rank, MEM_WEIGHTS), 2 * params);
            cr_expect_eq(mem_live_bytes(r->mem, rank, MEM_GRADS), 4 * params);
            cr_expect_eq(mem_live_bytes(r->mem, rank, MEM_OPTIM), optim);
            cr_expect_eq(mem_live_bytes(r->mem, rank, MEM_ACTIV), 0, "activations all freed");
        }
        simulate_result_free(r);
    }
}

static commcost_coll coll_of(const char *name)
{
    size_t n = strlen(name);
    return !strcmp(name + n - 2, "ar")   ? COMM_ALL_REDUCE
           : !strcmp(name + n - 2, "rs") ? COMM_REDUCE_SCATTER
                                         : COMM_ALL_GATHER;
}

/* Wire bytes of the TP collectives of one pass of stage st; *raw gets their
 * sizes summed. Collapsed passes keep their collectives as segments. */
static double tp_wire(const plan *pl, int st, int pass, int t, int64_t *raw)
{
    plan_range R = pl->stages[st].pass[pass];
    double wire = 0;
    *raw = 0;
    for (uint32_t i = 0; i < R.n; i++) {
        const plan_step *x = &pl->steps[R.first + i];
        uint32_t nk = x->seg_n ? x->seg_n : 1;
        for (uint32_t k = 0; k < nk; k++) {
            const char *name = x->seg_n ? pl->segs[x->seg_first + k].name : x->name;
            int cat = x->seg_n ? pl->segs[x->seg_first + k].cat : x->cat;
            int64_t bytes = x->seg_n ? pl->segs[x->seg_first + k].comm_bytes : x->comm_bytes;
            if (cat != PLAN_CAT_TP)
                continue;
            wire += commcost_wire_bytes(coll_of(name), bytes, t);
            *raw += bytes;
        }
    }
    return wire;
}

Test(simulate, tensor_parallel_volume_per_layer)
{
    /* Megatron: 2 all-reduces of b*s*h elements per layer forward, 2 in the
     * backward; with sequence parallelism the forward's become all-gather +
     * reduce-scatter pairs of the same volume. Stage 1 of 4 has neither the
     * embedding nor the output layer. */
    spec x = {.l = 8,
              .h = 1024,
              .a = 16,
              .s = 1024,
              .V = 51200,
              .b = 2,
              .B = 16,
              .t = 4,
              .p = 4,
              .d = 1,
              .v = 1,
              .kind = SCHED_1F1B,
              .rc = RECOMPUTE_NONE};
    int64_t S = (int64_t)x.b * x.s * x.h * 2, layers = x.l / x.p, raw;
    config c = make(&x);
    simulate_result *r = run(&c, true);
    double wire_f = tp_wire(r->pl, 1, PLAN_PASS_F, x.t, &raw);
    cr_expect_eq(raw, 2 * S * layers, "forward: 2 all-reduces of bsh per layer");
    tp_wire(r->pl, 1, PLAN_PASS_B, x.t, &raw);
    cr_expect_eq(raw, 2 * S * layers, "backward: 2 all-reduces of bsh per layer");
    simulate_result_free(r);
    x.sp = true;
    c = make(&x);
    r = run(&c, true);
    double wire_sp = tp_wire(r->pl, 1, PLAN_PASS_F, x.t, &raw);
    cr_expect_eq(raw, 4 * S * layers, "forward with SP: 2 all-gathers + 2 reduce-scatters of bsh");
    cr_expect_float_eq(wire_sp, wire_f, 1e-6, "same wire volume with and without SP");
    simulate_result_free(r);
}

static char *render(const simulate_result *r, size_t *n)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    report_text(r, f);
    report_csv(r, f);
    ts_err err;
    cr_assert_eq(trace_write_file(r, f, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(fclose(f), 0);
    return buf;
}

Test(simulate, byte_identical_across_runs)
{
    spec x = {.l = 16,
              .h = 1024,
              .a = 16,
              .s = 1024,
              .V = 51200,
              .b = 1,
              .B = 32,
              .t = 2,
              .p = 4,
              .d = 2,
              .v = 2,
              .kind = SCHED_INTERLEAVED,
              .rc = RECOMPUTE_SELECTIVE,
              .sp = true,
              .distopt = true,
              .overlap = true};
    config c = make(&x);
    simulate_result *a = run(&c, true), *b = run(&c, true);
    size_t na, nb;
    char *ta = render(a, &na), *tb = render(b, &nb);
    cr_expect_eq(na, nb);
    cr_expect(na == nb && memcmp(ta, tb, na) == 0, "two runs give the same bytes");
    cr_expect(strstr(ta, "\"traceEvents\"") != NULL);
    free(ta);
    free(tb);
    simulate_result_free(a);
    simulate_result_free(b);
}

Test(simulate, overlap_grad_reduce_hides_dp)
{
    spec x = SMALL;
    x.d = 8;
    x.B = 64;
    config c = make(&x);
    simulate_result *plain = run(&c, false);
    x.overlap = true;
    c = make(&x);
    simulate_result *ov = run(&c, false);
    cr_expect_gt(plain->exposed_ns[SIMULATE_COMM_DP], 0);
    cr_expect_lt(ov->exposed_ns[SIMULATE_COMM_DP], plain->exposed_ns[SIMULATE_COMM_DP]);
    cr_expect_leq(ov->iteration_ns, plain->iteration_ns);
    simulate_result_free(plain);
    simulate_result_free(ov);
}

Test(simulate, every_schedule_runs)
{
    const sched_kind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_V};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        spec x = SMALL;
        x.kind = kinds[k];
        x.p = 2;
        x.v = (kinds[k] == SCHED_INTERLEAVED || kinds[k] == SCHED_ZB_V) ? 2 : 1;
        config c = make(&x);
        simulate_result *r = run(&c, false);
        cr_expect_gt(r->iteration_ns, 0, "%s", sched_kind_name(kinds[k]));
        cr_expect_float_eq(r->hw_flops, flops_closed_model(x.B, x.s, x.l, x.h, x.V), 1e-12 * r->hw_flops, "%s",
                           sched_kind_name(kinds[k]));
        simulate_result_free(r);
    }
}

Test(simulate, tied_embedding_gradient_all_reduce)
{
    /* first and last stage on different ranks: one all-reduce of V*h/t fp32
     * gradients each; ZB-V puts both on rank 0: none */
    spec x = SMALL;
    config c = make(&x);
    simulate_result *r = run(&c, true);
    cr_assert_neq(r->pl->emb_allreduce, PLAN_NO_STEP);
    cr_expect_eq(r->pl->steps[r->pl->emb_allreduce].comm_bytes, (int64_t)x.V / x.t * x.h * 4);
    simulate_result_free(r);
    x.kind = SCHED_ZB_V;
    x.v = 2;
    c = make(&x);
    r = run(&c, true);
    cr_expect_eq(r->pl->emb_allreduce, PLAN_NO_STEP);
    simulate_result_free(r);
}

Test(simulate, full_recompute_block_flops)
{
    /* --recompute-method block --recompute-num-layers N: N layers per stage
     * are recomputed, so the hardware FLOPs count N*p layers' forward again */
    spec x = SMALL;
    x.p = 2;
    x.rc = RECOMPUTE_FULL;
    config c = make(&x);
    c.par.recompute_method = RECOMPUTE_METHOD_BLOCK;
    c.par.recompute_num_layers = 1;
    simulate_result *r = run(&c, false);
    double hw = flops_hardware_per_iter(&c.model, x.B, RECOMPUTE_FULL, 1 * x.p);
    cr_expect_float_eq(r->hw_flops, hw, 1e-12 * hw, "simulated %.6e, flops.h %.6e", r->hw_flops, hw);
    simulate_result_free(r);
}

Test(simulate, full_recompute_uniform_groups_memory)
{
    /* 1F1B, full recomputation in uniform groups of N layers: the first
     * stage keeps one input per group for each of its p micro-batches, and
     * the backward re-creates one group at a time, so the activation peak is
     * p*(L/N*in + emb) + N*rest + (N-1)*in, with in the layer input (2sbh),
     * rest the other saved tensors of a layer, L the stage's layers */
    spec x = {.l = 8,
              .h = 1024,
              .a = 16,
              .s = 1024,
              .V = 51200,
              .b = 1,
              .B = 16,
              .t = 2,
              .p = 2,
              .d = 1,
              .v = 1,
              .kind = SCHED_1F1B,
              .rc = RECOMPUTE_FULL};
    for (int N = 1; N <= 4; N *= 2) {
        config c = make(&x);
        c.par.recompute_method = RECOMPUTE_METHOD_UNIFORM;
        c.par.recompute_num_layers = N;
        layer_shape L;
        int64_t emb;
        shape_of(&c, &L, &emb);
        layer_saved_list sl;
        cr_assert_eq(layer_saved_build(&L, &sl, NULL), TS_OK);
        int64_t in = layer_saved_kept_bytes(&sl), rest = 0;
        for (int k = 0; k < sl.n; k++)
            if (sl.t[k].by_recompute)
                rest += sl.t[k].bytes;
        int64_t layers = x.l / x.p;
        int64_t expect = x.p * (layers / N * in + emb) + N * rest + (N - 1) * in;
        simulate_result *r = run(&c, true);
        cr_expect_eq(act_peak(r), expect, "N=%d: simulated %lld, expected %lld", N, (long long)act_peak(r),
                     (long long)expect);
        cr_expect_eq(mem_live_bytes(r->mem, 0, MEM_ACTIV), 0);
        simulate_result_free(r);
    }
}

/* Sum of the step durations of stage st's pass k. */
static int64_t pass_ns(const plan *pl, int st, int k)
{
    int64_t ns = 0;
    const plan_range *r = &pl->stages[st].pass[k];
    for (uint32_t i = r->first; i < r->first + r->n; i++)
        ns += pl->steps[i].dur_ns;
    return ns;
}

/* An uneven split from a layout string: each stage's compute follows its
 * layer count (middle stages exactly proportional), and the rank holding
 * more layers computes longer. */
Test(simulate, stage_compute_follows_the_layout)
{
    spec x = SMALL;
    x.l = 14, x.p = 2, x.v = 2, x.d = 1, x.B = 8, x.kind = SCHED_INTERLEAVED;
    config c = make(&x);
    ts_err e;
    cr_assert_eq(sched_layout_parse("Et*2|t*5|t*4|t*3L", &c.par.layout, &e), TS_OK, "%s", e.msg);
    simulate_result *r = run(&c, true);
    const plan *pl = r->pl;
    cr_assert_eq(pl->n_stages, 4);
    for (int k = PLAN_PASS_F; k <= PLAN_PASS_B; k++) {
        int64_t s1 = pass_ns(pl, 1, k), s2 = pass_ns(pl, 2, k);
        cr_expect_eq(s1 * 4, s2 * 5, "pass %d: stage 1 (5 layers) %lld ns, stage 2 (4 layers) %lld ns", k,
                     (long long)s1, (long long)s2);
    }
    /* rank 0: stages 0 and 2 (2 + 4 layers and the embedding); rank 1:
     * stages 1 and 3 (5 + 3 layers and the output layer) */
    cr_expect_gt(r->ranks[1].busy_ns, r->ranks[0].busy_ns);
    simulate_result_free(r);
}
