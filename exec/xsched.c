/* xsched — the executor's schedule (see xsched.h). */
#include "exec/xsched.h"

#include "sim/sched/sched_comm.h"
#include "sim/sched/sched_csv.h"
#include "sim/sched/sched_generate.h"

int xsched_generate(const parallel_config *p, const model_config *m, sched **out, ts_err *err)
{
    sched_opts o;
    sched_opts_default(&o, p->schedule);
    o.p = p->pp;
    o.m = p->global_batch_size / (p->micro_batch_size * p->dp);
    o.v = p->vp > 0 ? p->vp : 1;
    o.num_layers = m->num_layers;
    o.first_stage_layers = p->first_stage_layers;
    o.last_stage_layers = p->last_stage_layers;
    /* the config's layers per virtual stage (layout string, account-for,
     * first/last with interleaving): each rank builds its stages from it */
    o.stage_layers = p->layout.n_stages == o.p * o.v ? p->layout.layers : NULL;
    o.with_comm = true;
    o.with_reduce_optim = true;
    return sched_generate(&o, out, err);
}

int xsched_load_csv(const char *path, const parallel_config *p, const model_config *m, sched **out, ts_err *err)
{
    sched *s = NULL;
    int rc = sched_csv_load(path, &s, err);
    if (rc)
        err_prefix(err, "--schedule-csv: ");
    if (!rc)
        rc = sched_add_comm(s, err);
    if (!rc && s->p != p->pp)
        rc = err_set(err, TS_EINVAL,
                     "--schedule-csv %s has %d pipeline ranks but --pipeline-model-parallel-size "
                     "is %d",
                     path, s->p, p->pp);
    if (!rc && (long)s->m * p->micro_batch_size * p->dp != p->global_batch_size)
        rc = err_set(err, TS_EINVAL,
                     "--schedule-csv %s has %d micro-batches: give --global-batch-size %ld "
                     "(m x --micro-batch-size %d x data-parallel size %d)",
                     path, s->m, (long)s->m * p->micro_batch_size * p->dp, p->micro_batch_size, p->dp);
    int S = rc ? 0 : s->p * s->v;
    if (!rc && m->num_layers < S)
        rc = err_set(err, TS_EINVAL, "--schedule-csv %s has %d stages but --num-layers is %d", path, S, m->num_layers);
    if (rc) {
        sched_free(s);
        return rc;
    }
    int first = 0;
    for (int i = 0; i < S; i++) {
        int n = m->num_layers / S + (i < m->num_layers % S ? 1 : 0);
        s->stages[i].first_layer = first;
        s->stages[i].num_layers = n;
        first += n;
    }
    s->num_layers = m->num_layers;
    *out = s;
    return TS_OK;
}
