/* sched — options, stage mapping, names, tokens, queries. */
#include "sim/sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KIND_NAMES[SCHED_KIND_COUNT] = {
    "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev", "dualpipe", "custom",
};

static const char *const ACT_NAMES[ACT_KIND_COUNT] = {
    "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD", "OPTIM",
};

void sched_opts_default(sched_opts *o, sched_kind kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->p = o->m = 1;
    o->v = sched_kind_is_v(kind) || kind == SCHED_DUALPIPE ? 2 : 1;
    o->with_comm = true;
}

const char *sched_kind_name(sched_kind k)
{
    return (unsigned)k < SCHED_KIND_COUNT ? KIND_NAMES[k] : "?";
}

int sched_kind_parse(const char *name, sched_kind *out, ts_err *err)
{
    for (int k = 0; k < SCHED_CUSTOM; k++)
        if (name && !strcmp(name, KIND_NAMES[k])) {
            *out = (sched_kind)k;
            return TS_OK;
        }
    return err_set(err, TS_EINVAL,
                   "unknown schedule '%s'; valid: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev, dualpipe",
                   name ? name : "(null)");
}

const char *sched_act_name(sched_act_kind k)
{
    return (unsigned)k < ACT_KIND_COUNT ? ACT_NAMES[k] : "?";
}

bool sched_kind_is_v(sched_kind k)
{
    return k == SCHED_ZB_V || k == SCHED_DUALPIPEV;
}

int sched_num_stages(const sched *s)
{
    return s->p * s->v;
}

int sched_stage_of(const sched *s, int rank, int chunk)
{
    if (s->placement != SCHED_PLACE_LOOP)
        return chunk == 0 ? rank : 2 * s->p - 1 - rank;
    return chunk * s->p + rank;
}

void sched_rank_chunk_of(const sched *s, int stage, int *rank, int *chunk)
{
    if (s->placement != SCHED_PLACE_LOOP) {
        *chunk = stage < s->p ? 0 : 1;
        *rank = stage < s->p ? stage : 2 * s->p - 1 - stage;
    } else {
        *chunk = stage / s->p;
        *rank = stage % s->p;
    }
}

size_t sched_action_token(const sched *s, int rank, const sched_action *a, char *buf, size_t size)
{
    int n;
    if (a->kind == ACT_OPTIM)
        n = snprintf(buf, size, "OPTIM");
    else if (a->kind == ACT_REDUCE_GRAD)
        n = snprintf(buf, size, "%dREDUCE_GRAD", sched_stage_of(s, rank, a->chunk));
    else
        n = snprintf(buf, size, "%d%s%d", sched_stage_of(s, rank, a->chunk), sched_act_name((sched_act_kind)a->kind),
                     (int)a->mb);
    return n < 0 ? 0 : (size_t)n;
}

bool sched_has_comm(const sched *s)
{
    for (int r = 0; r < s->p; r++)
        for (size_t i = 0; i < s->n_actions[r]; i++)
            if (s->actions[r][i].kind >= ACT_SEND_F && s->actions[r][i].kind <= ACT_RECV_B)
                return true;
    return false;
}

void sched_peak_inflight(const sched *s, int *peak)
{
    for (int r = 0; r < s->p; r++) {
        int cur = 0, best = 0;
        for (size_t i = 0; i < s->n_actions[r]; i++) {
            int k = s->actions[r][i].kind;
            if (k == ACT_F && ++cur > best)
                best = cur;
            else if (k == ACT_B || k == ACT_W)
                cur--;
        }
        peak[r] = best;
    }
}

void sched_free(sched *s)
{
    if (!s)
        return;
    if (s->actions)
        for (int r = 0; r < s->p; r++)
            free(s->actions[r]);
    free(s->actions);
    free(s->n_actions);
    free(s->stages);
    free(s);
}
