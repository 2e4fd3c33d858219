/* search_out — CSV, descriptions and explanations of a search (see
 * search_out.h). */
#include "sim/search/search_out.h"

#include <stdlib.h>
#include <string.h>

#include "sim/util/afile.h"
#include "sim/util/csvio.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const COLUMNS[] = {
    "index",
    "status",
    "reason",
    "tp",
    "pp",
    "dp",
    "vp",
    "micro_batch_size",
    "num_microbatches",
    "first_stage_layers",
    "last_stage_layers",
    "account_split",
    "schedule",
    "sequence_parallel",
    "recompute",
    "recompute_num_layers",
    "distributed_optimizer",
    "cp",
    "ep",
    "etp",
    "dispatcher",
    "mem_bound_gib",
    "iteration_s",
    "tflops_per_gpu",
    "mfu",
    "peak_mem_gib",
    "bubble_fraction",
    "exposed_comm_s",
    "ep_overlap",
    "rank",
};
#define NCOLS (sizeof COLUMNS / sizeof COLUMNS[0])

/* "embedding", "loss", "embedding+loss" for SEARCH_ACCOUNT_* bits; "" for none. */
static const char *account_name(unsigned bits)
{
    static const char *const NAMES[] = {"", "embedding", "loss", "embedding+loss"};
    return NAMES[bits & 3u];
}

void search_describe(const search_set *set, size_t i, char *buf, size_t cap)
{
    const search_cand *c = &set->cands[i];
    char split[32] = "";
    if (c->first_stage_layers || c->last_stage_layers)
        snprintf(split, sizeof split, " split=%d/%d", c->first_stage_layers, c->last_stage_layers);
    else if (c->account_split)
        snprintf(split, sizeof split, " split=account-%s", account_name(c->account_split));
    char rc[32];
    if (c->recompute == RECOMPUTE_FULL && c->recompute_method == RECOMPUTE_METHOD_BLOCK)
        snprintf(rc, sizeof rc, "full-block:%d", c->recompute_num_layers);
    else
        snprintf(rc, sizeof rc, "%s", search_recompute_name(c));
    char cps[24] = "", eps[64] = "";
    if (c->cp > 1)
        snprintf(cps, sizeof cps, " cp=%d", (int)c->cp);
    if (c->ep > 0)
        snprintf(eps, sizeof eps, " ep=%d etp=%d %s%s", (int)c->ep, (int)c->etp,
                 SEARCH_DISPATCHER_NAMES[c->dispatcher < SEARCH_DISPATCH_COUNT ? c->dispatcher : 0],
                 c->ep_overlap ? " ep-overlap" : "");
    snprintf(buf, cap, "t=%d p=%d d=%d v=%d b=%d %s%s%s %s%s%s%s", c->tp, c->pp, c->dp, c->vp, c->mbs,
             sched_kind_name((sched_kind)c->schedule), split, c->sequence_parallel ? " sp" : "", rc,
             c->distributed_optimizer ? " distopt" : "", cps, eps);
}

/* Format helpers into fixed cells. */
static void fmt_int(char *b, size_t cap, long v, bool show)
{
    if (show)
        snprintf(b, cap, "%ld", v);
    else
        b[0] = '\0';
}

static void fmt_num(char *b, size_t cap, double v, bool show)
{
    if (show)
        csvio_fmt_double(b, cap, v);
    else
        b[0] = '\0';
}

