/* moe_load: the per-expert load file of --moe-expert-load (every error of
 * the parser in both forms, the writer's round trips), and the load factor
 * the plan takes from measured loads: closed forms (uniform loads give 1,
 * all on one expert gives ep, a capacity factor caps it; identical rows in
 * every layer give exactly the whole-model result), and "moving load onto
 * the busiest expert-parallel rank, or skewing one layer more, never makes
 * the iteration faster". */
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

/* Parse text as the file "L.csv" (room for 4 layers x 4 experts); the
 * status, err saying why, *per_layer the form. */
static int parse_form(const char *text, double *loads, bool *per_layer, ts_err *err)
{
    static const char *const REQ[] = {"expert", "tokens", NULL};
    csvio_table *t = NULL;
    moe_config e = four();
    int rc = csvio_read_mem("L.csv", text, strlen(text), REQ, 0, &t, err);
    if (!rc)
        rc = moe_load_parse(t, &e, 4, loads, per_layer, err);
    csvio_free(t);
    return rc;
}

static int parse(const char *text, double *loads, ts_err *err)
{
    bool per_layer;
    int rc = parse_form(text, loads, &per_layer, err);
    cr_assert(rc || !per_layer, "the whole-model form read as per-layer: %s", text);
    return rc;
}

static void refused(const char *text, const char *want)
{
    double loads[16];
    ts_err err;
    err_clear(&err);
    cr_assert_eq(parse(text, loads, &err), TS_EINVAL, "accepted: %s", text);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
}

Test(moe_load, valid_forms)
{
    double l[16];
    ts_err err;
    cr_assert_eq(parse("expert,tokens\n3,4\n0,1\n1,2\n2,3\n", l, &err), TS_OK, "%s", err.msg);
    cr_assert(l[0] == 1 && l[1] == 2 && l[2] == 3 && l[3] == 4);
    cr_assert_eq(parse("# measured\nlayer,expert,tokens\nall,0,0.25\nall,1,0.25\n,2,0.5\nall,3,0\n", l, &err), TS_OK,
                 "%s", err.msg);
    cr_assert(l[0] == 0.25 && l[2] == 0.5 && l[3] == 0);
}

/* Per-layer rows of MoE layers 0 and 2 (of 4, --moe-layer-freq 2), in any
 * order: layer l's expert x at l E + x, the dense layers' rows 0. */
Test(moe_load, per_layer_form)
{
    double l[16];
    bool per_layer = false;
    ts_err err;
    cr_assert_eq(parse_form("# per layer\nlayer,expert,tokens\n2,3,8\n0,0,1\n0,1,2\n2,0,5\n0,2,3\n0,3,4\n2,1,6\n"
                            "2,2,7\n",
                            l, &per_layer, &err),
                 TS_OK, "%s", err.msg);
    cr_assert(per_layer);
    for (int x = 0; x < 4; x++) {
        cr_assert_eq(l[x], x + 1.0);
        cr_assert_eq(l[8 + x], x + 5.0);
        cr_assert_eq(l[4 + x], 0.0);
        cr_assert_eq(l[12 + x], 0.0);
    }
    /* a layer may route nothing to some experts, not to all */
    cr_assert_eq(parse_form("layer,expert,tokens\n0,0,1\n0,1,0\n0,2,0\n0,3,0\n2,0,0\n2,1,0\n2,2,0\n2,3,9\n", l,
                            &per_layer, &err),
                 TS_OK, "%s", err.msg);
}

