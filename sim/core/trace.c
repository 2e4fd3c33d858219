/* trace — Chrome/Perfetto trace JSON (see trace.h). */
#include "sim/core/trace.h"

#include <inttypes.h>

#include "sim/util/afile.h"

/* ns as microseconds with three decimals, exactly. */
static void put_us(FILE *f, int64_t ns)
{
    fprintf(f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

int trace_write_file(const simulate_result *r, FILE *f, ts_err *err)
{
    if (!r->eng || !r->pl || !r->mem)
        return err_set(err, TS_EINVAL, "trace: the result was simulated without keep_trace");
    const engine *e = r->eng;
    const plan *pl = r->pl;
    const char *sep = "\n";
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    for (int rank = 0; rank < r->p; rank++) {
        fprintf(f, "%s{\"ph\": \"M\", \"pid\": %d, \"name\": \"process_name\", \"args\": {\"name\": \"rank %d: stage",
                sep, rank, rank);
        sep = ",\n";
        for (int c = 0; c < pl->v; c++)
            fprintf(f, "%s%d", c ? "," : " ", c * pl->p + rank);
        fprintf(f, "\"}}");
        fprintf(f, "%s{\"ph\": \"M\", \"pid\": %d, \"name\": \"process_sort_index\", \"args\": {\"sort_index\": %d}}",
                sep, rank, rank);
        for (int s = 0; s < PLAN_STREAMS; s++) {
            fprintf(
                f,
                "%s{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"thread_name\", \"args\": {\"name\": \"%s\"}}",
                sep, rank, s, plan_stream_name(s));
            fprintf(f,
                    "%s{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"thread_sort_index\", \"args\": "
                    "{\"sort_index\": %d}}",
                    sep, rank, s, s);
        }
    }
    uint32_t n = engine_task_count(e);
    for (uint32_t id = 0; id < n; id++) {
        int64_t t0 = engine_task_start_ns(e, id), t1 = engine_task_end_ns(e, id);
        if (t0 < 0 || t1 <= t0)
            continue;
        int rank = engine_task_rank(e, id);
        if (rank >= r->p) /* ranks of other replicas (a network model's --full mode) */
            continue;
        const plan_step *x = &pl->steps[engine_task_tag(e, id)];
        /* a collapsed pass shows its segments on their own tracks */
        uint32_t k = 0, nk = x->seg_n ? x->seg_n : 1;
        for (; k < nk; k++) {
            const plan_seg *g = x->seg_n ? &pl->segs[x->seg_first + k] : NULL;
            int64_t s0 = g ? t0 + g->offset_ns : t0, d = g ? g->dur_ns : t1 - t0;
            if (d <= 0)
                continue;
            fprintf(f, "%s{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"name\": \"%s\", \"cat\": \"%s\", \"ts\": ", sep,
                    rank, g ? g->stream : engine_task_stream(e, id), g ? g->name : x->name,
                    plan_cat_name(g ? g->cat : x->cat));
            put_us(f, s0);
            fprintf(f, ", \"dur\": ");
            put_us(f, d);
            fprintf(f, ", \"args\": {\"mb\": %d, \"stage\": %d, \"pass\": \"%s\"}}", engine_task_mb(e, id), x->stage,
                    x->name);
        }
    }
    for (int rank = 0; rank < r->p; rank++) {
        size_t ns;
        const mem_sample *s = mem_samples(r->mem, rank, &ns);
        for (size_t i = 0; i < ns; i++) {
            fprintf(f, "%s{\"ph\": \"C\", \"pid\": %d, \"name\": \"memory\", \"ts\": ", sep, rank);
            put_us(f, s[i].t_ns);
            fprintf(f, ", \"args\": {\"GiB\": %.6f}}", (double)s[i].bytes / 1073741824.0);
        }
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? err_set(err, TS_EIO, "trace: write error") : TS_OK;
}

int trace_write(const simulate_result *r, const char *path, ts_err *err)
{
    afile a;
    int rc = afile_open(&a, path, err);
    if (rc)
        return rc;
    if ((rc = trace_write_file(r, a.f, err))) {
        afile_abort(&a);
        return err_prefix(err, "%s: ", path);
    }
    return afile_commit(&a, err);
}
