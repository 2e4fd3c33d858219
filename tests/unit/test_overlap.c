/* Megatron-core's communication overlap against its closed forms
 * (sim/core/overlap.h): the chunked exposed time of --tp-comm-overlap, the
 * SM share the pipeline method takes from the GEMM, the plan's steps built
 * with it, --overlap-param-gather's first-bucket gather, --ddp-bucket-size
 * and the exposed reduction of --overlap-grad-reduce. Configurations are
 * built by hand (GPT shapes, A100 80GB figures from gpus.csv). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/overlap.h"
#include "sim/core/plan_build.h"
#include "sim/core/simulate.h"
#include "sim/model/flops.h"
#include "sim/model/layer.h"
#include "sim/sched/sched_generate.h"
#include "tests/unit/gpu_specs.h"

/* A100-SXM4-80GB, NVIDIA datasheet (../shared/reference/gpus.csv). */
static const gpu_spec A100 = {GPU_SPEC_A100, .tf32_tflops = 156, .tdp_w = 400};

/* ---------------------------------------------------------------- closed forms */

Test(overlap, chunked_exposed_closed_form)
{
    /* transfer outlasts the GEMM: first chunk 250 + 3 x (250 - 100) = 700 */
    cr_expect_eq(overlap_chunked_exposed_ns(1000, 400, 4), 700);
    /* GEMM outlasts the transfer: only the first chunk, 400 / 8 */
    cr_expect_eq(overlap_chunked_exposed_ns(400, 1000, 8), 50);
    /* one chunk: no pipelining, all of it */
    cr_expect_eq(overlap_chunked_exposed_ns(1000, 5000, 1), 1000);
    cr_expect_eq(overlap_chunked_exposed_ns(1000, 5000, 0), 1000);
    cr_expect_eq(overlap_chunked_exposed_ns(0, 5000, 4), 0);
    /* rounded up: (10 + 0) / 3 -> 4 */
    cr_expect_eq(overlap_chunked_exposed_ns(10, 100, 3), 4);
}

Test(overlap, sm_share_slowdown)
{
    /* 16 of the A100's 108 SMs communicate: 1000 x 108 / 92 = 1173.9 */
    cr_expect_eq(overlap_sm_slowed_ns(1000, 108, OVERLAP_PIPELINE_SMS), 1174);
    /* H100 / H200: 1000 x 132 / 116 = 1137.9 */
    cr_expect_eq(overlap_sm_slowed_ns(1000, 132, OVERLAP_PIPELINE_SMS), 1138);
    cr_expect_eq(overlap_sm_slowed_ns(1000, 0, 16), 1000);  /* unknown GPU */
    cr_expect_eq(overlap_sm_slowed_ns(1000, 108, 0), 1000); /* copy engines */
    cr_expect_eq(overlap_sm_slowed_ns(1000, 16, 16), 1000); /* nonsense share: ignored */
    cr_expect_eq(overlap_gpu_sms("A100-SXM4-80GB"), 108);
    cr_expect_eq(overlap_gpu_sms("A100-SXM4-40GB"), 108);
    cr_expect_eq(overlap_gpu_sms("H100-SXM5-80GB"), 132);
    cr_expect_eq(overlap_gpu_sms("H200-SXM-141GB"), 132);
    cr_expect_eq(overlap_gpu_sms("cpu"), 0);
    cr_expect_eq(overlap_gpu_sms(NULL), 0);
}

/* Property over a grid: the overlapped pair (slowed GEMM g' plus the exposed
 * transfer) never takes longer than the pair run one after the other
 * (c + g) unless the SM share's slowdown g' - g is larger than the
 * communication it hides, c - exposed; and it never beats max(c, g') or the
 * first chunk. */