Test(moe_load, per_layer_errors_name_file_line_column)
{
    static const char *const GOOD0 = "0,0,1\n0,1,1\n0,2,1\n0,3,1\n";
    char text[256];
    /* a layer that is not a MoE layer (layer 1 is dense at --moe-layer-freq 2) */
    refused("layer,expert,tokens\n1,0,1\n", "L.csv:2: column 'layer': layer 1 is not a MoE layer (the MoE layers of "
                                            "--moe-layer-freq: 0, 2)");
    refused("layer,expert,tokens\n9,0,1\n",
            "L.csv:2: column 'layer': '9' is not valid (valid: all, or a MoE layer 0 to 3: 0, 2)");
    refused("layer,expert,tokens\nfirst,0,1\n", "L.csv:2: column 'layer': 'first' is not valid");
    /* a missing MoE layer */
    snprintf(text, sizeof text, "layer,expert,tokens\n%s", GOOD0);
    refused(text, "L.csv: column 'layer': MoE layer 2 has no rows (per-layer loads give every MoE layer: 0, 2; or "
                  "give 'all' rows summed over the layers)");
    /* a duplicate row, with its first line */
    snprintf(text, sizeof text, "layer,expert,tokens\n%s2,0,1\n2,1,1\n2,1,3\n", GOOD0);
    refused(text, "L.csv:8: column 'expert': expert 1 of layer 2 is given twice (first at line 7; one row per "
                  "expert and layer)");
    /* the wrong expert count: a layer short of one, an expert out of range */
    snprintf(text, sizeof text, "layer,expert,tokens\n%s2,0,1\n2,1,1\n2,3,1\n", GOOD0);
    refused(text, "L.csv: column 'expert': expert 2 of layer 2 has no row (give one row per expert 0 to 3, "
                  "--num-experts 4; 3 given)");
    snprintf(text, sizeof text, "layer,expert,tokens\n%s2,4,1\n", GOOD0);
    refused(text, "L.csv:6: column 'expert': '4' is not an expert (valid: an integer 0 to 3, --num-experts 4)");
    /* a layer whose tokens sum to 0 */
    snprintf(text, sizeof text, "layer,expert,tokens\n%s2,0,0\n2,1,0\n2,2,0\n2,3,0\n", GOOD0);
    refused(text, "L.csv: column 'tokens' sums to 0 of layer 2");
    /* the two forms mixed, either way round */
    snprintf(text, sizeof text, "layer,expert,tokens\n%sall,0,1\n", GOOD0);
    refused(text, "L.csv:6: column 'layer': 'all' mixes the two forms (line 2 has a layer number)");
    refused("layer,expert,tokens\nall,0,1\n,1,1\n2,2,1\n",
            "L.csv:4: column 'layer': '2' mixes the two forms (line 2 has 'all' or empty)");
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
    refused("expert,tokens\n0,1\n1,1\n3,1\n",
            "L.csv: column 'expert': expert 2 has no row (give one row per expert 0 to 3");
    refused("expert,tokens\n0,0\n1,0\n2,0\n3,0\n", "L.csv: column 'tokens' sums to 0");
    refused("expert,count\n0,1\n", "missing column 'tokens'");
    refused("expert,tokens\n", "L.csv");
    refused("expert,tokens\n0,1,2\n", "L.csv:2");
}

Test(moe_load, unreadable_file_is_eio)
{
    moe_config e = four();
    double l[16];
    bool per_layer;
    ts_err err;
    cr_assert_eq(moe_load_read("/nonexistent/L.csv", &e, 4, l, &per_layer, &err), TS_EIO);
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
    cr_assert_eq(moe_load_write(path, counts, 4, 0, NULL, "a note", &err), TS_OK, "%s", err.msg);
    moe_config e = four();
    double l[16];
    bool per_layer = true;
    cr_assert_eq(moe_load_read(path, &e, 4, l, &per_layer, &err), TS_OK, "%s", err.msg);
    cr_assert(!per_layer);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(l[i], (double)counts[i]);
    /* per layer: the MoE layers 0 and 2 written, layer 1 and 3 (dense) not */
    const int64_t by_layer[16] = {1, 2, 3, 4, 99, 99, 99, 99, 5, 6, 7, 8, 99, 99, 99, 99};
    const bool moe[4] = {true, false, true, false};
    cr_assert_eq(moe_load_write(path, by_layer, 4, 4, moe, NULL, &err), TS_OK, "%s", err.msg);
    cr_assert_eq(moe_load_read(path, &e, 4, l, &per_layer, &err), TS_OK, "%s", err.msg);
    cr_assert(per_layer);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(l[i], moe[i / 4] ? (double)by_layer[i] : 0.0, "cell %d", i);
    char pattern[80];
    snprintf(pattern, sizeof pattern, "%s/.L.csv.*", dir); /* afile.h's temporaries */
    glob_t g;
    cr_assert_eq(glob(pattern, 0, NULL, &g), GLOB_NOMATCH, "a temporary was left beside L.csv");
    cr_assert_eq(afile_live_count(), 0);
    cr_assert_eq(moe_load_write("/nonexistent/dir/L.csv", counts, 4, 0, NULL, NULL, &err), TS_EIO);
    unlink(path);
    rmdir(dir);
}