static int write_rows(const search_set *set, const size_t *rank_of, FILE *f, ts_err *err)
{
    int rc = csvio_write_row(f, NCOLS, COLUMNS, err);
    char cell[NCOLS][64];
    char reason[1024];
    const char *cells[NCOLS];
    for (size_t i = 0; i < set->n && rc == TS_OK; i++) {
        const search_cand *c = &set->cands[i];
        search_status st = (search_status)c->status;
        bool has_pp = c->pp > 0, has_b = c->mbs > 0;
        bool full = st == SEARCH_PENDING || st == SEARCH_SIMULATED || st >= SEARCH_REJ_MEMORY_BOUND;
        bool simulated = st == SEARCH_SIMULATED || st == SEARCH_REJ_MEMORY_SIM;
        search_reason(set, i, reason, sizeof reason);
        size_t k = 0;
        fmt_int(cell[k], 64, (long)i, true), k++;
        snprintf(cell[k], 64, "%s", search_status_name(st)), k++;
        k++; /* reason: separate buffer */
        fmt_int(cell[k], 64, c->tp, true), k++;
        fmt_int(cell[k], 64, c->pp, has_pp), k++;
        fmt_int(cell[k], 64, c->dp, has_pp), k++;
        fmt_int(cell[k], 64, c->vp, has_pp), k++;
        fmt_int(cell[k], 64, c->mbs, has_b), k++;
        fmt_int(cell[k], 64, c->num_microbatches, c->num_microbatches > 0), k++;
        fmt_int(cell[k], 64, c->first_stage_layers, has_pp), k++;
        fmt_int(cell[k], 64, c->last_stage_layers, has_pp), k++;
        snprintf(cell[k], 64, "%s", account_name(c->account_split)), k++;
        snprintf(cell[k], 64, "%s", has_pp ? sched_kind_name((sched_kind)c->schedule) : ""), k++;
        fmt_int(cell[k], 64, c->sequence_parallel, full), k++;
        snprintf(cell[k], 64, "%s", full ? search_recompute_name(c) : ""), k++;
        fmt_int(cell[k], 64, c->recompute_num_layers, full), k++;
        fmt_int(cell[k], 64, c->distributed_optimizer, full), k++;
        fmt_int(cell[k], 64, c->cp > 1 ? c->cp : 1, true), k++;
        fmt_int(cell[k], 64, c->ep, c->ep > 0), k++;
        fmt_int(cell[k], 64, c->etp, c->ep > 0), k++;
        snprintf(cell[k], 64, "%s",
                 c->ep > 0 && full ? SEARCH_DISPATCHER_NAMES[c->dispatcher % SEARCH_DISPATCH_COUNT] : ""),
            k++;
        fmt_num(cell[k], 64, c->mem_bound_bytes / GIB, c->mem_bound_bytes > 0), k++;
        fmt_num(cell[k], 64, c->r.iteration_s, simulated), k++;
        fmt_num(cell[k], 64, c->r.tflops_per_gpu, simulated), k++;
        fmt_num(cell[k], 64, c->r.mfu, simulated), k++;
        fmt_num(cell[k], 64, c->r.peak_mem_bytes / GIB, simulated), k++;
        fmt_num(cell[k], 64, c->r.bubble_fraction, simulated), k++;
        fmt_num(cell[k], 64, c->r.exposed_comm_s, simulated), k++;
        fmt_int(cell[k], 64, c->ep_overlap, c->ep > 0 && full), k++;
        fmt_int(cell[k], 64, (long)rank_of[i], rank_of[i] > 0), k++;
        for (size_t j = 0; j < NCOLS; j++)
            cells[j] = cell[j];
        cells[2] = reason;
        rc = csvio_write_row(f, NCOLS, cells, err);
    }
    return rc;
}

int search_write_csv(const search_set *set, const size_t *order, size_t n_order, const char *path, ts_err *err)
{
    size_t *rank_of = calloc(set->n ? set->n : 1, sizeof *rank_of);
    if (!rank_of)
        return err_set(err, TS_ENOMEM, "search: out of memory writing %s", path);
    for (size_t j = 0; j < n_order; j++)
        rank_of[order[j]] = j + 1;
    afile a;
    int rc = afile_open(&a, path, err);
    if (rc == TS_OK) {
        rc = write_rows(set, rank_of, a.f, err);
        if (rc == TS_OK) {
            rc = afile_commit(&a, err); /* its messages name the path */
        } else {
            afile_abort(&a);
            err_prefix(err, "%s: ", path);
        }
    }
    free(rank_of);
    return rc;
}

/* ---------------------------------------------------------------- explain */

static bool same_layout(const search_cand *a, const search_cand *b)
{
    return a->tp == b->tp && a->pp == b->pp && a->vp == b->vp && a->schedule == b->schedule &&
           a->first_stage_layers == b->first_stage_layers && a->account_split == b->account_split && a->cp == b->cp &&
           a->ep == b->ep && a->etp == b->etp && a->dispatcher == b->dispatcher && a->ep_overlap == b->ep_overlap;
}

static bool rejected_for_memory(const search_cand *c)
{
    return c->status == SEARCH_REJ_MEMORY_BOUND || c->status == SEARCH_REJ_MEMORY_SIM;
}

/* Memory needed by a memory-rejected candidate: simulated peak or bound. */
static double need_bytes(const search_cand *c)
{
    return c->status == SEARCH_REJ_MEMORY_SIM ? c->r.peak_mem_bytes : c->mem_bound_bytes;
}

/* "less recomputation" order: none < selective < full/block < full/uniform. */
static int recompute_rank(const search_cand *c)
{
    if (c->recompute == RECOMPUTE_NONE)
        return 0;
    if (c->recompute == RECOMPUTE_SELECTIVE)
        return 1;
    return c->recompute_method == RECOMPUTE_METHOD_BLOCK ? 2 : 3;
}

