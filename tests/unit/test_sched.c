/* sched: options, names, stage mapping, layer split, and the structure of
 * each generator against its paper / reference implementation. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_comm.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_layout.h"
#include "sim/sched/sched_validate.h"
#include "tests/unit/sched_fixture.h"

static sched *gen_opts(sched_opts *o)
{
    return sched_fixture_opts(o);
}

static sched *gen(sched_kind k, int p, int m, int v, bool comm)
{
    return sched_fixture(k, p, m, v, comm, false);
}

/* The rank's actions as space-separated tokens. */
static char *tokens(const sched *s, int r)
{
    size_t cap = s->n_actions[r] * SCHED_TOKEN_BYTES + 1, at = 0;
    char *buf = malloc(cap);
    buf[0] = '\0';
    for (size_t i = 0; i < s->n_actions[r]; i++) {
        if (i)
            buf[at++] = ' ';
        at += sched_action_token(s, r, &s->actions[r][i], buf + at, cap - at);
    }
    buf[at] = '\0';
    return buf;
}

static void expect_tokens(const sched *s, int r, const char *want)
{
    char *got = tokens(s, r);
    cr_expect_str_eq(got, want, "rank %d:\n got  %s\n want %s", r, got, want);
    free(got);
}

static bool same_actions(const sched *a, const sched *b)
{
    if (a->p != b->p)
        return false;
    for (int r = 0; r < a->p; r++) {
        if (a->n_actions[r] != b->n_actions[r])
            return false;
        for (size_t i = 0; i < a->n_actions[r]; i++) {
            const sched_action *x = &a->actions[r][i], *y = &b->actions[r][i];
            if (x->kind != y->kind || x->chunk != y->chunk || x->mb != y->mb || x->peer != y->peer)
                return false;
        }
    }
    return true;
}

static int gen_err(sched_opts *o, ts_err *e)
{
    sched *s = NULL;
    int rc = sched_generate(o, &s, e);
    cr_assert_null(s);
    return rc;
}

Test(sched, names_round_trip)
{
    ts_err e;
    for (int k = 0; k < SCHED_CUSTOM; k++) {
        sched_kind got;
        cr_assert_eq(sched_kind_parse(sched_kind_name((sched_kind)k), &got, &e), TS_OK);
        cr_expect_eq(got, (sched_kind)k);
    }
    sched_kind got;
    cr_assert_eq(sched_kind_parse("zb-h3", &got, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "'zb-h3'") && strstr(e.msg, "interleaved") && strstr(e.msg, "zb-v"), "%s", e.msg);
    cr_expect_str_eq(sched_act_name(ACT_SEND_B), "SEND_B");
    cr_expect_str_eq(sched_act_name(ACT_REDUCE_GRAD), "REDUCE_GRAD");
}

Test(sched, bad_options_name_the_option)
{
    ts_err e;
    sched_opts o;
    sched_opts_default(&o, SCHED_1F1B);
    o.p = 4, o.m = 8, o.v = 2;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "1f1b") && strstr(e.msg, "v = 2"), "%s", e.msg);
    sched_opts_default(&o, SCHED_ZB_V);
    o.v = 3;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "exactly 2"), "%s", e.msg);
    sched_opts_default(&o, SCHED_GPIPE);
    o.p = 0;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "p = 0"), "%s", e.msg);
    sched_opts_default(&o, SCHED_GPIPE);
    o.m = 0;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "m = 0"), "%s", e.msg);
    /* Megatron-core: microbatch_group_size_per_vp_stage must lie in [p, m]. */
    sched_opts_default(&o, SCHED_INTERLEAVED);
    o.p = 4, o.m = 3, o.v = 2;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "[p, m] = [4, 3]"), "%s", e.msg);
    o.m = 8, o.mb_group_size = 9;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "group size 9"), "%s", e.msg);
    sched_opts_default(&o, SCHED_1F1B);
    o.mb_group_size = 2;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
}

