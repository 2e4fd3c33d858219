/* moe_load: the per-expert load file of --moe-expert-load (every error of
 * the parser, the writer's round trip), and the load factor the plan takes
 * from measured loads: closed forms (uniform loads give 1, all on one
 * expert gives ep, a capacity factor caps it), and "moving load onto the
 * busiest expert-parallel rank never makes the iteration faster". */
#include <criterion/criterion.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/config/flags.h"
#include "sim/config/moe_load.h"
#include "sim/core/plan_moe.h"
#include "sim/core/simulate.h"
#include "sim/model/moe.h"
#include "sim/util/afile.h"
#include "sim/util/csvio.h"
#include "tests/unit/flags_run.h"
#include "tests/unit/gpu_specs.h"
#include "tests/unit/tmp_csv.h"

static void fini(void)
{
    flags_run_free();
}

/* 4 experts, MoE layers 0 and 2 of 4 (--moe-layer-freq 2). */
static moe_config four(void)
{
    moe_config e;
    moe_config_defaults(&e);
    e.num_experts = 4;
    e.layer_freq = 2;
    return e;
}

/* Parse text as the file "L.csv"; the status, err saying why. */
static int parse(const char *text, double *loads, ts_err *err)
{
    static const char *const REQ[] = {"expert", "tokens", NULL};
    csvio_table *t = NULL;
    moe_config e = four();
    int rc = csvio_read_mem("L.csv", text, strlen(text), REQ, 0, &t, err);
    if (!rc)
        rc = moe_load_parse(t, &e, 4, loads, err);
    csvio_free(t);
    return rc;
}

static void refused(const char *text, const char *want)
{
    double loads[4];
    ts_err err;
    err_clear(&err);
    cr_assert_eq(parse(text, loads, &err), TS_EINVAL, "accepted: %s", text);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
}

Test(moe_load, valid_forms)
{
    double l[4];
    ts_err err;
    cr_assert_eq(parse("expert,tokens\n3,4\n0,1\n1,2\n2,3\n", l, &err), TS_OK, "%s", err.msg);
    cr_assert(l[0] == 1 && l[1] == 2 && l[2] == 3 && l[3] == 4);
    cr_assert_eq(parse("# measured\nlayer,expert,tokens\nall,0,0.25\nall,1,0.25\n,2,0.5\nall,3,0\n", l, &err), TS_OK,
                 "%s", err.msg);
    cr_assert(l[0] == 0.25 && l[2] == 0.5 && l[3] == 0);
}

Test(moe_load, every_error_names_file_line_column_and_what_is_valid)
{
    refused("expert,tokens\n0,1\n1,1\n2,1\n4,1\n", "L.csv:5: column 'expert': '4' is not an expert (valid: an "
                                                   "integer 0 to 3, --num-experts 4)");
    refused("expert,tokens\n0,1\nx,1\n2,1\n3,1\n", "L.csv:3: column 'expert': 'x' is not an expert");
    refused("expert,tokens\n0,1\n1,-2\n2,1\n3,1\n", "L.csv:3: column 'tokens': '-2' is not a token count (valid: a "
                                                    "number 0 to");
    refused("expert,tokens\n0,1\n1,many\n2,1\n3,1\n", "L.csv:3: column 'tokens': 'many' is not a token count");
    refused("expert,tokens\n0,1\n1,1\n0,1\n3,1\n", "L.csv:4: column 'expert': expert 0 is given twice (first at "
                                                   "line 2");
    refused("expert,tokens\n0,1\n1,1\n3,1\n", "L.csv: expert 2 has no row (give one row per expert 0 to 3");
    refused("expert,tokens\n0,0\n1,0\n2,0\n3,0\n", "L.csv: column 'tokens' sums to 0");
    refused("layer,expert,tokens\n1,0,1\n", "L.csv:2: column 'layer': layer 1 is not a MoE layer (the MoE layers of "
                                            "--moe-layer-freq: 0, 2)");
    refused("layer,expert,tokens\n9,0,1\n",
            "L.csv:2: column 'layer': '9' is not valid (valid: all, or a layer 0 to 3)");
    refused("layer,expert,tokens\nfirst,0,1\n", "L.csv:2: column 'layer': 'first' is not valid");
    refused("layer,expert,tokens\n2,0,1\n", "L.csv:2: column 'layer': per-layer loads (layer 2) are not modelled");
    refused("expert,count\n0,1\n", "missing column 'tokens'");
    refused("expert,tokens\n", "L.csv");
    refused("expert,tokens\n0,1,2\n", "L.csv:2");
}

