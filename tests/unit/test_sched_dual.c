/* sched_gen_dual: DualPipeV against the closed forms of the DeepSeek-V3
 * report (Table 2) and the deepseek-ai/DualPipe README: bubble
 * (PP/2-1)(F&B+B-3W) with PP = 2p stages, activations PP+1 chunks per
 * rank; its F&B pairs and their timing; what it refuses. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_dep.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_time.h"
#include "sim/sched/sched_validate.h"
#include "tests/unit/sched_fixture.h"

static sched *gen(int p, int m, bool comm)
{
    return sched_fixture(SCHED_DUALPIPEV, p, m, 2, comm, false);
}

static const int PS[] = {1, 2, 3, 4, 5, 6, 8, 16};
#define NP (sizeof PS / sizeof PS[0])

/* Chunk op times in ticks (F, input-gradient B, W); the closed form holds
 * exactly for T_F = T_B >= T_W (the report's F&B pairs assume a forward and
 * a backward chunk of similar length). */
static const int64_t TIMES[][3] = {{1, 1, 1}, {2, 2, 1}, {4, 4, 1}, {4, 4, 3}, {6, 6, 6}};
#define NT (sizeof TIMES / sizeof TIMES[0])

/* Bubble = (PP/2 - 1)(F&B + B - 3W) with PP = 2p stages, F&B = F + B + W
 * (a pair's compute, nothing to hide without communication) and B the
 * whole backward B + W: (p-1)(F + 2B - W) ticks, whatever m >= 2p. */
Test(sched_dual, bubble_closed_form)
{
    int n = 0;
    for (size_t a = 0; a < NP; a++)
        for (int mi = 0; mi < 4; mi++) {
            int p = PS[a], m = (int[]){2 * p, 2 * p + 1, 3 * p, 4 * p + 2}[mi];
            sched *s = gen(p, m, true);
            for (size_t ti = 0; ti < NT; ti++) {
                int64_t f = TIMES[ti][0], b = TIMES[ti][1], w = TIMES[ti][2];
                sched_op_times t = {f, b, w, 0};
                sched_timing tm;
                ts_err e;
                cr_assert_eq(sched_time(s, &t, &tm, &e), TS_OK, "%s", e.msg);
                int64_t fb = f + b + w, bb = b + w;
                cr_expect_eq(tm.ideal, (int64_t)2 * m * (f + b + w), "p=%d m=%d", p, m);
                cr_expect_eq(tm.cost - tm.ideal, (int64_t)(p - 1) * (fb + bb - 3 * w), "p=%d m=%d T=%zu", p, m, ti);
                for (int r = 0; r < p; r++)
                    cr_expect_eq(tm.busy[r], tm.ideal);
                sched_timing_free(&tm);
                n++;
            }
            sched_free(s);
        }
    cr_expect_eq(n, (int)(NP * 4 * NT));
}

/* Activations: PP + 1 = 2p + 1 chunk activations on every rank (the
 * report's Table 2); parameters: 2 chunks = 2 of the 2p stages per rank. */
Test(sched_dual, activations_pp_plus_one)
{
    for (size_t a = 0; a < NP; a++)
        for (int m = 2 * PS[a]; m <= 4 * PS[a] + 1; m += PS[a] + 1) {
            int p = PS[a];
            sched *s = gen(p, m, false);
            int peak[16];
            sched_peak_inflight(s, peak);
            for (int r = 0; r < p; r++)
                cr_expect_eq(peak[r], 2 * p + 1, "p=%d m=%d r=%d", p, m, r);
            cr_expect_eq(s->v, 2);
            cr_expect_eq(s->placement, SCHED_PLACE_V);
            sched_free(s);
        }
}

/* Every (mb, chunk) runs one F and one backward (a B, or an I and a W),
 * and every rank's compute order is the one of dualpipev.py's eight steps:
 * 2(m-2p+r+1) + (p-r-1) overlapped F&B pairs (one fewer on the last rank,
 * whose first main-step pair runs apart), each an F then a whole B of the
 * other chunk. */
Test(sched_dual, pairs_and_counts)
{
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a], m = 2 * p + 3;
        sched *s = gen(p, m, false);
        for (int r = 0; r < p; r++) {
            int nf[2] = {0}, nb[2] = {0}, ni[2] = {0}, nw[2] = {0}, pairs = 0;
            for (size_t i = 0; i < s->n_actions[r]; i++) {
                const sched_action *x = &s->actions[r][i];
                int c = x->chunk;
                nf[c] += x->kind == ACT_F;
                nb[c] += x->kind == ACT_B;
                ni[c] += x->kind == ACT_I;
                nw[c] += x->kind == ACT_W;
                if (x->overlap) {
                    pairs++;
                    cr_assert_eq(x->kind, ACT_F);
                    cr_assert_lt(i + 1, s->n_actions[r]);
                    cr_expect_eq(s->actions[r][i + 1].kind, ACT_B);
                    cr_expect_neq(s->actions[r][i + 1].chunk, c);
                    cr_expect_neq(s->actions[r][i + 1].mb, x->mb);
                }
            }
            for (int c = 0; c < 2; c++) {
                cr_expect_eq(nf[c], m);
                cr_expect_eq(nb[c] + ni[c], m);
                cr_expect_eq(ni[c], nw[c]);
            }
            int want = 2 * (m - 2 * p + r + 1) + (p - r - 1) - (r == p - 1);
            cr_expect_eq(pairs, want, "p=%d r=%d", p, r);
        }
        sched_free(s);
    }
}

