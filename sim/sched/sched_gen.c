/* sched_gen — GPipe, 1F1B and interleaved 1F1B (compute actions only). */
#include "sim/sched/sched_gen.h"

#include <stdlib.h>

int sched_gen_gpipe(const sched_opts *o, sched_list *lists, ts_err *err)
{
    for (int r = 0; r < o->p; r++) {
        for (int k = 0; k < o->m; k++)
            if (sched_list_push(&lists[r], ACT_F, 0, k, -1, err))
                return TS_ENOMEM;
        for (int k = 0; k < o->m; k++)
            if (sched_list_push(&lists[r], ACT_B, 0, k, -1, err))
                return TS_ENOMEM;
    }
    return TS_OK;
}

int sched_gen_1f1b(const sched_opts *o, sched_list *lists, ts_err *err)
{
    for (int r = 0; r < o->p; r++) {
        int warm = o->p - r - 1 < o->m ? o->p - r - 1 : o->m;
        int f = 0, b = 0;
        sched_list *l = &lists[r];
        while (f < warm)
            if (sched_list_push(l, ACT_F, 0, f++, -1, err))
                return TS_ENOMEM;
        while (f < o->m)
            if (sched_list_push(l, ACT_F, 0, f++, -1, err) || sched_list_push(l, ACT_B, 0, b++, -1, err))
                return TS_ENOMEM;
        while (b < o->m)
            if (sched_list_push(l, ACT_B, 0, b++, -1, err))
                return TS_ENOMEM;
    }
    return TS_OK;
}

/* Megatron-core's get_schedule_table(): virtual micro-batch k -> (mb, chunk).
 * Micro-batches go in groups of g through chunk 0, then chunk 1, ...; the
 * last group takes what is left (m need not be a multiple of g). */
static void schedule_table(int m, int v, int g, int *mb, int *chunk)
{
    int k = 0;
    for (int lo = 0; lo < m; lo += g) {
        int hi = lo + g >= m ? m : lo + g;
        for (int c = 0; c < v; c++)
            for (int i = lo; i < hi; i++, k++) {
                mb[k] = i;
                chunk[k] = c;
            }
    }
}

int sched_gen_interleaved(const sched_opts *o, sched_list *lists, ts_err *err)
{
    int p = o->p, m = o->m, v = o->v, total = m * v;
    int g = o->mb_group_size ? o->mb_group_size : p;
    int *mb = malloc((size_t)total * sizeof *mb), *chunk = malloc((size_t)total * sizeof *chunk);
    int rc = TS_OK;
    if (!mb || !chunk) {
        rc = err_set(err, TS_ENOMEM, "schedule: out of memory");
        goto out;
    }
    schedule_table(m, v, g, mb, chunk);
    for (int r = 0; r < p && rc == TS_OK; r++) {
        /* get_pp_rank_microbatches(): 2(p-r-1) + (v-1)g warm-up forwards
         * (p-r-1 when v = 1), capped at m*v. */
        int warm = v > 1 ? 2 * (p - r - 1) + (v - 1) * g : p - r - 1;
        if (o->combined_1f1b && p > 1) /* overlap_moe_expert_parallel_comm: + 1 */
            warm++;
        if (warm > total)
            warm = total;
        sched_list *l = &lists[r];
        int f = 0, b = 0;
        /* The backward of virtual micro-batch k runs chunk v-1-chunk[k]. */
        while (f < warm && rc == TS_OK)
            /* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): schedule_table set all total entries */
            rc = sched_list_push(l, ACT_F, chunk[f], mb[f], -1, err), f++;
        while (f < total && rc == TS_OK) {
            /* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): as above */
            rc = sched_list_push(l, ACT_F, chunk[f], mb[f], -1, err);
            f++;
            if (rc == TS_OK && o->combined_1f1b && p > 1) /* a combined step: this F with the next B */
                l->a[l->n - 1].overlap = 1;
            if (rc == TS_OK)
                rc = sched_list_push(l, ACT_B, v - 1 - chunk[b], mb[b], -1, err);
            b++;
        }
        while (b < total && rc == TS_OK)
            rc = sched_list_push(l, ACT_B, v - 1 - chunk[b], mb[b], -1, err), b++;
    }
out:
    free(mb);
    free(chunk);
    return rc;
}