Test(moe_load, unreadable_file_is_eio)
{
    moe_config e = four();
    double l[4];
    ts_err err;
    cr_assert_eq(moe_load_read("/nonexistent/L.csv", &e, 4, l, &err), TS_EIO);
    cr_assert(strstr(err.msg, "/nonexistent/L.csv"), "%s", err.msg);
}

/* The writer's file reads back to the same counts; no temporary is left. */
Test(moe_load, write_round_trip_atomic)
{
    char dir[] = "/tmp/trainsim_moeloadXXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/L.csv", dir);
    const int64_t counts[4] = {134, 134, 137, 107};
    ts_err err;
    cr_assert_eq(moe_load_write(path, counts, 4, "a note", &err), TS_OK, "%s", err.msg);
    moe_config e = four();
    double l[4];
    cr_assert_eq(moe_load_read(path, &e, 4, l, &err), TS_OK, "%s", err.msg);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(l[i], (double)counts[i]);
    char pattern[80];
    snprintf(pattern, sizeof pattern, "%s/.L.csv.*", dir); /* afile.h's temporaries */
    glob_t g;
    cr_assert_eq(glob(pattern, 0, NULL, &g), GLOB_NOMATCH, "a temporary was left beside L.csv");
    cr_assert_eq(afile_live_count(), 0);
    cr_assert_eq(moe_load_write("/nonexistent/dir/L.csv", counts, 4, NULL, &err), TS_EIO);
    unlink(path);
    rmdir(dir);
}

/* Mixtral 8x7B's layer shape, 2 layers, 8 GPUs, EP 8: T = 4096 tokens of a
 * micro-batch, top-2, 8192 routed copies per rank. */
#define MIX4                                                                                                           \
    "--num-layers", "2", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",            \
        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length",  \
        "4096", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16", "--gpu", "H100-SXM5-80GB",            \
        "--num-experts", "8", "--moe-token-dispatcher-type", "alltoall", "--gpus", "8"
#define MIX MIX4, "--expert-model-parallel-size", "8"

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

Test(moe_load, closed_forms, .fini = fini)
{
    /* uniform loads: balance, load factor 1 */
    const char *uni = tmp_csv("expert,tokens\n0,5\n1,5\n2,5\n3,5\n4,5\n5,5\n6,5\n7,5\n");
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", uni, NULL), TS_OK, "%s", E.msg);
    plan_moe mo = plan_of();
    cr_assert_float_eq(mo.load_factor, 1.0, 1e-12);
    cr_assert_eq(mo.dropped, 0.0);
    /* every token on expert 5: its rank gets all, ep = 8 times the mean */
    const char *one = tmp_csv("expert,tokens\n0,0\n1,0\n2,0\n3,0\n4,0\n5,100\n6,0\n7,0\n");
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", one, NULL), TS_OK, "%s", E.msg);
    mo = plan_of();
    cr_assert_float_eq(mo.load_factor, 8.0, 1e-12);
    /* capped at capacity factor 2: the expert keeps ceil(2 x 8192 / 8) = 2048
     * of the 8192 copies; the rank runs 8 x 2048 / 8192 = 2 times the mean,
     * 3/4 dropped */
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", one, "--moe-expert-capacity-factor", "2", NULL), TS_OK, "%s",
                 E.msg);
    mo = plan_of();
    cr_assert_float_eq(mo.load_factor, 2.0, 1e-12);
    cr_assert_float_eq(mo.dropped, 0.75, 1e-12);
    /* two ranks' experts: 3 : 1 between experts 0 (rank 0) and 7 (rank 7):
     * rank 0 holds 3/4 of the copies, 8 x 3/4 = 6 */
    const char *two = tmp_csv("layer,expert,tokens\nall,0,0.75\nall,1,0\nall,2,0\nall,3,0\nall,4,0\nall,5,0\n"
                              "all,6,0\nall,7,0.25\n");
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", two, NULL), TS_OK, "%s", E.msg);
    mo = plan_of();
    cr_assert_float_eq(mo.load_factor, 6.0, 1e-12);
    /* the load factor equals moe_rank_load_factor of the raw counts (the scale does not matter) */
    double raw[8] = {134, 7, 0, 55, 3, 1000, 2, 9}, scaled[8];
    plan_moe_scale_loads(raw, 8, 8192, scaled);
    cr_assert_float_eq(moe_rank_load_factor(scaled, 8, 4, 0, NULL), moe_rank_load_factor(raw, 8, 4, 0, NULL), 1e-12);
}

