/* plan — task templates per pipeline stage (see plan.h). */
#include "sim/core/plan.h"

#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

const char *const PLAN_FIXED_NAMES[PLAN_FIXED_KINDS] = {"zero-grad",
                                                        "nan check",
                                                        "unscale",
                                                        "found-inf all-reduce",
                                                        "grad norm",
                                                        "norm all-reduce",
                                                        "zero count",
                                                        "zero-count all-reduce",
                                                        "adam",
                                                        "fp8 weight cast",
                                                        "expert-bias all-reduce"};

int plan_push_step(plan *pl, const plan_step *s, uint32_t *out)
{
    if (pl->n_steps == pl->cap_steps &&
        grow_to((void **)&pl->steps, &pl->cap_steps, (size_t)pl->n_steps + 1, 256, sizeof *pl->steps))
        return TS_ENOMEM;
    pl->steps[pl->n_steps] = *s;
    *out = pl->n_steps++;
    return TS_OK;
}

plan_step plan_step_init(const char *name, int stream, int cat, int stage, int64_t dur_ns)
{
    plan_step s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.stream = (uint8_t)stream;
    s.cat = (uint8_t)cat;
    s.dp_bucket = -1;
    s.stage = stage;
    s.dep[0] = s.dep[1] = -1;
    s.dur_ns = dur_ns;
    s.comm_bw_factor = 1.0;
    return s;
}

int plan_alloc(int p, int v, plan **out)
{
    plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return TS_ENOMEM;
    pl->p = p;
    pl->v = v;
    pl->n_stages = p * v;
    pl->d = 1;
    pl->edp = 1;
    pl->stages = calloc((size_t)pl->n_stages, sizeof *pl->stages);
    pl->optim = malloc((size_t)p * sizeof *pl->optim);
    pl->param_gather = malloc((size_t)p * sizeof *pl->param_gather);
    pl->weights_bytes = calloc((size_t)p, sizeof(int64_t));
    pl->grads_bytes = calloc((size_t)p, sizeof(int64_t));
    pl->optim_bytes = calloc((size_t)p, sizeof(int64_t));
    if (!pl->stages || !pl->optim || !pl->param_gather || !pl->weights_bytes || !pl->grads_bytes || !pl->optim_bytes) {
        plan_free(pl);
        return TS_ENOMEM;
    }
    for (int r = 0; r < p; r++)
        pl->optim[r] = pl->param_gather[r] = PLAN_NO_STEP;
    pl->emb_allreduce = PLAN_NO_STEP;
    for (int i = 0; i < pl->n_stages; i++) {
        plan_stage *st = &pl->stages[i];
        st->send_f = st->send_b = st->recv_f = st->recv_b = PLAN_NO_STEP;
        st->dp_whole = st->dp_bucket0 = PLAN_NO_STEP;
        for (int k = 0; k < PLAN_PASSES; k++)
            st->fsdp_gather[k] = PLAN_NO_STEP;
    }
    *out = pl;
    return TS_OK;
}

void plan_free(plan *pl)
{
    if (!pl)
        return;
    free(pl->stages);
    free(pl->steps);
    free(pl->segs);
    free(pl->mem_evs);
    free(pl->optim);
    free(pl->param_gather);
    free(pl->weights_bytes);
    free(pl->grads_bytes);
    free(pl->optim_bytes);
    free(pl->ep_pairs);
    free(pl);
}

/* Transfers between neighbour stages (both directions); every stage gets the
 * receive steps, every stage but the ends the sends. */
int plan_add_transfers(plan *pl, int64_t dur_ns, int64_t bytes)
{
    for (int s = 0; s < pl->n_stages; s++) {
        plan_stage *st = &pl->stages[s];
        plan_step x = plan_step_init("send.F", PLAN_STREAM_PP_SEND, PLAN_CAT_PP, s, dur_ns);
        x.comm_bytes = bytes;
        x.alloc_bytes = x.free_bytes = bytes;
        st->p2p_bytes = bytes;
        if (s + 1 < pl->n_stages && plan_push_step(pl, &x, &st->send_f))
            return TS_ENOMEM;
        x.name = "send.B";
        if (s > 0 && plan_push_step(pl, &x, &st->send_b))
            return TS_ENOMEM;
        x = plan_step_init("recv.F", PLAN_STREAM_PP_RECV_F, PLAN_CAT_PP, s, 0);
        x.comm_bytes = bytes;
        x.alloc_bytes = x.free_bytes = bytes;
        if (s > 0 && plan_push_step(pl, &x, &st->recv_f))
            return TS_ENOMEM;
        x.name = "recv.B";
        x.stream = PLAN_STREAM_PP_RECV_B;
        if (s + 1 < pl->n_stages && plan_push_step(pl, &x, &st->recv_b))
            return TS_ENOMEM;
    }
    return TS_OK;
}

int plan_uniform(const sched *s, int64_t f_ns, int64_t i_ns, int64_t w_ns, int64_t p2p_ns, int64_t act_bytes,
                 plan **out, ts_err *err)
{
    *out = NULL;
    if (f_ns < 0 || i_ns < 0 || w_ns < 0 || p2p_ns < 0 || act_bytes < 0)
        return err_set(err, TS_EINVAL, "plan_uniform: negative time or size");
    plan *pl = NULL;
    if (plan_alloc(s->p, s->v, &pl))
        return err_set(err, TS_ENOMEM, "plan: out of memory");
    static const char *const names[PLAN_PASSES] = {"F", "B", "I", "W"};
    const int64_t dur[PLAN_PASSES] = {f_ns, i_ns + w_ns, i_ns, w_ns};
    for (int st = 0; st < pl->n_stages; st++) {
        for (int k = 0; k < PLAN_PASSES; k++) {
            plan_step x = plan_step_init(names[k], PLAN_STREAM_COMPUTE, k == PLAN_PASS_F ? PLAN_CAT_FWD : PLAN_CAT_BWD,
                                         st, dur[k]);
            x.root = true;
            if (k == PLAN_PASS_F)
                x.alloc_bytes = act_bytes;
            else if (k != PLAN_PASS_I)
                x.free_bytes = act_bytes;
            pl->stages[st].pass[k].n = 1;
            if (plan_push_step(pl, &x, &pl->stages[st].pass[k].first)) {
                plan_free(pl);
                return err_set(err, TS_ENOMEM, "plan: out of memory");
            }
        }
    }
    if (plan_add_transfers(pl, p2p_ns, 0)) {
        plan_free(pl);
        return err_set(err, TS_ENOMEM, "plan: out of memory");
    }
    pl->max_pass_steps = 1;
    *out = pl;
    return TS_OK;
}

const char *plan_stream_name(int s)
{
    static const char *const names[PLAN_STREAMS] = {"compute",     "tp", "pp-send", "pp-recv-fwd",
                                                    "pp-recv-bwd", "dp", "ep"};
    return s >= 0 && s < PLAN_STREAMS ? names[s] : "?";
}

const char *plan_cat_name(int c)
{
    static const char *const names[PLAN_CAT_COUNT] = {"forward", "backward", "recompute", "optimizer", "tp",
                                                      "pp",      "dp",       "ep",        "data"};
    return c >= 0 && c < PLAN_CAT_COUNT ? names[c] : "?";
}