Test(overlap, pair_never_slower_unless_the_sm_share_dominates)
{
    int64_t cs[] = {0, 1, 37, 1000, 123457, 9000000};
    int64_t gs[] = {1, 50, 1000, 77777, 20000000};
    int ns[] = {1, 2, 4, 8};
    int sms[] = {0, 108, 132};
    int n_slower = 0;
    for (size_t a = 0; a < sizeof cs / sizeof *cs; a++)
        for (size_t b = 0; b < sizeof gs / sizeof *gs; b++)
            for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
                for (size_t q = 0; q < sizeof sms / sizeof *sms; q++) {
                    int64_t c = cs[a], g = gs[b];
                    int n = ns[k];
                    int64_t g2 = overlap_sm_slowed_ns(g, sms[q], OVERLAP_PIPELINE_SMS);
                    int64_t ex = overlap_chunked_exposed_ns(c, g2, n);
                    cr_assert_leq(ex, c);
                    cr_assert_geq(ex * n, c, "at least the first chunk");
                    cr_assert_geq(ex + g2 + n, c > g2 ? c : g2, "never beats the longer of the two");
                    if (g2 == g) /* no SM share (ring exchange, unknown GPU) */
                        cr_assert_leq(ex + g2, c + g);
                    else if (ex + g2 > c + g) {
                        cr_assert_gt(g2 - g, c - ex, "slower only when the slowdown outweighs what is hidden");
                        n_slower++;
                    }
                }
    cr_expect_gt(n_slower, 0, "the grid holds the stated case (small transfer, long GEMM)");
}

/* ---------------------------------------------------------------- plans */

static config make(int t, int p, int d, bool sp)
{
    config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model.name, sizeof c.model.name, "test-gpt");
    c.model.num_layers = 8;
    c.model.hidden_size = 4096;
    c.model.num_attention_heads = 32;
    c.model.num_query_groups = 32;
    c.model.ffn_hidden_size = 4 * 4096;
    c.model.seq_length = 2048;
    c.model.padded_vocab_size = 51200;
    c.model.attention_dropout = c.model.hidden_dropout = 0.1;
    c.model.precision = PREC_BF16;
    c.par.micro_batch_size = 1;
    c.par.global_batch_size = 4 * d;
    c.par.tp = t;
    c.par.pp = p;
    c.par.dp = d;
    c.par.vp = 1;
    c.par.schedule = SCHED_1F1B;
    c.par.sequence_parallel = sp;
    c.cluster.gpus = t * p * d;
    c.cluster.gpus_per_node = 8;
    c.cluster.gpu = A100;
    return c;
}

typedef struct {
    sched *s;
    cost_model *cm;
    commcost_params cc;
    plan *pl;
} built;

