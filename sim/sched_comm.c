/* sched_comm — insert SEND/RECV actions into a compute-only schedule.
 *
 * The ranks' compute orders are replayed in a logical, untimed execution. A
 * transfer happens as one step that appends the SEND to the sender's list
 * and the RECV to the receiver's list together, so the lists follow one
 * global order in which every SEND meets its RECV: executing them with
 * blocking rendezvous send and receive cannot deadlock. A transfer fires
 * when the receiver stands right before the op that consumes the data, so
 * each RECV sits right before its consumer; a rank that still holds data to
 * send waits where it is (its SEND stays right after the producer) while any
 * other rank can move, and moves on only when nothing else can.
 */
#include "sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_build.h"

typedef struct {
    int dir;   /* 0 activations (F), 1 gradient (B) */
    int mb;
    int stage; /* producing stage */
} msg;

typedef struct {
    msg *q;
    size_t n, cap;
} outbox;

/* The remote input the compute action a on rank needs, if any. */
static bool needs(const sched *s, int rank, const sched_action *a, msg *m, int *src)
{
    int S = sched_num_stages(s), st, r, c;
    if (a->kind == ACT_F) {
        st = sched_stage_of(s, rank, a->chunk);
        if (st == 0)
            return false;
        sched_rank_chunk_of(s, st - 1, &r, &c);
        *m = (msg){0, a->mb, st - 1};
    } else if (a->kind == ACT_B || a->kind == ACT_I) {
        st = sched_stage_of(s, rank, a->chunk);
        if (st == S - 1)
            return false;
        sched_rank_chunk_of(s, st + 1, &r, &c);
        *m = (msg){1, a->mb, st + 1};
    } else {
        return false;
    }
    *src = r;
    return r != rank;
}

/* The data the compute action a on rank produces for another rank, if any. */
static bool produces(const sched *s, int rank, const sched_action *a, msg *m, int *dst)
{
    int S = sched_num_stages(s), st, r, c;
    if (a->kind == ACT_F) {
        st = sched_stage_of(s, rank, a->chunk);
        if (st == S - 1)
            return false;
        sched_rank_chunk_of(s, st + 1, &r, &c);
        *m = (msg){0, a->mb, st};
    } else if (a->kind == ACT_B || a->kind == ACT_I) {
        st = sched_stage_of(s, rank, a->chunk);
        if (st == 0)
            return false;
        sched_rank_chunk_of(s, st - 1, &r, &c);
        *m = (msg){1, a->mb, st};
    } else {
        return false;
    }
    *dst = r;
    return r != rank;
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
    size_t *pos = calloc((size_t)p, sizeof *pos);
    bool *got = calloc((size_t)p, sizeof *got);
    outbox *ob = calloc((size_t)p, sizeof *ob);
    sched_list *out = calloc((size_t)p, sizeof *out);
    if (!pos || !got || !ob || !out) {
        rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
        goto done;
    }
    for (;;) {
        bool progress = false, finished = true;
        /* 1. Transfers whose receiver stands before the consumer. */
        for (int b = 0; b < p && rc == TS_OK; b++) {
            msg m;
            int a;
            if (pos[b] == s->n_actions[b] || got[b] || !needs(s, b, &s->actions[b][pos[b]], &m, &a))
                continue;
            for (size_t i = 0; i < ob[a].n; i++) {
                msg *q = &ob[a].q[i];
                if (q->dir == m.dir && q->mb == m.mb && q->stage == m.stage) {
                    rc = transfer(s, out, a, b, m, err);
                    memmove(q, q + 1, (ob[a].n - i - 1) * sizeof *q);
                    ob[a].n--;
                    got[b] = true;
                    progress = true;
                    break;
                }
            }
        }
        if (rc != TS_OK)
            break;
        /* 2. Move ranks whose input is there; first those with nothing left
         * to send, then (if none could move) the lowest other one. */
        for (int pass = 0; pass < 2 && !progress && rc == TS_OK; pass++)
            for (int r = 0; r < p; r++) {
                if (pos[r] == s->n_actions[r] || (pass == 0 && ob[r].n > 0))
                    continue;
                const sched_action *a = &s->actions[r][pos[r]];
                msg m;
                int peer;
                if (!got[r] && needs(s, r, a, &m, &peer))
                    continue;
                rc = sched_list_push(&out[r], a->kind, a->chunk, a->mb, a->peer, err);
                if (rc == TS_OK && produces(s, r, a, &m, &peer)) {
                    if (ob[r].n == ob[r].cap) {
                        size_t cap = ob[r].cap ? 2 * ob[r].cap : 8;
                        msg *q = realloc(ob[r].q, cap * sizeof *q);
                        if (!q) {
                            rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
                            break;
                        }
                        ob[r].q = q;
                        ob[r].cap = cap;
                    }
                    ob[r].q[ob[r].n++] = m;
                }
                pos[r]++;
                got[r] = false;
                progress = true;
                if (pass == 1 || rc != TS_OK)
                    break;
            }
        if (rc != TS_OK)
            break;
        for (int r = 0; r < p; r++)
            if (pos[r] < s->n_actions[r] || ob[r].n > 0)
                finished = false;
        if (finished)
            break;
        if (!progress) {
            for (int r = 0; r < p; r++) {
                if (pos[r] == s->n_actions[r])
                    continue;
                char tok[SCHED_TOKEN_BYTES];
                msg m;
                int a = -1;
                sched_action_token(s, r, &s->actions[r][pos[r]], tok, sizeof tok);
                needs(s, r, &s->actions[r][pos[r]], &m, &a);
                rc = err_set(err, TS_EINVAL,
                             "rank %d, action %zu (%s): the compute order cannot run: it waits for "
                             "%s of micro-batch %d from stage %d on rank %d, which never comes "
                             "(a dependency cycle across ranks)",
                             r, pos[r], tok, m.dir == 0 ? "activations" : "the gradient", m.mb,
                             m.stage, a);
                break;
            }
            if (rc == TS_OK)
                rc = err_set(err, TS_ESTATE, "schedule: sends left with no receiver (bug)");
            break;
        }
    }
    if (rc == TS_OK)
        for (int r = 0; r < p; r++)
            sched_build_take(s, r, &out[r]);
done:
    if (out)
        for (int r = 0; r < p; r++)
            sched_list_free(&out[r]);
    if (ob)
        for (int r = 0; r < p; r++)
            free(ob[r].q);
    free(out);
    free(ob);
    free(got);
    free(pos);
    return rc;
}