Test(moe_load, refused_with_the_other_routing_flags, .fini = fini)
{
    const char *uni = tmp_csv("expert,tokens\n0,5\n1,5\n2,5\n3,5\n4,5\n5,5\n6,5\n7,5\n");
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", uni, "--moe-routing-skew", "0.5", NULL), TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-expert-load with --moe-routing-skew"), "%s", E.msg);
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", uni, "--moe-router-force-load-balancing", NULL), TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-expert-load with --moe-router-force-load-balancing"), "%s", E.msg);
    cr_assert_eq(flags_run("--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                           "64", "--micro-batch-size", "1", "--moe-expert-load", uni, NULL),
                 TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-expert-load needs --num-experts"), "%s", E.msg);
    const char *seven = tmp_csv("expert,tokens\n0,5\n1,5\n2,5\n3,5\n4,5\n5,5\n6,5\n");
    cr_assert_eq(flags_run(MIX, "--moe-expert-load", seven, NULL), TS_EINVAL);
    cr_assert(strstr(E.msg, "--moe-expert-load: ") && strstr(E.msg, "expert 7 has no row"), "%s", E.msg);
}

static int64_t iteration_ns(const double *loads)
{
    C.moe.expert_load = loads;
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, NULL, &r, &E), TS_OK, "%s", E.msg);
    int64_t t = r->iteration_ns;
    simulate_result_free(r);
    return t;
}

/* Metamorphic: moving tokens from other ranks' experts onto an expert of
 * the busiest rank (rank 0: experts 0, 1 at ep 4) never makes the
 * iteration faster; the iteration at balance is the fastest. */
Test(moe_load, more_on_the_busiest_rank_never_faster, .fini = fini)
{
    const char *uni = tmp_csv("expert,tokens\n0,5\n1,5\n2,5\n3,5\n4,5\n5,5\n6,5\n7,5\n");
    cr_assert_eq(flags_run(MIX4, "--moe-expert-load", uni, "--expert-model-parallel-size", "4", NULL), TS_OK, "%s",
                 E.msg);
    double l[8] = {120, 100, 100, 100, 100, 100, 100, 100};
    int64_t balanced, prev, now;
    double b[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    balanced = iteration_ns(b);
    prev = iteration_ns(l);
    cr_assert_geq(prev, balanced);
    for (int step = 0; step < 6; step++) {
        int from = 2 + step; /* an expert of ranks 1 to 3 */
        double moved = l[from] / 2;
        l[from] -= moved;
        l[step % 2] += moved; /* onto rank 0 */
        now = iteration_ns(l);
        cr_assert_geq(now, prev, "step %d: %lld ns after moving load onto the busiest rank, %lld before", step,
                      (long long)now, (long long)prev);
        prev = now;
    }
    cr_assert_gt(prev, balanced);
}