Test(sched, stage_mapping_loop_and_v)
{
    sched *s = gen(SCHED_INTERLEAVED, 4, 8, 3, false);
    cr_expect_eq(sched_stage_of(s, 1, 2), 9);
    for (int st = 0; st < 12; st++) {
        int r, c;
        sched_rank_chunk_of(s, st, &r, &c);
        cr_expect_eq(sched_stage_of(s, r, c), st);
        cr_expect_eq(r, st % 4);
    }
    sched_free(s);
    s = gen(SCHED_ZB_V, 4, 8, 2, false);
    cr_expect_eq(s->placement, SCHED_PLACE_V);
    cr_expect_eq(sched_stage_of(s, 0, 1), 7);
    cr_expect_eq(sched_stage_of(s, 3, 1), 4);
    for (int st = 0; st < 8; st++) {
        int r, c;
        sched_rank_chunk_of(s, st, &r, &c);
        cr_expect_eq(sched_stage_of(s, r, c), st);
    }
    sched_free(s);
}

Test(sched, layer_split_even_and_uneven)
{
    sched_opts o;
    sched_opts_default(&o, SCHED_INTERLEAVED);
    o.p = 4, o.m = 4, o.v = 2, o.num_layers = 32;
    sched *s = gen_opts(&o);
    for (int i = 0; i < 8; i++) {
        cr_expect_eq(s->stages[i].num_layers, 4);
        cr_expect_eq(s->stages[i].first_layer, 4 * i);
    }
    sched_free(s);
    /* First and last stage one layer fewer (embedding / output layer). */
    sched_opts_default(&o, SCHED_1F1B);
    o.p = 4, o.m = 4, o.num_layers = 30, o.first_stage_layers = 7, o.last_stage_layers = 7;
    s = gen_opts(&o);
    int want[] = {7, 8, 8, 7}, at = 0;
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(s->stages[i].num_layers, want[i]);
        cr_expect_eq(s->stages[i].first_layer, at);
        at += want[i];
    }
    cr_expect_eq(s->num_layers, 30);
    sched_free(s);
    s = gen(SCHED_GPIPE, 3, 2, 1, true);
    cr_expect_eq(s->num_layers, 3);
    cr_expect_eq(s->stages[2].num_layers, 1);
    sched_free(s);
    ts_err e;
    sched_opts_default(&o, SCHED_1F1B);
    o.p = 4, o.num_layers = 30;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "--num-layers 30") && strstr(e.msg, "evenly"), "%s", e.msg);
    o.num_layers = 3;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "fewer layers than the 4"), "%s", e.msg);
}

/* Llama 3 405B's published layout (126 layers, p 16, v 2, one layer fewer
 * on the first and last stage) drives the interleaved schedule: it
 * validates, and every stage holds the layout's layers in model order. */
