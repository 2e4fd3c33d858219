/* xmoe — per-rank MoE rows and expert GEMM time, and the load check. */
#include "exec/xmoe.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/gpt.h"
#include "sim/config/moe_load.h"
#include "sim/model/moe.h"

/* Relative agreement of two ratios of the same integer counts computed in
 * double by two routes (sums of <= 2^53 integers are exact; one division
 * each): a few ulps. */
#define XMOE_RATIO_TOL 1e-12

typedef struct {
    int64_t rows;   /* expert rows received, over the measured iterations */
    double gemm_s;  /* expert GEMM seconds, over the measured iterations */
    int tp, pp, dp; /* comm ranks */
    int layers;     /* MoE layers on this rank */
    int experts;    /* E (0: no MoE layer here) */
    int local;      /* experts per EP rank */
} xmoe_rec;

/* Calls fn on every MoE layer of rt's stages with its layer number in the
 * model (0-based). */
static void each_layer(runtime *rt, void (*fn)(moe_layer *L, int layer, void *ud), void *ud)
{
    for (int c = 0; c < rt_num_chunks(rt); c++) {
        gpt_stage *st = rt_chunk(rt, c);
        int l0, nl;
        gpt_stage_layers(st, &l0, &nl);
        for (int l = l0; l < l0 + nl; l++) {
            moe_layer *L = gpt_stage_moe(st, l);
            if (L)
                fn(L, l, ud);
        }
    }
}

static void reset_one(moe_layer *L, int layer, void *ud)
{
    (void)ud;
    (void)layer;
    L->expert_gemm_s = 0.0;
    memset(L->tok_accum, 0, (size_t)L->El * sizeof *L->tok_accum);
}

void xmoe_reset(runtime *rt)
{
    each_layer(rt, reset_one, NULL);
}

typedef struct {
    xmoe_rec *r;
    int64_t *counts; /* [E], global expert index */
} collect_ud;

static void collect_one(moe_layer *L, int layer, void *ud)
{
    (void)layer;
    collect_ud *c = ud;
    c->r->layers++;
    c->r->experts = L->rc.num_experts;
    c->r->local = L->El;
    c->r->gemm_s += L->expert_gemm_s;
    for (int e = 0; e < L->El; e++) {
        c->r->rows += L->tok_accum[e];
        c->counts[L->er * L->El + e] += L->tok_accum[e];
    }
}

/* Collective: E from any MoE layer of any rank (0: dense). */
static int experts_of(MPI_Comm world, runtime *rt)
{
    int E = 0, Eall = 0;
    for (int c = 0; c < rt_num_chunks(rt) && !E; c++) {
        int l0, nl;
        gpt_stage_layers(rt_chunk(rt, c), &l0, &nl);
        for (int l = l0; l < l0 + nl && !E; l++)
            if (gpt_stage_moe(rt_chunk(rt, c), l))
                E = gpt_stage_moe(rt_chunk(rt, c), l)->rc.num_experts;
    }
    MPI_Allreduce(&E, &Eall, 1, MPI_INT, MPI_MAX, world);
    return Eall;
}

typedef struct {
    int E;
    int64_t *counts; /* [num_layers x E]: layer l's expert x at l E + x */
    int *moe;        /* [num_layers]: 1 where this rank holds MoE layer l */
} layer_ud;

static void layer_one(moe_layer *L, int layer, void *ud)
{
    layer_ud *u = ud;
    u->moe[layer] = 1;
    for (int e = 0; e < L->El; e++)
        u->counts[(size_t)layer * (size_t)u->E + (size_t)(L->er * L->El + e)] += L->tok_accum[e];
}

/* Collective: the model's layers (one past the last layer of any stage). */
static int layers_of(MPI_Comm world, runtime *rt)
{
    int n = 0, all = 0;
    for (int c = 0; c < rt_num_chunks(rt); c++) {
        int l0, nl;
        gpt_stage_layers(rt_chunk(rt, c), &l0, &nl);
        n = l0 + nl > n ? l0 + nl : n;
    }
    MPI_Allreduce(&n, &all, 1, MPI_INT, MPI_MAX, world);
    return all;
}

/* Collective: each MoE layer's per-expert rows summed over every rank, on
 * rank 0: *counts [*num_layers x E] and *moe [*num_layers] (1: a MoE
 * layer), owned by the caller (NULL elsewhere). TS_ENOMEM (every rank). */
