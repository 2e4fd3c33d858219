/* sched_dep: which stage, rank and chunk a compute action's input comes
 * from and its output goes to, and whether it travels by SEND/RECV or is
 * handed over on the rank, under loop (1F1B, interleaved) and V (ZB-V)
 * placements; and that generated schedules agree with the rule. */
#include <criterion/criterion.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_dep.h"
#include "sim/sched/sched_generate.h"
#include "tests/unit/sched_fixture.h"

static sched *gen(sched_kind k, int p, int m, int v, bool comm)
{
    return sched_fixture(k, p, m, v, comm, false);
}

static sched_action act(sched_act_kind kind, int chunk, int mb)
{
    return (sched_action){.kind = (uint8_t)kind, .chunk = (int16_t)chunk, .mb = mb, .peer = -1};
}

/* Expect d to be {via, grad, stage, peer_stage, peer_rank, peer_chunk}. */
static void expect_dep(const sched_dep *d, sched_dep_via via, bool grad, int stage, int peer_stage, int peer_rank,
                       int peer_chunk, const char *what)
{
    cr_expect_eq(d->via, via, "%s: via %d, want %d", what, d->via, via);
    cr_expect_eq(d->grad, grad, "%s: grad", what);
    cr_expect_eq(d->stage, stage, "%s: stage %d, want %d", what, d->stage, stage);
    cr_expect_eq(d->peer_stage, peer_stage, "%s: peer stage %d, want %d", what, d->peer_stage, peer_stage);
    cr_expect_eq(d->peer_rank, peer_rank, "%s: peer rank %d, want %d", what, d->peer_rank, peer_rank);
    cr_expect_eq(d->peer_chunk, peer_chunk, "%s: peer chunk %d, want %d", what, d->peer_chunk, peer_chunk);
}

/* 1F1B, p = 4: inputs and outputs cross to the neighbour ranks; the ends
 * of the pipeline have none. */
Test(sched_dep, one_f_one_b_neighbours)
{
    sched *s = gen(SCHED_1F1B, 4, 8, 1, true);
    sched_dep d;
    sched_action f = act(ACT_F, 0, 3), b = act(ACT_B, 0, 3), i = act(ACT_I, 0, 3);
    cr_expect_eq(sched_dep_input(s, 1, &f, &d), SCHED_DEP_REMOTE);
    expect_dep(&d, SCHED_DEP_REMOTE, false, 1, 0, 0, 0, "F rank 1 input");
    sched_dep_input(s, 1, &b, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, true, 1, 2, 2, 0, "B rank 1 input");
    sched_dep_input(s, 2, &i, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, true, 2, 3, 3, 0, "I rank 2 input");
    cr_expect_eq(sched_dep_input(s, 0, &f, &d), SCHED_DEP_NONE);
    expect_dep(&d, SCHED_DEP_NONE, false, 0, -1, -1, -1, "F rank 0 input (tokens)");
    sched_dep_input(s, 3, &b, &d);
    expect_dep(&d, SCHED_DEP_NONE, true, 3, -1, -1, -1, "B rank 3 input (loss)");
    sched_dep_output(s, 0, &f, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, false, 0, 1, 1, 0, "F rank 0 output");
    sched_dep_output(s, 3, &f, &d);
    expect_dep(&d, SCHED_DEP_NONE, false, 3, -1, -1, -1, "F rank 3 output (loss)");
    sched_dep_output(s, 2, &b, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, true, 2, 1, 1, 0, "B rank 2 output");
    sched_dep_output(s, 0, &i, &d);
    expect_dep(&d, SCHED_DEP_NONE, true, 0, -1, -1, -1, "I rank 0 output");
    sched_free(s);
}

