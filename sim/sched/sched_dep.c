/* sched_dep — see sched_dep.h for the rule. */
#include "sim/sched/sched_dep.h"

/* Fill out for action a on rank, whose data goes to or comes from the
 * stage `step` away from its own (none outside [0, p*v)); returns out->via. */
static sched_dep_via link_to(const sched *s, int rank, const sched_action *a, int step, sched_dep *out)
{
    *out = (sched_dep){SCHED_DEP_NONE, false, -1, -1, -1, -1};
    if (a->kind != ACT_F && a->kind != ACT_B && a->kind != ACT_I)
        return SCHED_DEP_NONE;
    out->grad = a->kind != ACT_F;
    out->stage = sched_stage_of(s, rank, a->chunk);
    int peer = out->stage + step;
    if (peer < 0 || peer >= sched_num_stages(s))
        return SCHED_DEP_NONE;
    /* DualPipe: stage p-1 ends copy 0 (the loss), stage p starts copy 1 (tokens) */
    if (s->placement == SCHED_PLACE_DUAL && (out->stage < s->p) != (peer < s->p))
        return SCHED_DEP_NONE;
    out->peer_stage = peer;
    sched_rank_chunk_of(s, peer, &out->peer_rank, &out->peer_chunk);
    out->via = out->peer_rank == rank ? SCHED_DEP_LOCAL : SCHED_DEP_REMOTE;
    return out->via;
}

sched_dep_via sched_dep_input(const sched *s, int rank, const sched_action *a, sched_dep *out)
{
    /* activations come from the stage before, gradients from the one after */
    return link_to(s, rank, a, a->kind == ACT_F ? -1 : 1, out);
}

sched_dep_via sched_dep_output(const sched *s, int rank, const sched_action *a, sched_dep *out)
{
    return link_to(s, rank, a, a->kind == ACT_F ? 1 : -1, out);
}