static int layer_counts(MPI_Comm world, runtime *rt, int E, int *num_layers, int64_t **counts, int **moe, ts_err *err)
{
    int rank, nl = layers_of(world, rt);
    MPI_Comm_rank(world, &rank);
    *num_layers = nl;
    *counts = NULL;
    *moe = NULL;
    size_t n = (size_t)(nl > 0 ? nl : 1) * (size_t)E;
    layer_ud u = {E, calloc(n, sizeof *u.counts), calloc((size_t)(nl > 0 ? nl : 1), sizeof *u.moe)};
    int64_t *sum = rank == 0 ? calloc(n, sizeof *sum) : NULL;
    int *any = rank == 0 ? calloc((size_t)(nl > 0 ? nl : 1), sizeof *any) : NULL;
    int bad = !u.counts || !u.moe || (rank == 0 && (!sum || !any)), anybad = 0, rc = TS_OK;
    if (!bad)
        each_layer(rt, layer_one, &u);
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, world);
    if (anybad) {
        rc = err_set(err, TS_ENOMEM, "MoE loads: out of memory for %d experts x %d layers", E, nl);
        free(sum);
        free(any);
    } else {
        MPI_Reduce(u.counts, sum, (int)n, MPI_INT64_T, MPI_SUM, 0, world);
        MPI_Reduce(u.moe, any, nl, MPI_INT, MPI_MAX, 0, world);
        *counts = sum;
        *moe = any;
    }
    free(u.counts);
    free(u.moe);
    return rc;
}

int xmoe_write_loads(MPI_Comm world, runtime *rt, const char *path, ts_err *err)
{
    int rank, Eall = experts_of(world, rt), nl = 0;
    MPI_Comm_rank(world, &rank);
    if (Eall <= 0 || !path)
        return TS_OK;
    int64_t *counts = NULL;
    int *moe = NULL;
    bool *mask = NULL;
    int rc = layer_counts(world, rt, Eall, &nl, &counts, &moe, err);
    if (!rc && rank == 0) {
        mask = calloc((size_t)(nl > 0 ? nl : 1), sizeof *mask);
        if (!mask)
            rc = err_set(err, TS_ENOMEM, "--moe-load-out: out of memory for %d layers", nl);
        for (int l = 0; l < nl && mask; l++)
            mask[l] = moe[l] != 0;
    }
    if (!rc && rank == 0)
        rc = moe_load_write(path, counts, Eall, nl, mask,
                            "trainexec --moe-load-out: routed token-slots per MoE layer and expert, summed over every "
                            "rank and measured iteration (trainsim simulate --moe-expert-load reads it)",
                            err);
    MPI_Bcast(&rc, 1, MPI_INT, 0, world);
    free(counts);
    free(moe);
    free(mask);
    return rc;
}

/* Rank 0: each MoE layer's load factor (moe_rank_load_factor of its rows
 * summed over the expert groups: what the simulator takes from the file
 * --moe-load-out writes) to out. */
static void report_layers(FILE *out, const int64_t *counts, const int *moe, int nl, int E, int ep, double *loads)
{
    for (int l = 0; l < nl; l++) {
        if (!moe[l])
            continue;
        for (int e = 0; e < E; e++)
            loads[e] = (double)counts[(size_t)l * (size_t)E + (size_t)e];
        fprintf(out, "  MoE load, layer %d (ep %d): moe_rank_load_factor of the layer's per-expert rows %.6f\n", l, ep,
                moe_rank_load_factor(loads, E, ep, 0.0, NULL));
    }
}

