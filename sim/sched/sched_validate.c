/* sched_validate — see sched_validate.h for the checks and their order. */
#include "sim/sched/sched_validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched_dep.h"

enum { FL_F = 1, FL_B = 2, FL_I = 4, FL_W = 8, FL_SF = 16, FL_RF = 32, FL_SB = 64, FL_RB = 128 };

typedef struct {
    const sched *s;
    sched_vinfo *info;
    ts_err *err;
    int S;
    bool comm;
    uint8_t *fl;  /* static scan flags, S*m */
    uint8_t *dyn; /* executed flags in the execution phase, S*m */
} vstate;

static bool well_formed(const sched *s, const sched_action *a)
{
    if (a->kind >= ACT_KIND_COUNT)
        return false;
    if (a->kind == ACT_OPTIM)
        return a->chunk == -1 && a->mb == -1;
    if (a->chunk < 0 || a->chunk >= s->v)
        return false;
    if (a->kind == ACT_REDUCE_GRAD)
        return a->mb == -1;
    return a->mb >= 0 && a->mb < s->m;
}

static int fail(vstate *V, int r, size_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int fail(vstate *V, int r, size_t i, const char *fmt, ...)
{
    char what[ERR_MSG_BYTES], tok[SCHED_TOKEN_BYTES + 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (i >= V->s->n_actions[r]) {
        snprintf(tok, sizeof tok, "end of the list");
    } else {
        const sched_action *a = &V->s->actions[r][i];
        if (well_formed(V->s, a))
            sched_action_token(V->s, r, a, tok, sizeof tok);
        else
            snprintf(tok, sizeof tok, "kind %d chunk %d mb %d", a->kind, a->chunk, (int)a->mb);
    }
    if (V->info) {
        V->info->bad_rank = r;
        V->info->bad_index = (long)i;
    }
    return err_set(V->err, TS_EINVAL, "rank %d, action %zu (%s): %s", r, i, tok, what);
}

/* Rank of stage st, or -1 outside [0, S). */
static int rank_of(const vstate *V, int st)
{
    if (st < 0 || st >= V->S)
        return -1;
    int r, c;
    sched_rank_chunk_of(V->s, st, &r, &c);
    return r;
}

/* Check one action of rank r in program order (step 1 and 2). */
static int check_action(vstate *V, int r, size_t i, int *reduced, bool *optim)
{
    const sched *s = V->s;
    const sched_action *a = &s->actions[r][i];
    int m = s->m;
    if (!well_formed(s, a))
        return fail(V, r, i,
                    "malformed action: kind in [0, %d), chunk in [0, %d) (-1 for OPTIM), "
                    "micro-batch in [0, %d) (-1 for REDUCE_GRAD/OPTIM)",
                    ACT_KIND_COUNT, s->v, m);
    if (*optim)
        return fail(V, r, i, "action after OPTIM; the optimizer step must be the rank's last action");
    if (a->kind == ACT_OPTIM) {
        for (int c = 0; c < s->v; c++) {
            int st = sched_stage_of(s, r, c);
            for (int k = 0; k < m; k++)
                if (!(V->fl[st * m + k] & (FL_B | FL_W)))
                    return fail(V, r, i, "OPTIM before the backward of micro-batch %d on stage %d", k, st);
        }
        *optim = true;
        return TS_OK;
    }
    int st = sched_stage_of(s, r, a->chunk);
    uint8_t *f = &V->fl[st * m + (a->mb >= 0 ? a->mb : 0)];
    int kind = a->kind, expect_peer = -1;
    sched_dep in; /* what an F, B or I waits for */
    sched_dep_input(s, r, a, &in);
    if (kind == ACT_SEND_F || kind == ACT_RECV_B)
        expect_peer = rank_of(V, st + 1);
    else if (kind == ACT_SEND_B || kind == ACT_RECV_F)
        expect_peer = rank_of(V, st - 1);
    if (kind >= ACT_SEND_F && kind <= ACT_RECV_B) {
        if (expect_peer < 0)
            return fail(V, r, i, "stage %d has no %s stage to talk to", st,
                        kind == ACT_SEND_F || kind == ACT_RECV_B ? "next" : "previous");
        if (expect_peer == r)
            return fail(V, r, i,
                        "the adjacent stage runs on the same rank %d; data passes locally, "
                        "remove this action",
                        r);
        if (a->peer != expect_peer)
            return fail(V, r, i, "peer %d is wrong: the adjacent stage runs on rank %d", (int)a->peer, expect_peer);
    } else if (a->peer != -1) {
        return fail(V, r, i, "peer %d on an action that does not communicate (use -1)", (int)a->peer);
    }
    switch (kind) {
    case ACT_F: {
        if (*f & FL_F)
            return fail(V, r, i, "second F of micro-batch %d on stage %d", a->mb, st);
        if (in.via == SCHED_DEP_LOCAL && !(V->fl[in.peer_stage * m + a->mb] & FL_F))
            return fail(V, r, i, "F before the F of stage %d (same rank) that feeds it", in.peer_stage);
        if (in.via == SCHED_DEP_REMOTE && V->comm && !(*f & FL_RF))
            return fail(V, r, i, "F before the RECV_F of its input from rank %d", in.peer_rank);
        *f |= FL_F;
        break;
    }
    case ACT_B:
    case ACT_I: {
        if (!(*f & FL_F))
            return fail(V, r, i, "%s before its F", sched_act_name((sched_act_kind)kind));
        if (*f & (FL_B | FL_I))
            return fail(V, r, i, "second backward (B or I) of micro-batch %d on stage %d", a->mb, st);
        if (in.via == SCHED_DEP_LOCAL && !(V->fl[in.peer_stage * m + a->mb] & (FL_B | FL_I)))
            return fail(V, r, i, "%s before the backward of stage %d (same rank) that feeds it",
                        sched_act_name((sched_act_kind)kind), in.peer_stage);
        if (in.via == SCHED_DEP_REMOTE && V->comm && !(*f & FL_RB))
            return fail(V, r, i, "%s before the RECV_B of its output gradient from rank %d",
                        sched_act_name((sched_act_kind)kind), in.peer_rank);
        *f |= kind == ACT_B ? FL_B : FL_I;
        break;
    }
    case ACT_W:
        if (!(*f & FL_I))
            return fail(V, r, i, "W before its I (the input-gradient part)%s",
                        *f & FL_B ? "; a whole B already ran, W must follow an I" : "");
        if (*f & FL_W)
            return fail(V, r, i, "second W of micro-batch %d on stage %d", a->mb, st);
        *f |= FL_W;
        break;
    case ACT_SEND_F:
        if (!(*f & FL_F))
            return fail(V, r, i, "SEND_F before the F that produces the activations");
        if (*f & FL_SF)
            return fail(V, r, i, "activations of micro-batch %d sent twice", a->mb);
        *f |= FL_SF;
        break;
    case ACT_SEND_B:
        if (!(*f & (FL_B | FL_I)))
            return fail(V, r, i, "SEND_B before the B or I that produces the gradient");
        if (*f & FL_SB)
            return fail(V, r, i, "gradient of micro-batch %d sent twice", a->mb);
        *f |= FL_SB;
        break;
    case ACT_RECV_F:
        if (*f & (FL_RF | FL_F))
            return fail(V, r, i, "RECV_F %s", *f & FL_RF ? "twice" : "after the F that consumes it");
        *f |= FL_RF;
        break;
    case ACT_RECV_B:
        if (*f & (FL_RB | FL_B | FL_I))
            return fail(V, r, i, "RECV_B %s", *f & FL_RB ? "twice" : "after the backward that consumes it");
        *f |= FL_RB;
        break;
    case ACT_REDUCE_GRAD:
        if (reduced[a->chunk])
            return fail(V, r, i, "second REDUCE_GRAD of stage %d", st);
        for (int k = 0; k < m; k++)
            if (!(V->fl[st * m + k] & (FL_B | FL_W)))
                return fail(V, r, i, "REDUCE_GRAD before the backward of micro-batch %d on stage %d", k, st);
        reduced[a->chunk] = 1;
        break;
    default:
        break;
    }
    return TS_OK;
}

/* Step 3: what rank r must have done by the end of its list. */
static int check_complete(vstate *V, int r)
{
    const sched *s = V->s;
    size_t n = s->n_actions[r];
    for (int c = 0; c < s->v; c++) {
        int st = sched_stage_of(s, r, c);
        int next = rank_of(V, st + 1), prev = rank_of(V, st - 1);
        for (int k = 0; k < s->m; k++) {
            uint8_t f = V->fl[st * s->m + k];
            if (!(f & FL_F))
                return fail(V, r, n, "no F of micro-batch %d on stage %d", k, st);
            if (!(f & (FL_B | FL_I)))
                return fail(V, r, n, "no backward (B or I) of micro-batch %d on stage %d", k, st);
            if ((f & FL_I) && !(f & FL_W))
                return fail(V, r, n, "no W of micro-batch %d on stage %d after its I", k, st);
            if (V->comm && next >= 0 && next != r && !(f & FL_SF))
                return fail(V, r, n, "activations of micro-batch %d on stage %d never sent to rank %d", k, st, next);
            if (V->comm && prev >= 0 && prev != r && !(f & FL_SB))
                return fail(V, r, n, "gradient of micro-batch %d on stage %d never sent to rank %d", k, st, prev);
        }
    }
    return TS_OK;
}

/* Is b (on rank q, current action) the partner of a on rank r? */
static bool partners(const vstate *V, int r, const sched_action *a, int q, const sched_action *b)
{
    static const int PAIR[ACT_KIND_COUNT] = {
        [ACT_SEND_F] = ACT_RECV_F,
        [ACT_RECV_F] = ACT_SEND_F,
        [ACT_SEND_B] = ACT_RECV_B,
        [ACT_RECV_B] = ACT_SEND_B,
    };
    if (b->kind != PAIR[a->kind] || b->peer != r || b->mb != a->mb)
        return false;
    int sa = sched_stage_of(V->s, r, a->chunk), sb = sched_stage_of(V->s, q, b->chunk);
    bool forward = a->kind == ACT_SEND_F || a->kind == ACT_RECV_F;
    bool a_sends = a->kind == ACT_SEND_F || a->kind == ACT_SEND_B;
    int dir = forward == a_sends ? 1 : -1; /* stage of b relative to a */
    return sb == sa + dir;
}

/* Step 4: run the ranks with blocking rendezvous point-to-point. */
static int execute(vstate *V)
{
    const sched *s = V->s;
    int p = s->p, m = s->m;
    size_t *pos = calloc((size_t)(p > 0 ? p : 1), sizeof *pos);
    if (!pos)
        return err_set(V->err, TS_ENOMEM, "validate: out of memory");
    bool progress = true;
    while (progress) {
        progress = false;
        for (int r = 0; r < p; r++)
            while (pos[r] < s->n_actions[r]) {
                const sched_action *a = &s->actions[r][pos[r]];
                int kind = a->kind;
                if (kind == ACT_REDUCE_GRAD || kind == ACT_OPTIM) {
                    pos[r]++;
                } else if (kind <= ACT_W) {
                    int st = sched_stage_of(s, r, a->chunk);
                    sched_dep in;
                    /* compute only: wait for the producer, on any rank */
                    if (!V->comm && sched_dep_input(s, r, a, &in) != SCHED_DEP_NONE &&
                        !(V->dyn[in.peer_stage * m + a->mb] & (in.grad ? FL_B | FL_I : FL_F)))
                        break;
                    V->dyn[st * m + a->mb] |= kind == ACT_F ? FL_F : kind == ACT_B ? FL_B : kind == ACT_I ? FL_I : FL_W;
                    pos[r]++;
                } else {
                    int q = a->peer;
                    if (pos[q] == s->n_actions[q] || !partners(V, r, a, q, &s->actions[q][pos[q]]))
                        break;
                    pos[r]++;
                    pos[q]++;
                }
                progress = true;
            }
    }
    int rc = TS_OK;
    for (int r = 0; r < p && rc == TS_OK; r++) {
        if (pos[r] == s->n_actions[r])
            continue;
        const sched_action *a = &s->actions[r][pos[r]];
        if (a->kind <= ACT_W) {
            sched_dep in; /* only an F, B or I with an input blocks */
            sched_dep_input(s, r, a, &in);
            rc = fail(V, r, pos[r],
                      "deadlock: waits for the %s of micro-batch %d on stage %d (rank %d), "
                      "which never runs",
                      in.grad ? "backward" : "F", a->mb, in.peer_stage, in.peer_rank);
        } else {
            int q = a->peer;
            char tok[SCHED_TOKEN_BYTES] = "its end";
            if (pos[q] < s->n_actions[q])
                sched_action_token(s, q, &s->actions[q][pos[q]], tok, sizeof tok);
            rc = fail(V, r, pos[r],
                      "deadlock under blocking point-to-point: waits for rank %d, which "
                      "is blocked at action %zu (%s); sends and receives between the two ranks must "
                      "come in the same order on both",
                      q, pos[q], tok);
        }
    }
    free(pos);
    return rc;
}

int sched_validate(const sched *s, sched_vinfo *info, ts_err *err)
{
    if (s->p < 1 || s->p > SCHED_MAX_P || s->m < 1 || s->m > SCHED_MAX_M || s->v < 1 || s->v > SCHED_MAX_V ||
        (s->placement != SCHED_PLACE_LOOP && s->v != 2))
        return err_set(err, TS_EINVAL,
                       "schedule shape p=%d m=%d v=%d: need p in [1, %d], m in [1, %d], "
                       "v in [1, %d] (v = 2 for the V and DualPipe placements)",
                       s->p, s->m, s->v, SCHED_MAX_P, SCHED_MAX_M, SCHED_MAX_V);
    vstate V = {.s = s, .info = info, .err = err, .S = s->p * s->v, .comm = sched_has_comm(s)};
    if (info) {
        info->bad_rank = -1;
        info->bad_index = -1;
        if (info->peak_inflight)
            sched_peak_inflight(s, info->peak_inflight);
    }
    size_t cells = (size_t)V.S * (size_t)s->m;
    V.fl = calloc(cells, 1);
    V.dyn = calloc(cells, 1);
    int *reduced = calloc((size_t)s->v, sizeof *reduced);
    int rc = TS_OK;
    if (!V.fl || !V.dyn || !reduced) {
        rc = err_set(err, TS_ENOMEM, "validate: out of memory");
        goto out;
    }
    for (int r = 0; r < s->p && rc == TS_OK; r++) {
        bool optim = false;
        memset(reduced, 0, (size_t)s->v * sizeof *reduced);
        for (size_t i = 0; i < s->n_actions[r] && rc == TS_OK; i++)
            rc = check_action(&V, r, i, reduced, &optim);
        if (rc == TS_OK)
            rc = check_complete(&V, r);
    }
    if (rc == TS_OK)
        rc = execute(&V);
out:
    free(V.fl);
    free(V.dyn);
    free(reduced);
    return rc;
}
