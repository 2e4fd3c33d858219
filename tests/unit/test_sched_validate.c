/* sched_validate: broken schedules are rejected with the first offending
 * action named (rank, index, token); valid ones pass. Schedules are written
 * as token rows (torch's format) and built without validation. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_build.h"
#include "sim/sched/sched_csv.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_validate.h"

/* Build a schedule from space-separated token rows, no validation. */
static sched *mk(int p, int m, int v, sched_placement pl, const char *const *rows)
{
    sched *s;
    ts_err e;
    cr_assert_eq(sched_build_alloc(SCHED_CUSTOM, pl, p, m, v, &s, &e), TS_OK);
    for (int r = 0; r < p; r++) {
        sched_list l = {0};
        char *copy = strdup(rows[r]), *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            int st, kind, mb, rank = r, chunk = -1, peer = -1;
            cr_assert_eq(sched_csv_token(tok, &st, &kind, &mb, &e), TS_OK, "%s", e.msg);
            if (st >= 0)
                sched_rank_chunk_of(s, st, &rank, &chunk);
            int nb = kind == ACT_SEND_F || kind == ACT_RECV_B   ? st + 1
                     : kind == ACT_SEND_B || kind == ACT_RECV_F ? st - 1
                                                                : -1;
            if (nb >= 0 && nb < p * v) {
                int c;
                sched_rank_chunk_of(s, nb, &peer, &c);
            }
            cr_assert_eq(sched_list_push(&l, kind, chunk, mb, peer, &e), TS_OK);
        }
        free(copy);
        sched_build_take(s, r, &l);
    }
    return s;
}