int xmoe_report(MPI_Comm world, runtime *rt, const comm *cm, int ep, bool force_balance, int iterations, FILE *out,
                bool *all_match, ts_err *err)
{
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    *all_match = true;
    int Eall = experts_of(world, rt);
    if (Eall <= 0)
        return TS_OK;
    xmoe_rec mine = {.tp = cm->rank[COMM_TP], .pp = cm->rank[COMM_PP], .dp = cm->rank[COMM_DP]};
    int64_t *counts = calloc((size_t)Eall, sizeof *counts);
    xmoe_rec *recs = rank == 0 ? calloc((size_t)size, sizeof *recs) : NULL;
    int64_t *all = rank == 0 ? calloc((size_t)size * (size_t)Eall, sizeof *all) : NULL;
    int64_t *loads_i = rank == 0 ? calloc((size_t)Eall, sizeof *loads_i) : NULL;
    double *loads = rank == 0 ? calloc((size_t)Eall, sizeof *loads) : NULL;
    int bad = !counts || (rank == 0 && (!recs || !all || !loads_i || !loads)), anybad = 0;
    if (!bad) {
        collect_ud cu = {&mine, counts};
        each_layer(rt, collect_one, &cu);
    }
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, world);
    int rc = TS_OK, nl = 0;
    int64_t *lcounts = NULL;
    int *lmoe = NULL;
    if (anybad) {
        rc = err_set(err, TS_ENOMEM, "MoE report: out of memory for %d experts x %d ranks", Eall, size);
        goto done;
    }
    MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, recs, (int)sizeof mine, MPI_BYTE, 0, world);
    MPI_Gather(counts, Eall, MPI_INT64_T, all, Eall, MPI_INT64_T, 0, world);
    if ((rc = layer_counts(world, rt, Eall, &nl, &lcounts, &lmoe, err))) /* collective: before rank 0 goes on */
        goto done;
    if (rank != 0 || !out || !recs || !all || !loads_i || !loads) /* (rank 0 has them all: anybad above) */
        goto done;
    double it = iterations > 0 ? iterations : 1;
    int t = cm->size[COMM_TP], cp = cm->size[COMM_CP], ep1 = ep > 0 ? ep : 1;
    for (int r = 0; r < size; r++) {
        const xmoe_rec *q = &recs[r];
        int xi = q->tp + t * q->dp; /* (q->dp: the data group's rank, cp rank + cp * replica) */
        char cps[24] = "";
        if (cp > 1)
            (void)snprintf(cps, sizeof cps, " cp %d", q->dp % cp);
        fprintf(out,
                "  MoE rank %d (tp %d%s pp %d dp %d, ep rank %d): expert rows %.1f per iteration, expert GEMMs %.3f "
                "ms per iteration (%d MoE layers x %d local experts)\n",
                r, q->tp, cps, q->pp, q->dp / cp, xi % ep1, (double)q->rows / it, 1e3 * q->gemm_s / it, q->layers,
                q->local);
    }
    /* the groups: one per (pipeline rank, EDP index); members in EP rank order */
    int p = cm->size[COMM_PP], d = cm->size[COMM_DP], ngroups = t * d / ep1;
    for (int pp = 0; pp < p; pp++)
        for (int g = 0; g < ngroups; g++) {
            int64_t mx = 0, sum = 0;
            int members = 0, layers = 0;
            memset(loads_i, 0, (size_t)Eall * sizeof *loads_i);
            for (int r = 0; r < size; r++) {
                const xmoe_rec *q = &recs[r];
                if (q->pp != pp || (q->tp + t * q->dp) / ep1 != g)
                    continue;
                members++;
                layers = q->layers;
                mx = q->rows > mx ? q->rows : mx;
                sum += q->rows;
                for (int e = 0; e < Eall; e++)
                    loads_i[e] += all[(size_t)r * Eall + e];
            }
            if (!members || !layers || sum == 0)
                continue;
            for (int e = 0; e < Eall; e++)
                loads[e] = (double)loads_i[e];
            double ratio = (double)mx / ((double)sum / members);
            double lf = moe_rank_load_factor(loads, Eall, ep1, 0.0, NULL);
            bool same = fabs(ratio - lf) <= XMOE_RATIO_TOL * lf;
            *all_match = *all_match && same;
            fprintf(out,
                    "  MoE load, pipeline rank %d, expert group %d (ep %d): busiest/mean expert rows %.6f measured; "
                    "moe_rank_load_factor of the measured per-expert rows %.6f: %s\n",
                    pp, g, ep1, ratio, lf, same ? "matches" : "DIFFERS");
            if (force_balance) {
                bool one = mx * members == sum;
                *all_match = *all_match && one;
                fprintf(out,
                        "  MoE load, pipeline rank %d, expert group %d: forced balance, the simulator's load factor "
                        "1: %s\n",
                        pp, g, one ? "matches" : "DIFFERS (E does not divide a routed batch's assignments?)");
            }
        }
    if (lcounts)
        report_layers(out, lcounts, lmoe, nl, Eall, ep1, loads);
done:
    free(lcounts);
    free(lmoe);
    free(counts);
    free(recs);
    free(all);
    free(loads_i);
    free(loads);
    return rc;
}