void search_explain(const search_set *set, size_t winner, FILE *f)
{
    const search_cand *w = &set->cands[winner];
    double it = w->r.iteration_s > 0 ? w->r.iteration_s : 1e-30;
    double bubble = w->r.bubble_fraction, comm = w->r.exposed_comm_s / it;
    double mem = w->r.peak_mem_bytes / set->capacity_bytes;
    char d[256];
    search_describe(set, winner, d, sizeof d);
    fprintf(f, "What limits the winner (%s):\n", d);
    fprintf(f, "  pipeline bubble        %5.1f%% of the iteration\n", 100.0 * bubble);
    fprintf(f,
            "  exposed communication  %5.1f%% of the iteration (%.3f s: TP %.3f, PP %.3f, "
            "DP %.3f",
            100.0 * comm, w->r.exposed_comm_s, w->r.exposed_s[SIMULATE_COMM_TP], w->r.exposed_s[SIMULATE_COMM_PP],
            w->r.exposed_s[SIMULATE_COMM_DP]);
    if (w->ep > 0) /* a mixture of experts: the dispatcher's all-to-alls */
        fprintf(f, ", EP %.3f", w->r.exposed_s[SIMULATE_COMM_EP]);
    fprintf(f, ")\n");
    fprintf(f, "  memory                 %5.1f%% of %.0f GiB (peak %.1f GiB; %.1f GiB kept free by --memory-margin)\n",
            100.0 * mem, set->capacity_bytes / GIB, w->r.peak_mem_bytes / GIB, set->space.memory_margin_bytes / GIB);

    /* Did memory force the winner's choices? Look at its neighbours. */
    enum { F_RECOMPUTE = 1, F_DISTOPT = 2, F_MBS = 4 };
    int forced = 0, shown = 0;
    for (size_t i = 0; i < set->n; i++) {
        const search_cand *c = &set->cands[i];
        if (!rejected_for_memory(c) || !same_layout(c, w))
            continue;
        bool same_rc = c->recompute == w->recompute && c->recompute_method == w->recompute_method &&
                       c->recompute_num_layers == w->recompute_num_layers &&
                       c->recompute_modules == w->recompute_modules;
        bool same_sp = c->sequence_parallel == w->sequence_parallel;
        const char *what = NULL;
        int kind = 0;
        if (c->mbs == w->mbs && same_sp && c->distributed_optimizer == w->distributed_optimizer &&
            recompute_rank(c) < recompute_rank(w) && recompute_rank(c) <= 1) {
            what = c->recompute == RECOMPUTE_NONE ? "without recomputation" : "with selective recomputation";
            kind = F_RECOMPUTE;
        } else if (c->mbs == w->mbs && same_sp && same_rc && !c->distributed_optimizer && w->distributed_optimizer) {
            what = "without the distributed optimizer";
            kind = F_DISTOPT;
        } else if (c->mbs > w->mbs && same_sp && same_rc && c->distributed_optimizer == w->distributed_optimizer) {
            what = "with a larger micro-batch";
            kind = F_MBS;
        }
        if (!what || (forced & kind))
            continue; /* one example of each */
        char cd[256];
        search_describe(set, i, cd, sizeof cd);
        fprintf(f, "  memory forces it: %s (%s) needs %.1f GiB + %.1f GiB margin > %.0f GiB\n", what, cd,
                need_bytes(c) / GIB, set->space.memory_margin_bytes / GIB, set->capacity_bytes / GIB);
        forced |= kind;
        shown++;
    }
    char main_limit[256];
    const char *then = bubble >= comm ? "the pipeline bubble" : "exposed communication";
    if (forced) {
        snprintf(main_limit, sizeof main_limit, "memory (it forces %s%s%s%s%s), then %s",
                 forced & F_RECOMPUTE ? "recomputation" : "",
                 (forced & F_RECOMPUTE) && (forced & (F_DISTOPT | F_MBS)) ? ", " : "",
                 forced & F_DISTOPT ? "the distributed optimizer" : "",
                 (forced & F_DISTOPT) && (forced & F_MBS) ? ", " : "", forced & F_MBS ? "a smaller micro-batch" : "",
                 then);
    } else if (bubble < 0.02 && comm < 0.02) {
        snprintf(main_limit, sizeof main_limit, "compute: bubble and exposed communication are both under 2%%");
    } else {
        snprintf(main_limit, sizeof main_limit, "%s", then);
    }
    fprintf(f, "  main limit: %s\n", main_limit);
}
