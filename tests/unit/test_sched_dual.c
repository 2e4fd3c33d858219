/* sched_gen_dual: DualPipeV against the closed forms of the DeepSeek-V3
 * report (Table 2) and the deepseek-ai/DualPipe README: bubble
 * (PP/2-1)(F&B+B-3W) with PP = 2p stages, activations PP+1 chunks per
 * rank; its F&B pairs and their timing; what it refuses. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/sched/sched.h"
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