/* W and the non-compute kinds move no data between stages. */
Test(sched_dep, other_kinds_have_none)
{
    sched *s = gen(SCHED_ZB_H1, 3, 6, 1, true);
    static const sched_act_kind KINDS[] = {ACT_W, ACT_SEND_F, ACT_RECV_F, ACT_SEND_B, ACT_RECV_B, ACT_REDUCE_GRAD};
    sched_dep d;
    for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
        sched_action a = act(KINDS[k], 0, KINDS[k] == ACT_REDUCE_GRAD ? -1 : 1);
        cr_expect_eq(sched_dep_input(s, 1, &a, &d), SCHED_DEP_NONE, "%s", sched_act_name(KINDS[k]));
        expect_dep(&d, SCHED_DEP_NONE, false, -1, -1, -1, -1, sched_act_name(KINDS[k]));
        cr_expect_eq(sched_dep_output(s, 1, &a, &d), SCHED_DEP_NONE, "%s", sched_act_name(KINDS[k]));
        expect_dep(&d, SCHED_DEP_NONE, false, -1, -1, -1, -1, sched_act_name(KINDS[k]));
    }
    sched_action o = act(ACT_OPTIM, -1, -1);
    cr_expect_eq(sched_dep_input(s, 1, &o, &d), SCHED_DEP_NONE);
    cr_expect_eq(sched_dep_output(s, 1, &o, &d), SCHED_DEP_NONE);
    sched_free(s);
}

/* Interleaved, p = 2, v = 2 (stage = chunk*p + rank): chunk 1 of rank 0
 * (stage 2) reads from chunk 0 of rank 1 (stage 1), and the last stage's
 * backward starts at rank 1's chunk 1. */
Test(sched_dep, interleaved_wraps_around_ranks)
{
    sched *s = gen(SCHED_INTERLEAVED, 2, 4, 2, true);
    sched_dep d;
    sched_action f1 = act(ACT_F, 1, 0), b1 = act(ACT_B, 1, 0), f0 = act(ACT_F, 0, 0);
    sched_dep_input(s, 0, &f1, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, false, 2, 1, 1, 0, "F rank 0 chunk 1 input");
    sched_dep_output(s, 1, &f0, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, false, 1, 2, 0, 1, "F rank 1 chunk 0 output");
    sched_dep_input(s, 1, &b1, &d);
    expect_dep(&d, SCHED_DEP_NONE, true, 3, -1, -1, -1, "B rank 1 chunk 1 input (loss)");
    sched_dep_input(s, 0, &b1, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, true, 2, 3, 1, 1, "B rank 0 chunk 1 input");
    sched_dep_output(s, 0, &b1, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, true, 2, 1, 1, 0, "B rank 0 chunk 1 output");
    sched_free(s);
}

/* Interleaved with one rank: every chunk's neighbour is on the rank, so
 * data is handed over locally. */
Test(sched_dep, interleaved_one_rank_is_local)
{
    sched *s = gen(SCHED_INTERLEAVED, 1, 2, 3, true);
    sched_dep d;
    sched_action f1 = act(ACT_F, 1, 1), b1 = act(ACT_B, 1, 1);
    sched_dep_input(s, 0, &f1, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, false, 1, 0, 0, 0, "F chunk 1 input");
    sched_dep_output(s, 0, &f1, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, false, 1, 2, 0, 2, "F chunk 1 output");
    sched_dep_input(s, 0, &b1, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, true, 1, 2, 0, 2, "B chunk 1 input");
    sched_dep_output(s, 0, &b1, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, true, 1, 0, 0, 0, "B chunk 1 output");
    sched_free(s);
}

/* ZB-V, p = 2 (rank 0 runs stages 0 and 3, rank 1 stages 1 and 2): the
 * bottom of the V (stage 1 -> 2 and back) stays on rank 1; the top crosses. */
Test(sched_dep, zb_v_bottom_is_local)
{
    sched *s = gen(SCHED_ZB_V, 2, 4, 2, true);
    sched_dep d;
    sched_action f0 = act(ACT_F, 0, 2), f1 = act(ACT_F, 1, 2), i0 = act(ACT_I, 0, 2), i1 = act(ACT_I, 1, 2);
    sched_dep_input(s, 1, &f1, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, false, 2, 1, 1, 0, "F rank 1 chunk 1 input");
    sched_dep_output(s, 1, &f0, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, false, 1, 2, 1, 1, "F rank 1 chunk 0 output");
    sched_dep_input(s, 1, &i0, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, true, 1, 2, 1, 1, "I rank 1 chunk 0 input");
    sched_dep_output(s, 1, &i1, &d);
    expect_dep(&d, SCHED_DEP_LOCAL, true, 2, 1, 1, 0, "I rank 1 chunk 1 output");
    sched_dep_input(s, 0, &f1, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, false, 3, 2, 1, 1, "F rank 0 chunk 1 input");
    sched_dep_input(s, 0, &i1, &d);
    expect_dep(&d, SCHED_DEP_NONE, true, 3, -1, -1, -1, "I rank 0 chunk 1 input (loss)");
    sched_dep_output(s, 0, &i1, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, true, 3, 2, 1, 1, "I rank 0 chunk 1 output");
    sched_dep_input(s, 1, &f0, &d);
    expect_dep(&d, SCHED_DEP_REMOTE, false, 1, 0, 0, 0, "F rank 1 chunk 0 input");
    sched_dep_output(s, 0, &i0, &d);
    expect_dep(&d, SCHED_DEP_NONE, true, 0, -1, -1, -1, "I rank 0 chunk 0 output");
    sched_free(s);
}