Test(sched, layout_string_llama3_405b_interleaved)
{
    sched_layout lay;
    ts_err e;
    int v = 0;
    cr_assert_eq(sched_layout_parse("Et*3|(t*4|)*30t*3L", &lay, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(sched_layout_check(&lay, 16, 126, &v, &e), TS_OK, "%s", e.msg);
    sched_opts o;
    sched_opts_default(&o, SCHED_INTERLEAVED);
    o.p = 16, o.m = 32, o.v = v, o.num_layers = 126, o.stage_layers = lay.layers;
    o.with_reduce_optim = true;
    sched *s = gen_opts(&o);
    cr_assert_eq(sched_validate(s, NULL, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(s->num_layers, 126);
    int at = 0;
    for (int st = 0; st < 32; st++) {
        cr_expect_eq(s->stages[st].num_layers, st == 0 || st == 31 ? 3 : 4, "stage %d", st);
        cr_expect_eq(s->stages[st].first_layer, at, "stage %d", st);
        at += s->stages[st].num_layers;
    }
    /* chunk-major: rank 0 runs stages 0 and 16, rank 15 stages 15 and 31 */
    cr_expect_eq(sched_stage_of(s, 0, 1), 16);
    cr_expect_eq(sched_stage_of(s, 15, 1), 31);
    sched_free(s);
    /* the counts must add up to --num-layers */
    o.num_layers = 128;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "sum to 126; they must sum to --num-layers 128"), "%s", e.msg);
}

Test(sched, gpipe_all_forwards_then_backwards)
{
    sched *s = gen(SCHED_GPIPE, 2, 3, 1, false);
    expect_tokens(s, 0, "0F0 0F1 0F2 0B0 0B1 0B2");
    expect_tokens(s, 1, "1F0 1F1 1F2 1B0 1B1 1B2");
    sched_free(s);
}

/* PipeDream-Flush: min(p-r-1, m) warm-up forwards, then 1F1B, then the
 * cool-down backwards. */
Test(sched, onef1b_warmup)
{
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 9; m++) {
            sched *s = gen(SCHED_1F1B, p, m, 1, false);
            for (int r = 0; r < p; r++) {
                int warm = p - r - 1 < m ? p - r - 1 : m;
                size_t first_b = 0;
                while (s->actions[r][first_b].kind != ACT_B)
                    first_b++;
                cr_expect_eq(first_b, (size_t)(warm < m ? warm + 1 : m), "p=%d m=%d r=%d", p, m, r);
            }
            sched_free(s);
        }
    sched *s = gen(SCHED_1F1B, 3, 4, 1, false);
    expect_tokens(s, 0, "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3");
    expect_tokens(s, 2, "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3");
    sched_free(s);
}

/* Megatron-core: warm-up 2(p-r-1) + (v-1)p, groups of p micro-batches per
 * chunk, the backward of step k on chunk v-1-c. Hand-expanded for p=2,
 * m=4, v=2: forward order (mb, chunk) = (0,0) (1,0) (0,1) (1,1) (2,0) ... */
Test(sched, interleaved_as_megatron)
{
    sched *s = gen(SCHED_INTERLEAVED, 2, 4, 2, false);
    expect_tokens(s, 0, "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
    expect_tokens(s, 1, "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
    sched_free(s);
    for (int p = 2; p <= 5; p++)
        for (int v = 2; v <= 4; v++)
            for (int m = p; m <= 3 * p; m += p) {
                sched *x = gen(SCHED_INTERLEAVED, p, m, v, false);
                for (int r = 0; r < p; r++) {
                    int warm = 2 * (p - r - 1) + (v - 1) * p;
                    if (warm > m * v)
                        warm = m * v;
                    size_t first_b = 0;
                    while (x->actions[r][first_b].kind != ACT_B)
                        first_b++;
                    cr_expect_eq(first_b, (size_t)(warm < m * v ? warm + 1 : m * v), "p=%d m=%d v=%d r=%d", p, m, v, r);
                }
                sched_free(x);
            }
}

/* m not a multiple of p: Megatron-core's smaller last group, where it runs. */
Test(sched, interleaved_partial_last_group)
{
    sched *s = gen(SCHED_INTERLEAVED, 4, 6, 2, false);
    /* Groups [0,4) and [4,6): chunk 0 of mb 0-3, chunk 1 of mb 0-3, then
     * chunk 0 of mb 4-5, chunk 1 of mb 4-5. Rank 3 warm-up = 0 + 4. */
    expect_tokens(s, 3,
                  "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 7F4 3B2 7F5 3B3 "
                  "7B4 7B5 3B4 3B5");
    ts_err e;
    cr_expect_eq(sched_validate(s, NULL, &e), TS_OK, "%s", e.msg);
    sched_free(s);
    sched_opts o;
    sched_opts_default(&o, SCHED_INTERLEAVED);
    o.p = 8, o.m = 9, o.v = 3;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "m=9") && strstr(e.msg, "cannot run") && strstr(e.msg, "multiple of 8"), "%s", e.msg);
    o.with_comm = false;
    cr_assert_eq(gen_err(&o, &e), TS_EINVAL);
}

/* torch's ZB-H1 for one chunk: 1F1B warm-up, W lagging r steps behind I. */
Test(sched, zb_h1_structure)
{
    sched *s = gen(SCHED_ZB_H1, 2, 2, 1, false);
    expect_tokens(s, 0, "0F0 0F1 0I0 0W0 0I1 0W1");
    expect_tokens(s, 1, "1F0 1I0 1F1 1I1 1W0 1W1");
    sched_free(s);
}

/* ZB-H2: rank r opens with 2(p-r)-1 forwards (given enough micro-batches). */
Test(sched, zb_h2_warmup)
{
    for (int p = 1; p <= 6; p++) {
        sched *s = gen(SCHED_ZB_H2, p, 3 * p, 1, false);
        for (int r = 0; r < p; r++) {
            int n = 0;
            while (s->actions[r][n].kind == ACT_F)
                n++;
            cr_expect_eq(n, 2 * (p - r) - 1, "p=%d r=%d", p, r);
        }
        sched_free(s);
    }
}

/* ZB-V: torch's ScheduleZBVZeroBubble for p = 2, m = 4. */
Test(sched, zb_v_structure)
{
    sched *s = gen(SCHED_ZB_V, 2, 4, 2, false);
    expect_tokens(s, 0,
                  "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 "
                  "0I2 0W2 0I3 0W3");
    expect_tokens(s, 1,
                  "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 "
                  "1I3 1W2 2W3 1W3");
    sched_free(s);
}

Test(sched, comm_insertion_matches_compute_only_plus_add_comm)
{
    for (int k = 0; k < SCHED_CUSTOM; k++) {
        if (k == SCHED_DUALPIPE) /* two model copies: test_sched_dual.c */
            continue;
        int v = k == SCHED_INTERLEAVED || sched_kind_is_v((sched_kind)k) ? 2 : 1;
        sched *a = gen((sched_kind)k, 4, 8, v, true), *b = gen((sched_kind)k, 4, 8, v, false);
        cr_expect(sched_has_comm(a));
        cr_expect(!sched_has_comm(b));
        ts_err e;
        cr_assert_eq(sched_add_comm(b, &e), TS_OK, "%s", e.msg);
        cr_expect(same_actions(a, b), "%s", sched_kind_name((sched_kind)k));
        /* A SEND always follows its producer directly (after other SENDs). */
        for (int r = 0; r < 4; r++)
            for (size_t i = 0; i < a->n_actions[r]; i++) {
                int kind = a->actions[r][i].kind;
                if (kind != ACT_SEND_F && kind != ACT_SEND_B)
                    continue;
                size_t j = i;
                while (j > 0 && a->actions[r][j - 1].kind >= ACT_SEND_F && a->actions[r][j - 1].kind <= ACT_RECV_B)
                    j--;
                cr_assert(j > 0);
                const sched_action *prod = &a->actions[r][j - 1];
                cr_expect(prod->mb == a->actions[r][i].mb && prod->chunk == a->actions[r][i].chunk,
                          "%s rank %d action %zu", sched_kind_name((sched_kind)k), r, i);
            }
        sched_free(a);
        sched_free(b);
    }
}

Test(sched, reduce_and_optim)
{
    sched_opts o;
    sched_opts_default(&o, SCHED_INTERLEAVED);
    o.p = 2, o.m = 4, o.v = 2, o.with_reduce_optim = true;
    sched *s = gen_opts(&o);
    for (int r = 0; r < 2; r++) {
        size_t n = s->n_actions[r];
        cr_expect_eq(s->actions[r][n - 1].kind, ACT_OPTIM);
        int red = 0;
        for (size_t i = 0; i < n; i++)
            red += s->actions[r][i].kind == ACT_REDUCE_GRAD;
        cr_expect_eq(red, 2);
    }
    /* Each REDUCE_GRAD right after the last backward of its chunk (and the
     * SEND_B of that gradient); on rank 0 chunk 1 (stage 2) finishes first. */
    for (int r = 0; r < 2; r++) {
        int seen = 0;
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            const sched_action *a = &s->actions[r][i];
            if (a->kind != ACT_REDUCE_GRAD)
                continue;
            size_t j = i - 1;
            if (s->actions[r][j].kind == ACT_SEND_B)
                j--;
            cr_expect_eq(s->actions[r][j].kind, ACT_B);
            cr_expect_eq(s->actions[r][j].chunk, a->chunk);
            cr_expect_eq(s->actions[r][j].mb, 3);
            cr_expect_eq(a->chunk, seen == 0 ? 1 : 0, "rank %d", r);
            seen++;
        }
    }
    ts_err e;
    cr_expect_eq(sched_validate(s, NULL, &e), TS_OK, "%s", e.msg);
    sched_free(s);
}

Test(sched, deterministic)
{
    for (int k = 0; k < SCHED_CUSTOM; k++) {
        if (k == SCHED_DUALPIPE) /* two model copies: test_sched_dual.c */
            continue;
        int v = k == SCHED_INTERLEAVED ? 3 : sched_kind_is_v((sched_kind)k) ? 2 : 1;
        sched *a = gen((sched_kind)k, 5, 10, v, true), *b = gen((sched_kind)k, 5, 10, v, true);
        cr_expect(same_actions(a, b), "%s", sched_kind_name((sched_kind)k));
        sched_free(a);
        sched_free(b);
    }
}