/* Mixtral 8x7B's layer shape, 2 layers, 8 GPUs, EP 8: T = 4096 tokens of a
 * micro-batch, top-2, 8192 routed copies per rank. */
#define MIX4 "--num-layers", "2", MIX_SHAPE
#define MIX_SHAPE                                                                                                      \
    "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",      \
        "--ffn-hidden-size", "14336", "--swiglu", "--disable-bias-linear", "--seq-length", "4096",                     \
        "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16", "--gpu", "H100-SXM5-80GB", "--num-experts",   \
        "8", "--moe-token-dispatcher-type", "alltoall", "--gpus", "8"
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
    C.moe.expert_load_per_layer = false;
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

/* The whole run of C with per-layer loads [num_layers x 8] (NULL: C's own). */
static simulate_result *run_layers(const double *loads)
{
    if (loads) {
        C.moe.expert_load = loads;
        C.moe.expert_load_per_layer = true;
    }
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&C, NULL, &r, &E), TS_OK, "%s", E.msg);
    return r;
}

/* Closed form: a per-layer file whose every layer has the whole-model
 * file's rows gives exactly the whole-model run (time, memory, load
 * factor, one op variant for the 4 layers); a file whose layers differ
 * builds one variant per distinct factor and reports the largest and the
 * smallest. */