/* Index of the first action of `kind`, chunk and mb on rank r at or after
 * `from`, or n_actions[r]. */
static size_t find(const sched *s, int r, size_t from, int kind, int chunk, int mb)
{
    size_t i = from;
    while (i < s->n_actions[r] &&
           !(s->actions[r][i].kind == kind && s->actions[r][i].chunk == chunk && s->actions[r][i].mb == mb))
        i++;
    return i;
}

/* Every generator's schedule follows the rule: a REMOTE input has its
 * RECV from peer_rank earlier on the rank, a LOCAL input its producer
 * earlier on the rank, a REMOTE output its SEND to peer_rank later; and
 * the producer's output leads back to the consumer. */
Test(sched_dep, generated_schedules_follow_the_rule)
{
    for (int k = 0; k < SCHED_CUSTOM; k++)
        for (int p = 1; p <= 4; p++) {
            if (k == SCHED_DUALPIPE) /* two model copies: test_sched_dual.c */
                continue;
            int v = k == SCHED_INTERLEAVED ? 2 : sched_kind_is_v((sched_kind)k) ? 2 : 1;
            sched *s = gen((sched_kind)k, p, 2 * p, v, true);
            for (int r = 0; r < p; r++)
                for (size_t i = 0; i < s->n_actions[r]; i++) {
                    const sched_action *a = &s->actions[r][i];
                    sched_dep in, out, back;
                    sched_dep_input(s, r, a, &in);
                    sched_dep_output(s, r, a, &out);
                    if (in.via == SCHED_DEP_REMOTE) {
                        size_t j = find(s, r, 0, in.grad ? ACT_RECV_B : ACT_RECV_F, a->chunk, a->mb);
                        cr_expect_lt(j, i, "%s p=%d rank %d action %zu: no RECV before it",
                                     sched_kind_name((sched_kind)k), p, r, i);
                        if (j < i)
                            cr_expect_eq(s->actions[r][j].peer, in.peer_rank);
                    } else if (in.via == SCHED_DEP_LOCAL) {
                        size_t j = find(s, r, 0, ACT_F, in.peer_chunk, a->mb);
                        if (in.grad) {
                            size_t jb = find(s, r, 0, ACT_B, in.peer_chunk, a->mb);
                            size_t ji = find(s, r, 0, ACT_I, in.peer_chunk, a->mb);
                            j = jb < ji ? jb : ji;
                        }
                        cr_expect_lt(j, i, "%s p=%d rank %d action %zu: no local producer before it",
                                     sched_kind_name((sched_kind)k), p, r, i);
                    }
                    if (in.via != SCHED_DEP_NONE) {
                        sched_action prod = act(in.grad ? ACT_I : ACT_F, in.peer_chunk, a->mb);
                        sched_dep_output(s, in.peer_rank, &prod, &back);
                        cr_expect_eq(back.via, in.via);
                        cr_expect_eq(back.peer_rank, r);
                        cr_expect_eq(back.peer_chunk, a->chunk);
                        cr_expect_eq(back.peer_stage, in.stage);
                    }
                    if (out.via == SCHED_DEP_REMOTE) {
                        size_t j = find(s, r, i, out.grad ? ACT_SEND_B : ACT_SEND_F, a->chunk, a->mb);
                        cr_expect_lt(j, s->n_actions[r], "%s p=%d rank %d action %zu: no SEND after it",
                                     sched_kind_name((sched_kind)k), p, r, i);
                        if (j < s->n_actions[r])
                            cr_expect_eq(s->actions[r][j].peer, out.peer_rank);
                    }
                }
            sched_free(s);
        }
}
