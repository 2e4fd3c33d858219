/* sched_comm — insert SEND/RECV actions into a compute-only schedule.
 *
 * As torch.distributed.pipelining's _add_send_recv: the ranks' compute
 * orders are replayed in rounds, each rank taking one step per round if the
 * input of its next op has been placed. When an op produces data for
 * another rank, its SEND goes right after it and the matching RECV is
 * appended to the receiver's list at the same moment, wherever the receiver
 * stands (always before the op that consumes it, which cannot have run).
 * All lists thus follow one global order in which each SEND meets its RECV:
 * even executing every SEND and RECV as a blocking rendezvous, one at a
 * time, cannot deadlock; and a SEND never waits behind other compute.
 */
#include "sim/sched/sched_comm.h"

#include "sim/sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched_build.h"
#include "sim/sched/sched_dep.h"

typedef struct {
    int dir; /* 0 activations (F), 1 gradient (B) */
    int mb;
    int stage; /* producing stage */
} msg;

/* The remote input the compute action a on rank needs, if any (m and *src
 * are also set for a local one). */
static bool needs(const sched *s, int rank, const sched_action *a, msg *m, int *src)
{
    sched_dep d;
    if (sched_dep_input(s, rank, a, &d) == SCHED_DEP_NONE)
        return false;
    *m = (msg){d.grad, a->mb, d.peer_stage};
    *src = d.peer_rank;
    return d.via == SCHED_DEP_REMOTE;
}

/* The data the compute action a on rank produces for another rank, if any
 * (m and *dst are also set for a local hand-off). */
static bool produces(const sched *s, int rank, const sched_action *a, msg *m, int *dst)
{
    sched_dep d;
    if (sched_dep_output(s, rank, a, &d) == SCHED_DEP_NONE)
        return false;
    *m = (msg){d.grad, a->mb, d.stage};
    *dst = d.peer_rank;
    return d.via == SCHED_DEP_REMOTE;
}

/* Append the SEND on src and the RECV on dst for m. */
static int transfer(const sched *s, sched_list *out, int src, int dst, msg m, ts_err *err)
{
    int r, send_chunk, recv_chunk;
    sched_rank_chunk_of(s, m.stage, &r, &send_chunk);
    sched_rank_chunk_of(s, m.dir == 0 ? m.stage + 1 : m.stage - 1, &r, &recv_chunk);
    int rc = sched_list_push(&out[src], m.dir == 0 ? ACT_SEND_F : ACT_SEND_B, send_chunk, m.mb, dst, err);
    if (rc == TS_OK)
        rc = sched_list_push(&out[dst], m.dir == 0 ? ACT_RECV_F : ACT_RECV_B, recv_chunk, m.mb, src, err);
    return rc;
}

int sched_add_comm(sched *s, ts_err *err)
{
    if (sched_has_comm(s))
        return TS_OK;
    int p = s->p, rc = TS_OK;
    size_t cells = 2 * (size_t)s->p * (size_t)s->v * (size_t)s->m;
    size_t *pos = calloc((size_t)p, sizeof *pos);
    bool *placed = calloc(cells, sizeof *placed); /* RECV of (dir, producing stage, mb) placed */
    sched_list *out = calloc((size_t)p, sizeof *out);
    if (!pos || !placed || !out) {
        rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
        goto done;
    }
#define KEY(mm) (((size_t)(mm).dir * (size_t)(s->p * s->v) + (size_t)(mm).stage) * (size_t)s->m + (size_t)(mm).mb)
    for (;;) {
        bool progress = false, finished = true;
        /* One round: every rank whose next op has its input placed takes
         * one step; the ranks go in order. */
        for (int r = 0; r < p && rc == TS_OK; r++) {
            if (pos[r] == s->n_actions[r])
                continue;
            finished = false;
            const sched_action *a = &s->actions[r][pos[r]];
            msg m;
            int peer;
            if (needs(s, r, a, &m, &peer) && !placed[KEY(m)])
                continue;
            rc = sched_list_push(&out[r], a->kind, a->chunk, a->mb, a->peer, err);
            if (rc == TS_OK)
                out[r].a[out[r].n - 1].overlap = a->overlap;
            if (rc == TS_OK && produces(s, r, a, &m, &peer)) {
                rc = transfer(s, out, r, peer, m, err);
                placed[KEY(m)] = true;
            }
            pos[r]++;
            progress = true;
        }
        if (rc != TS_OK || finished)
            break;
        if (!progress) {
            for (int r = 0; r < p; r++) {
                if (pos[r] == s->n_actions[r])
                    continue;
                char tok[SCHED_TOKEN_BYTES];
                msg m = {0, 0, 0};
                int a = -1;
                sched_action_token(s, r, &s->actions[r][pos[r]], tok, sizeof tok);
                needs(s, r, &s->actions[r][pos[r]], &m, &a);
                rc = err_set(err, TS_EINVAL,
                             "rank %d, action %zu (%s): the compute order cannot run: it waits for "
                             "the %s of micro-batch %d from stage %d on rank %d, which never comes "
                             "(a dependency cycle across ranks)",
                             r, pos[r], tok, m.dir == 0 ? "activations" : "gradient", m.mb, m.stage, a);
                break;
            }
            break;
        }
    }
#undef KEY
    if (rc == TS_OK)
        for (int r = 0; r < p; r++)
            sched_build_take(s, r, &out[r]);
done:
    if (out)
        for (int r = 0; r < p; r++)
            sched_list_free(&out[r]);
    free(out);
    free(placed);
    free(pos);
    return rc;
}