Test(moe_load, identical_layers_give_the_whole_model_result, .fini = fini)
{
    const char *whole = tmp_csv("expert,tokens\n0,300\n1,100\n2,100\n3,100\n4,50\n5,50\n6,50\n7,50\n");
    cr_assert_eq(flags_run("--num-layers", "4", MIX_SHAPE, "--expert-model-parallel-size", "4", "--moe-expert-load",
                           whole, NULL),
                 TS_OK, "%s", E.msg);
    simulate_result *a = run_layers(NULL);
    char text[1024] = "layer,expert,tokens\n";
    static const int TOK[8] = {300, 100, 100, 100, 50, 50, 50, 50};
    for (int l = 0; l < 4; l++)
        for (int x = 0; x < 8; x++)
            snprintf(text + strlen(text), sizeof text - strlen(text), "%d,%d,%d\n", l, x, TOK[x]);
    const char *per = tmp_csv(text);
    cr_assert_eq(
        flags_run("--num-layers", "4", MIX_SHAPE, "--expert-model-parallel-size", "4", "--moe-expert-load", per, NULL),
        TS_OK, "%s", E.msg);
    cr_assert(C.moe.expert_load_per_layer);
    simulate_result *b = run_layers(NULL);
    cr_assert_eq(b->iteration_ns, a->iteration_ns);
    cr_assert_eq(b->peak_bytes, a->peak_bytes);
    cr_assert_eq(b->moe_load_factor, a->moe_load_factor);
    cr_assert_float_eq(a->moe_load_factor, 400.0 / 200, 1e-12); /* rank 0: experts 0, 1 */
    cr_assert_eq(b->moe_load_factor_min, b->moe_load_factor);
    cr_assert_eq(b->moe_busiest_layer, 0);
    layer_shape L;
    cr_assert_eq(layer_shape_from_config(&C, &L, &E), TS_OK, "%s", E.msg);
    commcost_params cc;
    static const gpu_spec H100 = {GPU_SPEC_H100};
    cr_assert_eq(commcost_params_default(&H100, &cc, &E), TS_OK, "%s", E.msg);
    plan_moe_layers s;
    cr_assert_eq(plan_moe_layers_build(&C, &L, 8, &cc, &s, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(s.n_kinds, 1, "identical layers share one op variant (%d)", s.n_kinds);
    for (int l = 0; l < 4; l++)
        cr_assert_eq(plan_moe_layers_of(&s, l), &s.kinds[0]);
    plan_moe_layers_free(&s);
    /* layer 2 balanced, layer 3 all on expert 7: three variants, 1x to 4x */
    double loads[32];
    for (int l = 0; l < 4; l++)
        for (int x = 0; x < 8; x++)
            loads[l * 8 + x] = l == 2 ? 1 : l == 3 ? (x == 7) : TOK[x];
    C.moe.expert_load = loads;
    cr_assert_eq(plan_moe_layers_build(&C, &L, 8, &cc, &s, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(s.n_kinds, 3);
    cr_assert_eq(s.of_layer[0], s.of_layer[1]);
    cr_assert_float_eq(s.lf_max, 4.0, 1e-12);
    cr_assert_float_eq(s.lf_min, 1.0, 1e-12);
    cr_assert_eq(s.busiest_layer, 3);
    cr_assert_float_eq(plan_moe_layers_of(&s, 2)->load_factor, 1.0, 1e-12);
    plan_moe_layers_free(&s);
    simulate_result *c = run_layers(loads);
    cr_assert_eq(c->moe_busiest_layer, 3);
    cr_assert_float_eq(c->moe_load_factor, 4.0, 1e-12);
    cr_assert_float_eq(c->moe_load_factor_min, 1.0, 1e-12);
    simulate_result_free(a);
    simulate_result_free(b);
    simulate_result_free(c);
}

/* Metamorphic: moving load onto the busiest rank of one layer at a time
 * (the others as they are) never makes the iteration faster, and each
 * layer's factor is its own: the run with every layer skewed is slower
 * than the run with one. */
Test(moe_load, one_layer_more_skewed_never_faster, .fini = fini)
{
    const char *uni = tmp_csv("expert,tokens\n0,5\n1,5\n2,5\n3,5\n4,5\n5,5\n6,5\n7,5\n");
    cr_assert_eq(
        flags_run("--num-layers", "4", MIX_SHAPE, "--expert-model-parallel-size", "4", "--moe-expert-load", uni, NULL),
        TS_OK, "%s", E.msg);
    double loads[32];
    for (int i = 0; i < 32; i++)
        loads[i] = 100;
    simulate_result *r = run_layers(loads);
    int64_t prev = r->iteration_ns, balanced = prev;
    simulate_result_free(r);
    for (int l = 0; l < 4; l++) /* layer l's experts 2..7 give half their load to rank 0 (experts 0, 1), twice */
        for (int step = 0; step < 2; step++) {
            for (int x = 2; x < 8; x++) {
                double moved = loads[l * 8 + x] / 2;
                loads[l * 8 + x] -= moved;
                loads[l * 8 + x % 2] += moved;
            }
            r = run_layers(loads);
            cr_assert_geq(r->iteration_ns, prev, "layer %d step %d: %lld ns, %lld before", l, step,
                          (long long)r->iteration_ns, (long long)prev);
            cr_assert_eq(r->moe_busiest_layer, 0);
            if (l > 0 || step > 0)
                cr_assert_gt(r->iteration_ns, balanced);
            prev = r->iteration_ns;
            simulate_result_free(r);
        }
}