static void build(const config *c, built *B)
{
    ts_err err;
    sched_opts so;
    sched_opts_default(&so, c->par.schedule);
    so.p = c->par.pp;
    so.v = 1;
    so.m = c->par.global_batch_size / (c->par.micro_batch_size * c->par.dp);
    so.num_layers = c->model.num_layers;
    so.with_comm = so.with_reduce_optim = true;
    cost_params cp;
    cr_assert_eq(sched_generate(&so, &B->s, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(cost_params_default(&c->cluster.gpu, c->model.precision, &cp, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(cost_model_new(&cp, &B->cm, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(commcost_params_default(&c->cluster.gpu, &B->cc, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(plan_build(c, B->s, B->cm, &B->cc, &B->pl, &err), TS_OK, "%s", err.msg);
}

static void unbuild(built *B)
{
    plan_free(B->pl);
    cost_model_free(B->cm);
    sched_free(B->s);
}

/* The GEMM named name in a layer's forward ops, costed alone. */
static int64_t gemm_ns(const config *c, const cost_model *cm, const char *name)
{
    layer_shape L;
    layer_ops ops;
    ts_err err;
    cr_assert_eq(layer_shape_from_config(c, &L, &err), TS_OK);
    cr_assert_eq(layer_ops_build(&L, LAYER_PASS_F, &ops, &err), TS_OK);
    for (int i = 0; i < ops.n; i++)
        if (!strcmp(ops.op[i].name, name))
            return cost_op_ns(cm, &ops.op[i]);
    cr_assert_fail("no op %s", name);
    return 0;
}

/* Each forward all-gather and reduce-scatter step of the overlapped plan
 * against the closed form from the plain plan's step (same structure, only
 * durations change); the forward compute grows by the SM share on exactly
 * the two row-parallel GEMMs of every layer. */
Test(overlap, tp_comm_overlap_steps_match_the_closed_form)
{
    config c = make(4, 1, 1, true);
    built a, b;
    build(&c, &a);
    c.par.tp_comm_overlap = true;
    build(&c, &b);
    const plan_stage *Sa = &a.pl->stages[0], *Sb = &b.pl->stages[0];
    cr_assert_eq(Sa->pass[PLAN_PASS_F].n, Sb->pass[PLAN_PASS_F].n);
    int64_t qkv = gemm_ns(&c, a.cm, "qkv"), fc1 = gemm_ns(&c, a.cm, "fc1");
    int64_t proj = gemm_ns(&c, a.cm, "proj"), fc2 = gemm_ns(&c, a.cm, "fc2");
    int64_t proj2 = overlap_sm_slowed_ns(proj, 108, 16), fc22 = overlap_sm_slowed_ns(fc2, 108, 16);
    cr_assert_gt(proj2, proj);
    int n_ag = 0, n_rs = 0;
    int64_t comp_a = 0, comp_b = 0;
    for (uint32_t i = 0; i < Sa->pass[PLAN_PASS_F].n; i++) {
        const plan_step *x = &a.pl->steps[Sa->pass[PLAN_PASS_F].first + i];
        const plan_step *y = &b.pl->steps[Sb->pass[PLAN_PASS_F].first + i];
        cr_assert_str_eq(x->name, y->name);
        if (x->stream == PLAN_STREAM_COMPUTE) {
            comp_a += x->dur_ns;
            comp_b += y->dur_ns;
        } else if (!strcmp(x->name, "ln1.ag") || !strcmp(x->name, "ln2.ag")) {
            int64_t g = x->name[2] == '1' ? qkv : fc1;
            cr_expect_eq(y->dur_ns, overlap_chunked_exposed_ns(x->dur_ns, g, 4), "%s", x->name); /* t chunks */
            cr_expect_lt(y->dur_ns, x->dur_ns);
            n_ag++;
        } else if (!strcmp(x->name, "proj.rs") || !strcmp(x->name, "fc2.rs")) {
            int64_t g = x->name[0] == 'p' ? proj2 : fc22;
            cr_expect_eq(y->dur_ns, overlap_chunked_exposed_ns(x->dur_ns, g, 4), "%s", x->name); /* 4 splits */
            cr_expect_lt(y->dur_ns, x->dur_ns);
            n_rs++;
        } else {
            cr_expect_eq(y->dur_ns, x->dur_ns, "%s: not overlapped", x->name);
        }
    }
    cr_expect_eq(n_ag, 2 * c.model.num_layers);
    cr_expect_eq(n_rs, 2 * c.model.num_layers);
    cr_expect_eq(comp_b - comp_a, (int64_t)c.model.num_layers * (proj2 - proj + fc22 - fc2));
    unbuild(&a);
    unbuild(&b);
}

/* On a run where the transfers are long next to the SM share (t = 8 on
 * one A100 node), the overlap shortens the iteration and the exposed TP
 * time. */
Test(overlap, tp_comm_overlap_shortens_the_iteration)
{
    config c = make(8, 1, 1, true);
    simulate_opts o = {0};
    simulate_result *r0 = NULL, *r1 = NULL;
    ts_err err;
    cr_assert_eq(simulate_run(&c, &o, &r0, &err), TS_OK, "%s", err.msg);
    c.par.tp_comm_overlap = true;
    cr_assert_eq(simulate_run(&c, &o, &r1, &err), TS_OK, "%s", err.msg);
    cr_expect_lt(r1->iteration_ns, r0->iteration_ns);
    cr_expect_lt(r1->exposed_ns[SIMULATE_COMM_TP], r0->exposed_ns[SIMULATE_COMM_TP]);
    cr_expect_gt(r1->exposed_ns[SIMULATE_COMM_TP], 0);
    simulate_result_free(r0);
    simulate_result_free(r1);
}

/* --overlap-param-gather: the exposed gather is the bucket of the rank's
 * first layers (the last bucket its backward closes), not the whole shard. */
Test(overlap, param_gather_exposes_the_first_bucket)
{
    config c = make(1, 1, 8, false);
    c.par.distributed_optimizer = c.par.overlap_grad_reduce = true;
    c.par.ddp_bucket_params = 400000000; /* two 201M-parameter layers per bucket */
    built a, b;
    build(&c, &a);
    c.par.overlap_param_gather = true;
    build(&c, &b);
    const plan_stage *S = &b.pl->stages[0];
    cr_assert_geq(S->n_buckets, 2);
    const plan_step *last = &b.pl->steps[S->dp_bucket0 + (uint32_t)S->n_buckets - 1];
    const plan_step *whole = &a.pl->steps[a.pl->param_gather[0]], *first = &b.pl->steps[b.pl->param_gather[0]];
    int64_t bucket_params = last->comm_bytes / 4; /* fp32 gradients (bf16 training) */
    cr_expect_eq(whole->comm_bytes, S->params * 2);
    cr_expect_eq(first->comm_bytes, bucket_params * 2);
    cr_expect_lt(first->comm_bytes, whole->comm_bytes / 2);
    commcost_group g = {8, 8}; /* d = 8 on one node of 8 */
    cr_expect_eq(first->dur_ns, commcost_ns(&b.cc, COMM_ALL_GATHER, first->comm_bytes, &g));
    cr_expect_lt(first->dur_ns, whole->dur_ns);
    unbuild(&a);
    unbuild(&b);
}

/* --ddp-bucket-size: buckets of about that many parameters. With a bucket
 * of one layer's parameters each layer closes its own (the first also
 * carrying the output layer's or embedding's extra weights). */
Test(overlap, ddp_bucket_size_sets_the_buckets)
{
    config c = make(1, 1, 8, false);
    c.par.overlap_grad_reduce = true;
    built a, b;
    build(&c, &a);
    cr_expect_eq(a.pl->stages[0].n_buckets, 8, "default 40M: one 201M-parameter layer per bucket");
    c.par.ddp_bucket_params = 1000000000000LL; /* past the stage: one bucket */
    build(&c, &b);
    cr_expect_eq(b.pl->stages[0].n_buckets, 1);
    cr_expect_eq(b.pl->steps[b.pl->stages[0].dp_bucket0].comm_bytes, b.pl->stages[0].params * 4);
    unbuild(&a);
    unbuild(&b);
}

/* --overlap-grad-reduce: with one stage, the reduction left exposed after
 * the last backward is the last bucket's (every earlier bucket's reduction
 * ends under the backward of later layers), less the compute that still
 * runs after that bucket closes (the embedding's backward, which holds no
 * bucket of its own here). */
Test(overlap, grad_reduce_exposes_the_last_bucket)
{
    config c = make(1, 1, 8, false);
    c.par.overlap_grad_reduce = true;
    built b;
    build(&c, &b);
    const plan_stage *S = &b.pl->stages[0];
    int64_t last = b.pl->steps[S->dp_bucket0 + (uint32_t)S->n_buckets - 1].dur_ns, tail = 0;
    plan_range R = S->pass_final[PLAN_PASS_B].n ? S->pass_final[PLAN_PASS_B] : S->pass[PLAN_PASS_B];
    bool closed = false;
    for (uint32_t i = 0; i < R.n; i++) {
        const plan_step *x = &b.pl->steps[R.first + i];
        if (closed && x->stream == PLAN_STREAM_COMPUTE)
            tail += x->dur_ns;
        if (x->dp_bucket == S->n_buckets - 1)
            closed = true;
    }
    cr_assert(closed);
    cr_expect_lt(tail, last / 10);
    last -= tail;
    simulate_opts o = {0};
    simulate_result *r = NULL;
    ts_err err;
    cr_assert_eq(simulate_run(&c, &o, &r, &err), TS_OK, "%s", err.msg);
    cr_expect_eq(r->ranks[0].exposed_ns[SIMULATE_COMM_DP], last, "%lld vs %lld (buckets %d)",
                 (long long)r->ranks[0].exposed_ns[SIMULATE_COMM_DP], (long long)last, S->n_buckets);
    simulate_result_free(r);
    unbuild(&b);
}

/* ---------------------------------------------------------------- FSDP */

/* Static memory per rank: parameters, gradients and optimizer state
 * divided by the sharding group d as the strategy says, plus (parameters
 * sharded) the gathered buffers of two units: the one computing and the one
 * prefetched, the largest unit here being the tied embedding (V·h > 12h²+13h). */
Test(overlap, fsdp_memory_closed_form)
{
    static const struct {
        bool torch;
        config_sharding s;
        int w, g, o; /* 1: divided by d */
    } rows[] = {{true, SHARD_OPTIM_GRADS_PARAMS, 1, 1, 1},
                {false, SHARD_OPTIM_GRADS_PARAMS, 1, 1, 1},
                {false, SHARD_OPTIM_GRADS, 0, 1, 1},
                {false, SHARD_OPTIM, 0, 0, 1},
                {false, SHARD_NO_SHARD, 0, 0, 0}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        config c = make(1, 1, 8, false);
        c.par.torch_fsdp2 = rows[i].torch;
        c.par.megatron_fsdp = !rows[i].torch;
        c.par.dp_sharding = rows[i].s;
        built b;
        build(&c, &b);
        int64_t P = b.pl->stages[0].params, per = (P + 7) / 8;
        int64_t layer = flops_params_stage(&c.model, 1, 1, false, false), extra = P - 8 * layer;
        cr_assert_gt(extra, layer);
        cr_expect_eq(b.pl->weights_bytes[0], rows[i].w ? (per + 2 * extra) * 2 : P * 2, "row %zu", i);
        cr_expect_eq(b.pl->grads_bytes[0], (rows[i].g ? per : P) * 4, "row %zu", i);
        cr_expect_eq(b.pl->optim_bytes[0], (rows[i].o ? per : P) * 12, "row %zu", i);
        /* gradients reduced per unit during the backward; after the step
         * the parameters are gathered whole only when they are not sharded */
        cr_expect_eq(b.pl->stages[0].n_buckets, 8, "one bucket per layer (the extra weights ride with the first)");
        cr_expect_eq(b.pl->param_gather[0] != PLAN_NO_STEP, rows[i].s == SHARD_OPTIM || rows[i].s == SHARD_OPTIM_GRADS);
        cr_expect_eq(b.pl->stages[0].fsdp_gather[PLAN_PASS_F] != PLAN_NO_STEP, rows[i].w == 1);
        unbuild(&b);
    }
}

/* Parameters sharded: each of F, B and I waits for the exposed part of its
 * per-unit gathers, (c + (n-1) max(0, c - g)) / n over n units (8 layers
 * and the embedding/output weights), c the stage's gather and g the pass's
 * compute; W uses no weights and gathers nothing. */
Test(overlap, fsdp_gather_closed_form)
{
    config c = make(1, 1, 8, false);
    c.par.torch_fsdp2 = true;
    built b;
    build(&c, &b);
    const plan_stage *S = &b.pl->stages[0];
    commcost_group g8 = {8, 8};
    int64_t cg = commcost_ns(&b.cc, COMM_ALL_GATHER, S->params * 2, &g8);
    int passes[] = {PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_I};
    for (int i = 0; i < 3; i++) {
        int k = passes[i];
        int64_t g = 0;
        for (uint32_t j = 0; j < S->pass[k].n; j++)
            if (b.pl->steps[S->pass[k].first + j].stream == PLAN_STREAM_COMPUTE)
                g += b.pl->steps[S->pass[k].first + j].dur_ns;
        cr_assert_neq(S->fsdp_gather[k], PLAN_NO_STEP);
        const plan_step *x = &b.pl->steps[S->fsdp_gather[k]];
        cr_expect_eq(x->dur_ns, overlap_chunked_exposed_ns(cg, g, 9), "pass %d", k);
        cr_expect_geq(x->dur_ns * 9, cg, "at least the first unit's gather");
        cr_expect_lt(x->dur_ns, cg);
        cr_expect_eq(x->stream, PLAN_STREAM_DP);
    }
    cr_expect_eq(S->fsdp_gather[PLAN_PASS_W], PLAN_NO_STEP);
    /* in the simulated iteration every pass of every micro-batch waits for
     * its gather: 4 micro-batches x (F + B) of them are exposed at least */
    simulate_opts o = {0};
    simulate_result *r = NULL;
    ts_err err;
    cr_assert_eq(simulate_run(&c, &o, &r, &err), TS_OK, "%s", err.msg);
    int64_t per_mb = b.pl->steps[S->fsdp_gather[PLAN_PASS_F]].dur_ns + b.pl->steps[S->fsdp_gather[PLAN_PASS_B]].dur_ns;
    cr_expect_geq(r->ranks[0].exposed_ns[SIMULATE_COMM_DP], 4 * per_mb);
    simulate_result_free(r);
    unbuild(&b);
}
