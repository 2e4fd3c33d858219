/* Unit tests: --moe-layer-recompute and --recompute-modules moe, the whole
 * MoE layer checkpointed (sim/model/moe.h moe_block_recomputed,
 * sim/core/plan_moe.h): Megatron-core's rules for combining it with the
 * other recompute flags, the saved bytes per layer (the block's saved
 * activations all re-created, only its input, LN2's output, kept), the
 * recompute pass's FLOPs and all-to-alls (the block's forward again), and
 * "recomputing the MoE layer never takes less time nor more memory". */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/plan_moe.h"
#include "sim/core/simulate.h"
#include "sim/model/commcost.h"
#include "sim/model/moe.h"
#include "tests/unit/flags_run.h"
#include "tests/unit/gpu_specs.h"

static void fini(void)
{
    flags_run_free();
}

/* Mixtral 8x7B's shape, 4 layers, 8 GPUs, EP 8, alltoall: T = 4096 tokens
 * of a micro-batch, top-2, forced balance (load factor 1). */
#define MIX                                                                                                            \
    "--num-layers", "4", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",            \
        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length",  \
        "4096", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16", "--gpu", "H100-SXM5-80GB",           \
        "--num-experts", "8", "--moe-token-dispatcher-type", "alltoall", "--gpus", "8",                                \
        "--expert-model-parallel-size", "8", "--moe-router-force-load-balancing"

static plan_moe plan_of(void)
{
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    commcost_params cc;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    plan_moe mo;
    cr_assert_eq(plan_moe_build(&C, &L, 8, &cc, &mo, &E), TS_OK, "%s", E.msg);
    return mo;
}

static int a2a_ops(const layer_ops *o)
{
    int n = 0;
    for (int i = 0; i < o->n; i++)
        n += o->op[i].a2a;
    return n;
}

/* Megatron-core's TransformerConfig: the deprecated flag means selective
 * with moe added to the modules (the default core_attn kept); refused with
 * full recomputation; moe with moe_act and on a dense model refused. */