/* The schedules validate (no deadlock with blocking point-to-point), with
 * SEND/RECV and with reductions, and keep their pairs through both. */
Test(sched_dual, validates_with_comm)
{
    for (size_t a = 0; a < NP; a++) {
        int p = PS[a];
        sched *s = sched_fixture(SCHED_DUALPIPEV, p, 2 * p + 1, 2, true, true), *c = gen(p, 2 * p + 1, false);
        ts_err e;
        sched_vinfo vi = {0};
        cr_expect_eq(sched_validate(s, &vi, &e), TS_OK, "p=%d: %s", p, e.msg);
        for (int r = 0; r < p; r++) {
            int ps = 0, pc = 0;
            for (size_t i = 0; i < s->n_actions[r]; i++)
                ps += s->actions[r][i].overlap;
            for (size_t i = 0; i < c->n_actions[r]; i++)
                pc += c->actions[r][i].overlap;
            cr_expect_eq(ps, pc);
            cr_expect_gt(pc, 0);
        }
        sched_free(s);
        sched_free(c);
    }
}

/* The overlap: with an all-to-all as long as the compute after every F and
 * every backward (EP), a pair takes max(compute, communication) = its
 * compute, while every unpaired F / B / I pays its all-to-all in full. So
 * a rank is busy ideal + a2a_f x (unpaired F) + a2a_b x (unpaired B, I);
 * ZB-V, which pairs nothing, pays 2m (a2a_f + a2a_b). */
