#include "sim/sched/sched_build.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

int sched_list_push(sched_list *l, int kind, int chunk, int mb, int peer, ts_err *err)
{
    if (l->n == l->cap && grow_to((void **)&l->a, &l->cap, l->n + 1, 64, sizeof *l->a))
        return err_set(err, TS_ENOMEM, "schedule: out of memory for %zu actions", l->n + 1);
    l->a[l->n++] = (sched_action){.kind = (uint8_t)kind, .chunk = (int16_t)chunk, .mb = mb, .peer = peer};
    return TS_OK;
}

void sched_list_free(sched_list *l)
{
    free(l->a);
    memset(l, 0, sizeof *l);
}

int sched_build_alloc(sched_kind kind, sched_placement pl, int p, int m, int v, sched **out, ts_err *err)
{
    *out = NULL;
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, TS_ENOMEM, "schedule: out of memory");
    s->kind = kind;
    s->placement = pl;
    s->p = p;
    s->m = m;
    s->v = v;
    s->num_layers = p * v;
    s->stages = calloc((size_t)p * (size_t)v, sizeof *s->stages);
    s->n_actions = calloc((size_t)p, sizeof *s->n_actions);
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): the elements are pointers (one array per rank) */
    s->actions = calloc((size_t)p, sizeof *s->actions);
    if (!s->stages || !s->n_actions || !s->actions) {
        sched_free(s);
        return err_set(err, TS_ENOMEM, "schedule: out of memory for p=%d v=%d", p, v);
    }
    for (int i = 0; i < p * v; i++)
        s->stages[i] = (sched_stage){.first_layer = i, .num_layers = 1};
    *out = s;
    return TS_OK;
}

void sched_build_take(sched *s, int rank, sched_list *l)
{
    free(s->actions[rank]);
    s->actions[rank] = l->a;
    s->n_actions[rank] = l->n;
    memset(l, 0, sizeof *l);
}

int sched_build_layers(sched *s, int num_layers, int first, int last, ts_err *err)
{
    int S = s->p * s->v;
    if (num_layers == 0 && first == 0 && last == 0)
        num_layers = S;
    if (num_layers < S)
        return err_set(err, TS_EINVAL,
                       "--num-layers %d: fewer layers than the %d pipeline stages (p*v = %d*%d); "
                       "use at least %d",
                       num_layers, S, s->p, s->v, S);
    if (first < 0 || last < 0)
        return err_set(err, TS_EINVAL, "first/last stage layers must be >= 0 (0 = even split), got %d/%d", first, last);
    int *n = calloc((size_t)S, sizeof *n);
    if (!n)
        return err_set(err, TS_ENOMEM, "schedule: out of memory");
    int rc = TS_OK;
    if (S == 1) {
        if ((first && first != num_layers) || (last && last != num_layers)) {
            rc = err_set(err, TS_EINVAL,
                         "with a single pipeline stage, --decoder-first/last-pipeline-num-layers "
                         "(%d/%d) must be 0 or equal --num-layers %d",
                         first, last, num_layers);
            goto out;
        }
        n[0] = num_layers;
    } else {
        int fixed = (first ? 1 : 0) + (last ? 1 : 0);
        int rest = num_layers - first - last, mid = S - fixed;
        if (rest < mid || (mid == 0 && rest != 0) || (mid > 0 && rest % mid != 0)) {
            rc = err_set(err, TS_EINVAL,
                         "--num-layers %d with first stage %d and last stage %d layers (0 = even) "
                         "leaves %d layers for the other %d stages; they must split evenly with at "
                         "least one layer each (p*v = %d stages)",
                         num_layers, first, last, rest, mid, S);
            goto out;
        }
        for (int i = 0; i < S; i++)
            n[i] = mid ? rest / mid : 0;
        if (first)
            n[0] = first;
        if (last)
            n[S - 1] = last;
    }
    int at = 0;
    for (int i = 0; i < S; i++) {
        s->stages[i] = (sched_stage){.first_layer = at, .num_layers = n[i]};
        at += n[i];
    }
    s->num_layers = num_layers;
out:
    free(n);
    return rc;
}

int sched_build_layers_from(sched *s, const int *n, int num_layers, ts_err *err)
{
    int S = s->p * s->v;
    long sum = 0;
    for (int i = 0; i < S; i++) {
        if (n[i] < 0)
            return err_set(err, TS_EINVAL, "stage %d: %d layers; a stage holds >= 0 layers", i, n[i]);
        sum += n[i];
    }
    if (sum < 1 || sum > INT_MAX || (num_layers && sum != num_layers))
        return err_set(err, TS_EINVAL,
                       "the %d stages' layer counts sum to %ld; they must sum to --num-layers %d (and to at least 1)",
                       S, sum, num_layers);
    int at = 0;
    for (int i = 0; i < S; i++) {
        s->stages[i] = (sched_stage){.first_layer = at, .num_layers = n[i]};
        at += n[i];
    }
    s->num_layers = at;
    return TS_OK;
}