Test(moe_recompute, flag_rules, .fini = fini)
{
    cr_assert_eq(flags_run(MIX, "--moe-layer-recompute", NULL), TS_OK, "%s", E.msg);
    cr_assert_eq(C.par.recompute, RECOMPUTE_SELECTIVE);
    cr_assert_eq(C.par.recompute_modules, CONFIG_RC_CORE_ATTN | CONFIG_RC_MOE);
    cr_assert_eq(flags_run(MIX, "--moe-layer-recompute", "--recompute-granularity", "selective", "--recompute-modules",
                           "mlp", "layernorm", NULL),
                 TS_OK, "%s", E.msg);
    cr_assert_eq(C.par.recompute_modules, CONFIG_RC_MLP | CONFIG_RC_LAYERNORM | CONFIG_RC_MOE);
    cr_assert_eq(flags_run(MIX, "--recompute-granularity", "selective", "--recompute-modules", "moe", NULL), TS_OK,
                 "%s", E.msg);
    cr_assert_eq(C.par.recompute_modules, CONFIG_RC_MOE);
    cr_assert_eq(flags_run(MIX, "--moe-layer-recompute", "--recompute-granularity", "full", NULL), TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-layer-recompute with --recompute-granularity full"), "%s", E.msg);
    cr_assert_eq(flags_run(MIX, "--moe-layer-recompute", "--recompute-modules", "moe_act", NULL), TS_EINVAL);
    cr_assert(strstr(E.msg, "--recompute-modules moe with moe_act"), "%s", E.msg);
    cr_assert_eq(flags_run(MIX, "--recompute-granularity", "selective", "--recompute-modules", "moe", "moe_act", NULL),
                 TS_EINVAL);
    cr_assert_eq(flags_run(MIX, "--recompute-modules", "moe", NULL), TS_EINVAL); /* selective only */
    cr_assert(strstr(E.msg, "applies to --recompute-granularity selective only"), "%s", E.msg);
    cr_assert_eq(flags_run("--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                           "64", "--micro-batch-size", "1", "--moe-layer-recompute", NULL),
                 TS_EINVAL);
    cr_assert(strstr(E.msg, "--recompute-modules moe: not modelled without --num-experts (moe: also "
                            "--moe-layer-recompute)"),
              "%s", E.msg);
}

/* Closed forms of one MoE layer (balance: R = T k = 8192 rows): the
 * block's saved bytes 8 T E (router logits and probabilities, fp32) + 12 T k
 * (top-k probabilities and indices) + R h 2 (permuted tokens) + 4 R
 * (permuted probabilities, fp32) + R (2 f + f) 2 (SwiGLU FC1 and activation
 * outputs) move from kept to re-created; what the layer keeps is what the
 * dense part without its MLP keeps (LN2's output, the block's input, among
 * it). The recompute pass gains the block's forward: its FLOPs, its two
 * all-to-alls with the forward's bytes, and the dispatcher's transient
 * buffers. */
Test(moe_recompute, saved_bytes_and_recompute_flops, .fini = fini)
{
    int64_t tok = 4096, R = tok * 2, h = 4096, f = 14336;
    int64_t block = 8 * tok * 8 + tok * 2 * 12 + R * h * 2 + 4 * R + R * 3 * f * 2;
    cr_assert_eq(flags_run(MIX, "--recompute-granularity", "selective", "--recompute-modules", "layernorm", NULL),
                 TS_OK, "%s", E.msg);
    plan_moe base = plan_of();
    cr_assert_eq(
        flags_run(MIX, "--recompute-granularity", "selective", "--recompute-modules", "layernorm", "moe", NULL), TS_OK,
        "%s", E.msg);
    plan_moe moe = plan_of();
    /* memory: the block's bytes re-created instead of kept; the totals and the frees unchanged */
    cr_assert_eq(base.m_rc.kept - moe.m_rc.kept, block, "%lld", (long long)(base.m_rc.kept - moe.m_rc.kept));
    cr_assert_eq(moe.m_rc.by_rc - base.m_rc.by_rc, block);
    cr_assert_eq(moe.m_rc.free_i + moe.m_rc.free_w, base.m_rc.free_i + base.m_rc.free_w);
    cr_assert_eq(moe.m_none.kept, base.m_none.kept);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    L.no_mlp = true;
    layer_saved_list sl;
    cr_assert_eq(layer_saved_build(&L, &sl, &E), TS_OK, "%s", E.msg);
    plan_layer_mem dense;
    plan_layer_mem_of(&sl, &dense);
    cr_assert_eq(moe.m_rc.kept, dense.kept, "only the dense part's kept tensors (the block's input among them)");
    /* time: the recompute pass runs the block's forward again */
    layer_ops blk = {0};
    cr_assert_eq(moe_block_ops(&L, &C.moe, 1.0, LAYER_PASS_F, &blk, &E), TS_OK, "%s", E.msg);
    double want = moe_block_fwd_flops_per_token(&C.model, &C.moe) * (double)tok;
    cr_assert_float_eq(layer_ops_flops(&blk), want, 1e-9 * want);
    cr_assert_float_eq(layer_ops_flops(&moe.r) - layer_ops_flops(&base.r), want, 1e-9 * want);
    cr_assert_eq(a2a_ops(&base.r), 0);
    cr_assert_eq(a2a_ops(&moe.r), 2, "dispatch and combine rerun");
    cr_assert_eq(layer_ops_comm_bytes(&moe.r, COMM_P2P), layer_ops_comm_bytes(&moe.f, COMM_P2P));
    cr_assert_gt(layer_ops_comm_bytes(&moe.r, COMM_P2P), 0);
    cr_assert_eq(base.rc_transient, 0);
    cr_assert_eq(moe.rc_transient, moe.transient);
    /* B, I, W: the same ops (the checkpoint changes what is saved, not the backward) */
    cr_assert_eq(moe.b.n, base.b.n);
    cr_assert_float_eq(layer_ops_flops(&moe.b), layer_ops_flops(&base.b), 1e-9 * layer_ops_flops(&base.b));
}

static simulate_result *run(void)
{
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, NULL, &r, &E), TS_OK, "%s", E.msg);
    return r;
}

/* flags_run over a NULL-terminated base list and up to 6 more flags
 * (NULL-terminated). */