Test(sched_dual, overlap_hides_all_to_all)
{
    int p = 4, m = 12;
    int64_t f = 4, b = 4, w = 2;
    sched_op_times t = {f, b, w, 0};
    sched_ep_times ep = {f, b};
    sched *s = gen(p, m, true), *z = sched_fixture(SCHED_ZB_V, p, m, 2, true, false);
    sched_timing tm, tz, t0;
    ts_err e;
    cr_assert_eq(sched_time_ep(s, &t, &ep, &tm, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(sched_time_ep(z, &t, &ep, &tz, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(sched_time(s, &t, &t0, &e), TS_OK, "%s", e.msg);
    for (int r = 0; r < p; r++) {
        int64_t nf = 0, nb = 0;
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            const sched_action *x = &s->actions[r][i];
            bool paired = x->overlap || (i > 0 && s->actions[r][i - 1].overlap && x->kind == ACT_B);
            /* the pair's B follows its F directly in a compute-only list;
             * with comm, SEND/RECV may sit between: find the F */
            for (size_t j = i; !paired && j-- > 0;)
                if (s->actions[r][j].kind <= ACT_W) {
                    paired = s->actions[r][j].overlap && x->kind <= ACT_W;
                    break;
                }
            if (paired || x->kind > ACT_W)
                continue;
            nf += x->kind == ACT_F;
            nb += x->kind == ACT_B || x->kind == ACT_I;
        }
        cr_expect_eq(tm.busy[r], tm.ideal + nf * f + nb * b, "r=%d", r);
        cr_expect_eq(tz.busy[r], tz.ideal + 2 * m * (f + b), "r=%d", r);
        cr_expect_lt(tm.busy[r], tz.busy[r]);
        cr_expect_eq(t0.busy[r], t0.ideal);
    }
    cr_expect_lt(tm.cost, tz.cost);
    sched_timing_free(&tm);
    sched_timing_free(&tz);
    sched_timing_free(&t0);
    sched_free(s);
    sched_free(z);
}

static void expect_refused(int p, int m, int v, const char *what)
{
    sched_opts o;
    sched_opts_default(&o, SCHED_DUALPIPEV);
    o.p = p;
    o.m = m;
    o.v = v;
    sched *s = NULL;
    ts_err e;
    cr_expect_eq(sched_generate(&o, &s, &e), TS_EINVAL, "p=%d m=%d v=%d", p, m, v);
    cr_expect_null(s);
    cr_expect(strstr(e.msg, what) != NULL, "%s", e.msg);
}

Test(sched_dual, refuses_what_dualpipev_py_refuses)
{
    expect_refused(4, 7, 2, "m >= 2p = 8");
    expect_refused(1, 1, 2, "m >= 2p = 2");
    expect_refused(4, 8, 1, "exactly 2");
    sched_opts o;
    sched_opts_default(&o, SCHED_DUALPIPEV);
    cr_expect_eq(o.v, 2);
    sched_kind k;
    ts_err e;
    cr_expect_eq(sched_kind_parse("dualpipev", &k, &e), TS_OK);
    cr_expect_eq(k, SCHED_DUALPIPEV);
    cr_expect(sched_kind_is_v(k));
}

/* DualPipe (two model copies, dualpipe.py): bubble (PP/2-1)(F&B + B - 3W)
 * with PP = p stages per copy and whole-stage op times (each a chunk of v
 * = 2 ticks per ns), parameters 2x (both copies' stage on every rank),
 * activations PP + 1 = p + 1 chunks on every rank. */
Test(sched_dual, dualpipe_closed_forms)
{
    int n = 0;
    for (int p = 2; p <= 16; p += 2)
        for (int mi = 0; mi < 3; mi++) {
            int m = (int[]){2 * p, 2 * p + 2, 4 * p}[mi];
            sched *s = sched_fixture(SCHED_DUALPIPE, p, m, 2, true, false);
            cr_expect_eq(s->placement, SCHED_PLACE_DUAL);
            cr_expect_eq(s->m, m / 2);
            ts_err e;
            cr_expect_eq(sched_validate(s, NULL, &e), TS_OK, "p=%d m=%d: %s", p, m, e.msg);
            for (size_t ti = 0; ti < NT; ti++) {
                int64_t f = TIMES[ti][0], b = TIMES[ti][1], w = TIMES[ti][2];
                sched_op_times t = {f, b, w, 0};
                sched_timing tm;
                cr_assert_eq(sched_time(s, &t, &tm, &e), TS_OK, "%s", e.msg);
                /* ticks of 1/2 ns: a whole-stage op of T ns is 2T ticks */
                int64_t F = 2 * f, B = 2 * (b + w), W = 2 * w, FB = F + B;
                cr_expect_eq(tm.ideal, (int64_t)m * (F + B), "p=%d m=%d", p, m);
                cr_expect_eq(tm.cost - tm.ideal, (int64_t)(p / 2 - 1) * (FB + B - 3 * W), "p=%d m=%d T=%zu", p, m, ti);
                for (int r = 0; r < p; r++) {
                    cr_expect_eq(tm.busy[r], tm.ideal);
                    cr_expect_eq(tm.peak_inflight[r], p + 1, "p=%d m=%d r=%d", p, m, r);
                }
                sched_timing_free(&tm);
                n++;
            }
            /* both copies' stage k hold the same layers: 2x parameters */
            for (int k = 0; k < p; k++)
                cr_expect_eq(s->stages[k].first_layer, s->stages[p + k].first_layer);
            sched_free(s);
        }
    cr_expect_eq(n, 8 * 3 * (int)NT);
}

/* The copies are two pipelines: stage p-1 (copy 0's last, on rank p-1)
 * hands nothing to stage p (copy 1's first, also on rank p-1), and copy 1
 * is fed from rank p-1 as copy 0 is from rank 0. */
Test(sched_dual, dualpipe_copies_do_not_chain)
{
    int p = 4;
    sched *s = sched_fixture(SCHED_DUALPIPE, p, 8, 2, true, false);
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            const sched_action *a = &s->actions[r][i];
            if (a->kind != ACT_F)
                continue;
            int st = sched_stage_of(s, r, a->chunk);
            sched_dep d;
            sched_dep_via in = sched_dep_input(s, r, a, &d), out = sched_dep_output(s, r, a, &d);
            cr_expect_eq(in == SCHED_DEP_NONE, st == 0 || st == p, "stage %d", st);
            cr_expect_eq(out == SCHED_DEP_NONE, st == p - 1 || st == 2 * p - 1, "stage %d", st);
            cr_expect_neq(in, SCHED_DEP_LOCAL);
        }
    /* rank p-1 starts with copy 1's forwards, rank 0 with copy 0's */
    cr_expect_eq(s->actions[0][0].kind, ACT_F);
    cr_expect_eq(sched_stage_of(s, 0, s->actions[0][0].chunk), 0);
    cr_expect_eq(s->actions[p - 1][0].kind, ACT_F);
    cr_expect_eq(sched_stage_of(s, p - 1, s->actions[p - 1][0].chunk), p);
    sched_free(s);
}

static void expect_dual_refused(int p, int m, int v, int layers, const char *what)
{
    sched_opts o;
    sched_opts_default(&o, SCHED_DUALPIPE);
    o.p = p;
    o.m = m;
    o.v = v;
    o.num_layers = layers;
    sched *s = NULL;
    ts_err e;
    cr_expect_eq(sched_generate(&o, &s, &e), TS_EINVAL, "p=%d m=%d v=%d", p, m, v);
    cr_expect_null(s);
    cr_expect(strstr(e.msg, what) != NULL, "%s", e.msg);
}

Test(sched_dual, dualpipe_refuses_what_dualpipe_py_refuses)
{
    expect_dual_refused(3, 8, 2, 0, "p even, m even and m >= 2p");
    expect_dual_refused(4, 9, 2, 0, "e.g. p = 4, m = 10");
    expect_dual_refused(4, 6, 2, 0, "e.g. p = 4, m = 8");
    expect_dual_refused(4, 8, 1, 0, "exactly 2");
    expect_dual_refused(4, 8, 2, 6, "multiple of 4");
}