/* Expect rejection at (rank, index) with a message containing want. */
static void expect_bad(sched *s, int rank, long index, const char *want)
{
    sched_vinfo vi = {0};
    ts_err e;
    cr_expect_eq(sched_validate(s, &vi, &e), TS_EINVAL, "accepted; expected '%s'", want);
    cr_expect_eq(vi.bad_rank, rank, "bad rank %d, want %d: %s", vi.bad_rank, rank, e.msg);
    cr_expect_eq(vi.bad_index, index, "bad index %ld, want %ld: %s", vi.bad_index, index, e.msg);
    cr_expect(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
    sched_free(s);
}

static void expect_ok(sched *s)
{
    ts_err e;
    sched_vinfo vi = {.peak_inflight = NULL};
    cr_expect_eq(sched_validate(s, &vi, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(vi.bad_rank, -1);
    sched_free(s);
}

Test(sched_validate, valid_hand_schedules)
{
    expect_ok(mk(2, 2, 1, SCHED_PLACE_LOOP,
                 (const char *[]){"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                  "1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1"}));
    /* Compute only: cross-rank dependencies implicit. */
    expect_ok(mk(2, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0I0 0W0", "1F0 1I0 1W0"}));
    /* REDUCE_GRAD and OPTIM at their places. */
    expect_ok(mk(1, 2, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0F1 0B0 0B1 0REDUCE_GRAD OPTIM"}));
}

Test(sched_validate, peak_inflight_reported)
{
    sched *s = mk(1, 3, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0F1 0I0 0F2 0W0 0I1 0W1 0I2 0W2"});
    int peak[1];
    sched_vinfo vi = {.peak_inflight = peak};
    ts_err e;
    cr_assert_eq(sched_validate(s, &vi, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(peak[0], 3); /* F2 runs before W0 frees micro-batch 0 */
    sched_free(s);
}

Test(sched_validate, backward_before_forward)
{
    expect_bad(mk(2, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0B0", "1B0 1F0"}), 1, 0,
               "rank 1, action 0 (1B0): B before its F");
}

Test(sched_validate, w_before_i)
{
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0W0 0I0"}), 0, 1, "(0W0): W before its I");
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0B0 0W0"}), 0, 2, "a whole B already ran");
}

Test(sched_validate, computed_twice)
{
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0F0 0B0"}), 0, 1, "second F");
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0I0 0B0"}), 0, 2, "second backward");
}

Test(sched_validate, missing_work_named_at_the_end)
{
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0I0"}), 0, 2,
               "end of the list): no W of micro-batch 0 on stage 0");
    expect_bad(mk(1, 2, 1, SCHED_PLACE_LOOP, (const char *[]){"0F1 0B1"}), 0, 2, "no F of micro-batch 0");
}

Test(sched_validate, forward_before_its_receive)
{
    expect_bad(
        mk(2, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0"}), 1, 0,
        "F before the RECV_F of its input from rank 0");
}

Test(sched_validate, send_never_made)
{
    expect_bad(mk(2, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"}), 0, 3,
               "never sent to rank 1");
}

Test(sched_validate, wrong_peer)
{
    sched_opts o;
    sched_opts_default(&o, SCHED_1F1B);
    o.p = 3, o.m = 2;
    sched *s;
    ts_err e;
    cr_assert_eq(sched_generate(&o, &s, &e), TS_OK);
    cr_assert_eq(s->actions[0][1].kind, ACT_SEND_F);
    s->actions[0][1].peer = 2;
    expect_bad(s, 0, 1, "(0SEND_F0): peer 2 is wrong: the adjacent stage runs on rank 1");
}

/* The two ranks order their point-to-point actions differently: with
 * blocking rendezvous, rank 0's SEND_F0 and rank 1's RECV_F1 wait forever. */
Test(sched_validate, deadlock_under_blocking_p2p)
{
    expect_bad(mk(2, 2, 1, SCHED_PLACE_LOOP,
                  (const char *[]){"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                   "1RECV_F1 1RECV_F0 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1"}),
               0, 1,
               "rank 0, action 1 (0SEND_F0): deadlock under blocking point-to-point: waits for rank 1, "
               "which is blocked at action 0 (1RECV_F1)");
    /* The classic: both ranks send first (rank 1's gradient, rank 0's next
     * activations) and receive after. */
    expect_bad(mk(2, 2, 1, SCHED_PLACE_LOOP,
                  (const char *[]){"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                   "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"}),
               0, 3,
               "(0SEND_F1): deadlock under blocking point-to-point: waits for rank 1, which is "
               "blocked at action 3 (1SEND_B0)");
}

Test(sched_validate, compute_only_dependency_cycle)
{
    expect_bad(mk(2, 2, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"}), 0, 1,
               "(0B0): deadlock: waits for the backward of micro-batch 0 on stage 1 (rank 1)");
}

Test(sched_validate, local_transfer_rejected)
{
    /* ZB-V p=2: stages 1 and 2 are both on rank 1. */
    expect_bad(mk(2, 1, 2, SCHED_PLACE_V,
                  (const char *[]){"0F0 0SEND_F0 3RECV_F0 3F0 3I0 3SEND_B0 3W0 0RECV_B0 0I0 0W0",
                                   "1RECV_F0 1F0 1SEND_F0 2F0 2RECV_B0 2I0 1I0 1SEND_B0 2W0 1W0 2SEND_F0 2SEND_B0"}),
               1, 2, "(1SEND_F0): the adjacent stage runs on the same rank 1");
}

Test(sched_validate, reduce_and_optim_order)
{
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0REDUCE_GRAD 0B0"}), 0, 1,
               "REDUCE_GRAD before the backward of micro-batch 0");
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0B0 OPTIM 0REDUCE_GRAD"}), 0, 3,
               "action after OPTIM");
    expect_bad(mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0B0 0REDUCE_GRAD 0REDUCE_GRAD"}), 0, 3,
               "second REDUCE_GRAD");
}

Test(sched_validate, malformed_action)
{
    sched *s = mk(1, 1, 1, SCHED_PLACE_LOOP, (const char *[]){"0F0 0B0"});
    s->actions[0][1].mb = 5;
    expect_bad(s, 0, 1, "malformed action");
}