static int flags_run2(const char *const *base, const char *const *more)
{
    const char *argv[64] = {"test"};
    int argc = 1;
    for (int i = 0; base[i] && argc < 63; i++)
        argv[argc++] = base[i];
    for (int i = 0; more[i] && argc < 63; i++)
        argv[argc++] = more[i];
    config_free(&C);
    flags_release(&S);
    opt_table_free(&T);
    err_clear(&E);
    opt_table_init(&T, "test", NULL);
    cr_assert_eq(flags_register(&S, &T, &C, &E), TS_OK, "%s", E.msg);
    int rc = flags_parse(&S, &T, argc, (char **)argv, &E);
    return rc ? rc : flags_finish(&S, &T, &E);
}

/* Metamorphic: over dispatchers, EP, pipeline stages and the other
 * recompute choices (none, core_attn, layernorm), under skew, adding
 * --moe-layer-recompute never makes the iteration faster nor the memory
 * peak higher (here, where activations matter, strictly lower), runs more
 * FLOPs; and it is exactly --recompute-modules with moe added. */
Test(moe_recompute, never_faster_never_more_memory, .fini = fini)
{
    static const char *const DISP[] = {"alltoall", "allgather"};
    static const char *const EP[] = {"8", "4"};
    static const char *const PP[] = {"1", "2"};
    for (int d = 0; d < 2; d++)
        for (int x = 0; x < 2; x++)
            for (int p = 0; p < 2; p++)
                for (int rcm = 0; rcm < 3; rcm++) {
                    const char *base[] = {"--num-layers",
                                          "4",
                                          "--hidden-size",
                                          "1024",
                                          "--num-attention-heads",
                                          "16",
                                          "--ffn-hidden-size",
                                          "4096",
                                          "--swiglu",
                                          "--seq-length",
                                          "2048",
                                          "--micro-batch-size",
                                          "1",
                                          "--global-batch-size",
                                          "32",
                                          "--bf16",
                                          "--gpu",
                                          "H100-SXM5-80GB",
                                          "--num-experts",
                                          "8",
                                          "--moe-router-topk",
                                          "2",
                                          "--gpus",
                                          "16",
                                          "--moe-token-dispatcher-type",
                                          DISP[d],
                                          "--expert-model-parallel-size",
                                          EP[x],
                                          "--pipeline-model-parallel-size",
                                          PP[p],
                                          "--moe-routing-skew",
                                          "0.5",
                                          NULL};
                    const char *mod = rcm == 1 ? "core_attn" : "layernorm";
                    const char *none[] = {NULL}, *none_mlr[] = {"--moe-layer-recompute", NULL};
                    const char *sel[] = {"--recompute-granularity", "selective", "--recompute-modules", mod, NULL};
                    const char *sel_mlr[] = {"--recompute-granularity", "selective", "--recompute-modules", mod,
                                             "--moe-layer-recompute",   NULL};
                    const char *sel_moe[] = {
                        "--recompute-granularity", "selective", "--recompute-modules", mod, "moe", NULL};
                    cr_assert_eq(flags_run2(base, rcm ? sel : none), TS_OK, "%s", E.msg);
                    simulate_result *a = run();
                    cr_assert_eq(flags_run2(base, rcm ? sel_mlr : none_mlr), TS_OK, "%s", E.msg);
                    cr_assert(C.par.recompute_modules & CONFIG_RC_MOE);
                    simulate_result *b = run();
                    cr_assert_geq(b->iteration_ns, a->iteration_ns, "%s ep %s pp %s rc %d: %lld < %lld ns", DISP[d],
                                  EP[x], PP[p], rcm, (long long)b->iteration_ns, (long long)a->iteration_ns);
                    cr_assert_lt(b->peak_bytes, a->peak_bytes, "%s ep %s pp %s rc %d: %lld >= %lld bytes", DISP[d],
                                 EP[x], PP[p], rcm, (long long)b->peak_bytes, (long long)a->peak_bytes);
                    cr_assert_gt(b->hw_flops, a->hw_flops, "the block's forward runs again");
                    if (rcm) { /* the same as naming moe among the modules */
                        cr_assert_eq(flags_run2(base, sel_moe), TS_OK, "%s", E.msg);
                        simulate_result *c = run();
                        cr_assert_eq(c->iteration_ns, b->iteration_ns);
                        cr_assert_eq(c->peak_bytes, b->peak_bytes);
                        simulate_result_free(c);
                    }
                    simulate_result_free(a);
                    simulate_result_free(b);
                }
}
