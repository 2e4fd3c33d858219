/* MPI test of the executor's MoE layers in the GPT model: two training
 * iterations (Adam; the gradients and weights compared after the first,
 * the losses of both) of a small GPT whose layers 1, 3, 5, 7 are MoE layers
 * (--moe-layer-freq 2 after one dense layer: E = 4 experts, top-2) under
 * expert-parallel layouts on 1-4 ranks give the single-process run's
 * losses, gradients and updated weights, the flat (dense) parameters and
 * the routers and experts alike:
 *   ep = 1 with d = 1, 2 (experts replicated, gradients summed over EDP = d);
 *   ep = 2 with d = 2 and d = 4 (EDP = 2: dp > ep); ep = 4 with d = 4;
 *   pipelines: p = 2 with d = 2, ep = 2 under 1F1B, interleaved (v = 2) and
 *   ZB-H1 (split input / weight gradients);
 *   tensor parallelism (ETP = 1, sequence parallelism): t = 2 with ep = 2
 *   (the EP group is the two tensor ranks), t = 2 x d = 2 with ep = 4;
 *   context parallelism (flash attention; the reference runs the unfused
 *   one): cp = 2 with ep = 2, cp = 2 x d = 2 with ep = 4, cp = 2 with p = 2,
 *   t = 2 x cp = 2 with ep = 4 and ep = 1 (EDP over all four), cp = 4 with
 *   ep = 1.
 * Passes: dropless; capacity factor 1 (tokens dropped: the reference run
 * counts them); forced balance; the auxiliary load-balancing loss
 * (coefficient 1e-2); SwiGLU experts on the Llama layers (RMSNorm, no
 * biases, rope). The tensor- and context-parallel layouts run in the
 * dropless passes only: each rank routes its own tokens (N/t, N/cp), so the
 * capacity (per routed batch) and forced balance's round robin (by token
 * index in the routed batch) are those of N/t or N/cp tokens there, another
 * routing than the reference's N; the auxiliary loss is refused with t > 1
 * or cp > 1. Then the MoE layer checkpointed (recompute_moe: the forward
 * rerun in the backward), alone and with the attention core's selective
 * recomputation, dropless, with capacity, with the auxiliary loss and on
 * the Llama layers, against the same references (no recomputation).
 *
 * mpirun-np: 4
 *
 * Tolerances (fp32), as test_exec_layouts.c's: the layouts re-associate
 * sums only (gradients over micro-batches, data-parallel and expert-data-
 * parallel ranks; expert rows arriving in rank order; partial router
 * gradients over tensor ranks), each rounding at ~6e-8 relative over <= 16
 * micro-batches and <= 4 ranks: well under 1e-5. Accepted: each
 * iteration's loss within 1e-5 relative; gradients (last iteration) within
 * 1e-4 relative (L2) and each within 1e-4 of the largest; weights after
 * the first Adam step within lr * 1e-2 of the reference beyond what the
 * measured gradient difference explains through that step (ADAM_EPS
 * below: a gradient element within rounding of Adam's eps moves its weight
 * by up to ~lr; measured: |dw| 2.4e-5 = 0.024 lr at d = 4 from a gradient
 * element of ~1e-8). After a second step the update m/sqrt(v) carries
 * every small element's relative rounding, which no such bound covers, so
 * weights are compared after one step and the second iteration checks the
 * loss of the updated model. The
 * routing is discrete: its decisions agree because the logits agree to
 * rounding (the second iteration's routing runs on weights that differ by
 * that rounding); a wrong exchange, a gradient summed over the wrong group or a
 * missing term moves weights by whole steps (lr) and losses by ~1e-3.
 * Measured maxima are printed with each layout.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/comm_mpi.h"
#include "exec/core/backend.h"
#include "exec/core/comm.h"
#include "exec/core/gpt.h"
#include "exec/core/moe.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/runtime.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"

#define M     4 /* micro-batches per pipeline */
#define ITERS 2
#define LR    1e-3f

static const gpt_dims GPT_MOE = {.vocab = 32,
                                 .seq = 8,
                                 .hidden = 16,
                                 .heads = 4,
                                 .ffn = 32,
                                 .layers = 8,
                                 .batch = 2,
                                 .num_experts = 4,
                                 .moe_topk = 2,
                                 .moe_ffn = 24,
                                 .moe_layer_freq = 2,
                                 .moe_first_dense = 1};
static gpt_dims DIMS;

typedef struct {
    int t, p, d, ep;
    sched_kind kind;
    int v;
    int cp; /* context-parallel ranks (0: 1); > 1 runs flash attention */
} layout;

typedef struct {
    double loss[ITERS];
    float *w, *g;   /* flat parameters, gradients */
    float *mw, *mg; /* MoE routers and experts, every MoE layer in order */
    size_t dropped; /* reference: assignments dropped in the last forward of every MoE layer */
} result;

static int world_rank, world_size, npass, nfail;

#define CP(L) ((L)->cp > 1 ? (L)->cp : 1)

static size_t moe_floats(void)
{
    return gpt_moe_num_params(&DIMS);
}

/* Offset of layer l's MoE weights in the concatenation. */
static size_t moe_offset(int l)
{
    size_t off = 0;
    moe_route_cfg rc = {.num_experts = DIMS.num_experts, .topk = DIMS.moe_topk};
    for (int i = 0; i < l; i++)
        if (gpt_layer_is_moe(&DIMS, i))
            off += moe_full_floats(&rc, DIMS.hidden, DIMS.moe_ffn, DIMS.swiglu);
    return off;
}

/* Export the MoE weights (and gradients) of rt's stages: experts from the
 * first EDP replica (x / ep == 0), the router from x == 0 only, so a sum
 * over ranks writes each element once. */
static void export_moe(runtime *rt, const comm *cm, int ep, result *r)
{
    int x = cm->rank[COMM_TP] + cm->size[COMM_TP] * cm->rank[COMM_DP];
    for (int c = 0; c < rt_num_chunks(rt); c++) {
        gpt_stage *st = rt_chunk(rt, c);
        int l0, nl;
        gpt_stage_layers(st, &l0, &nl);
        for (int l = l0; l < l0 + nl; l++) {
            moe_layer *L = gpt_stage_moe(st, l);
            if (!L)
                continue;
            r->dropped += L->dropped;
            if (x / ep != 0)
                continue;
            moe_layer_export(L, false, x == 0, r->mw + moe_offset(l));
            moe_layer_export(L, true, x == 0, r->mg + moe_offset(l));
        }
    }
}

static int alloc_result(result *r)
{
    size_t np = gpt_num_params(&DIMS), nm = moe_floats();
    r->w = calloc(np, 4);
    r->g = calloc(np, 4);
    r->mw = calloc(nm, 4);
    r->mg = calloc(nm, 4);
    return r->w && r->g && r->mw && r->mg ? TS_OK : TS_ENOMEM;
}

static void free_result(result *r)
{
    free(r->w);
    free(r->g);
    free(r->mw);
    free(r->mg);
}

static void opts_for(rt_opts *o, bool sp)
{
    rt_opts_default(o);
    o->dims = DIMS;
    o->sp = sp;
    o->seed = 99;
    o->lr = LR;
}

/* Run ITERS iterations: layout L on base (n ranks), or the reference
 * (L NULL: one process, m_total micro-batches). Results summed onto base
 * rank 0. */
static int run_one(const layout *L, MPI_Comm base, int m_total, result *r, char *msg, size_t msz)
{
    ts_err err;
    err_clear(&err);
    backend *be = NULL;
    comm *cm = NULL;
    sched *s = NULL;
    runtime *rt = NULL;
    int rc = alloc_result(r) ? err_set(&err, TS_ENOMEM, "out of memory") : TS_OK;
    if (!rc)
        rc = backend_cpu_create(1, &be, &err);
    if (!rc)
        rc = L ? comm_mpi_create_cp(base, L->t, CP(L), L->p, L->d, &cm, &err) : comm_local_create(&cm, &err);
    if (!rc && L)
        rc = comm_mpi_set_ep(cm, L->ep, &err);
    sched_opts so;
    sched_opts_default(&so, L ? L->kind : SCHED_1F1B);
    so.p = L ? L->p : 1;
    so.m = L ? M : m_total;
    so.v = L ? L->v : 1;
    so.num_layers = DIMS.layers;
    so.with_comm = L != NULL;
    so.with_reduce_optim = true;
    if (!rc)
        rc = sched_generate(&so, &s, &err);
    rt_opts o;
    opts_for(&o, L && L->t > 1);
    o.dims.flash = L && CP(L) > 1; /* (context parallelism runs flash attention; the reference the unfused one) */
    if (!rc)
        rc = rt_create(&o, s, be, cm, &rt, &err);
    if (!rc)
        rc = rt_iteration(rt, 0, &r->loss[0], &err);
    /* the first iteration's gradients and updated weights */
    for (int c = 0; !rc && c < rt_num_chunks(rt); c++) {
        gpt_stage *st = rt_chunk(rt, c);
        bool repl = cm->rank[COMM_TP] == 0;
        if (cm->rank[COMM_DP] == 0)
            rc = gpt_stage_export(st, false, repl, r->w, &err);
        if (!rc && cm->rank[COMM_DP] == 0)
            rc = gpt_stage_export(st, true, repl, r->g, &err);
    }
    if (!rc)
        export_moe(rt, cm, L ? L->ep : 1, r);
    for (int it = 1; it < ITERS && !rc; it++) /* then the losses of the updated model */
        rc = rt_iteration(rt, it, &r->loss[it], &err);
    int bad = rc != 0, anybad = bad;
    if (L) {
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, base);
        int brank;
        MPI_Comm_rank(base, &brank);
        if (!anybad) {
            size_t np = gpt_num_params(&DIMS), nm = moe_floats();
            MPI_Reduce(brank ? r->w : MPI_IN_PLACE, r->w, (int)np, MPI_FLOAT, MPI_SUM, 0, base);
            MPI_Reduce(brank ? r->g : MPI_IN_PLACE, r->g, (int)np, MPI_FLOAT, MPI_SUM, 0, base);
            MPI_Reduce(brank ? r->mw : MPI_IN_PLACE, r->mw, (int)nm, MPI_FLOAT, MPI_SUM, 0, base);
            MPI_Reduce(brank ? r->mg : MPI_IN_PLACE, r->mg, (int)nm, MPI_FLOAT, MPI_SUM, 0, base);
        }
    }
    if (bad) {
        snprintf(msg, msz, "%s", err.msg);
        fprintf(stderr, "rank %d: %s\n", world_rank, err.msg);
    } else if (anybad) {
        snprintf(msg, msz, "another rank failed");
    }
    rt_free(rt);
    sched_free(s);
    if (cm)
        cm->destroy(cm);
    if (be)
        be->destroy(be);
    return anybad;
}

static void check(bool ok, const char *what, const char *detail)
{
    if (world_rank != 0)
        return;
    if (ok)
        npass++;
    else
        nfail++;
    printf("%s - %s%s%s\n", ok ? "ok" : "FAIL", what, detail[0] ? ": " : "", detail);
    (void)fflush(stdout);
}

typedef struct {
    double gmax, dgmax, num, den, dwmax, excess;
} diffs;

/* Adam's eps (rt_opts_default's). Its first step moves a weight by
 * u(g) = lr g / (|g| + eps); two gradients g, g' = g + dg give
 * |u(g) - u(g')| <= lr eps |dg| / (min(|g|, |g'|) + eps)^2 (the derivative's
 * bound on the segment): what a gradient within rounding explains. */
#define ADAM_EPS 1e-8

static void diff_into(diffs *D, const float *g, const float *gref, const float *w, const float *wref, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double dg = fabs((double)g[i] - gref[i]), dw = fabs((double)w[i] - wref[i]);
        D->gmax = fmax(D->gmax, fabs(gref[i]));
        D->dgmax = fmax(D->dgmax, dg);
        D->num += dg * dg;
        D->den += (double)gref[i] * gref[i];
        D->dwmax = fmax(D->dwmax, dw);
        double lo = fmax(fabs(gref[i]) - dg, 0.0) + ADAM_EPS;
        double explained = fmin(2.0, ADAM_EPS * dg / (lo * lo)) * LR;
        D->excess = fmax(D->excess, dw - explained);
    }
}

static void run_pass(const layout *Ls, int nL, const char *name, bool with_tp, bool expect_drops)
{
    char msg[ERR_MSG_BYTES + 64] = "";
    result ref[3];
    memset(ref, 0, sizeof ref);
    int refbad = 0;
    gpt_dims run_dims = DIMS; /* the references recompute nothing */
    DIMS.recompute_moe = DIMS.recompute_attn = false;
    if (world_rank == 0)
        for (int i = 0; i < 3 && !refbad; i++)
            refbad = run_one(NULL, MPI_COMM_SELF, M << i, &ref[i], msg, sizeof msg);
    DIMS = run_dims;
    MPI_Bcast(&refbad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char rwhat[128], rdetail[96] = "";
    snprintf(rwhat, sizeof rwhat, "%s: single-process reference runs%s", name,
             expect_drops ? " (capacity drops tokens)" : "");
    bool rok = !refbad;
    if (world_rank == 0 && rok && expect_drops) {
        rok = ref[0].dropped > 0;
        snprintf(rdetail, sizeof rdetail, "%zu assignments dropped in the last forwards", ref[0].dropped);
    }
    check(rok, rwhat, refbad ? msg : rdetail);
    for (int li = 0; li < nL && !refbad; li++) {
        const layout *L = &Ls[li];
        int n = L->t * CP(L) * L->p * L->d;
        if (n > world_size || ((L->t > 1 || CP(L) > 1) && !with_tp))
            continue;
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < n ? 0 : MPI_UNDEFINED, world_rank, &sub);
        result r;
        memset(&r, 0, sizeof r);
        int bad = 0;
        msg[0] = '\0';
        if (sub != MPI_COMM_NULL) {
            bad = run_one(L, sub, 0, &r, msg, sizeof msg);
            MPI_Comm_free(&sub);
        }
        MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
        char what[160], detail[ERR_MSG_BYTES + 256] = "";
        snprintf(what, sizeof what, "%s: %s t=%d%s cp=%d p=%d d=%d v=%d ep=%d (edp %d)", name, sched_kind_name(L->kind),
                 L->t, L->t > 1 ? " sp" : "", CP(L), L->p, L->d, L->v, L->ep, L->t * CP(L) * L->d / L->ep);
        bool ok = !bad;
        const result *R = &ref[L->d == 1 ? 0 : L->d == 2 ? 1 : 2];
        if (world_rank == 0 && ok && !(r.g && r.w && r.mg && r.mw && R->g && R->w && R->mg && R->mw)) {
            ok = false;
            snprintf(detail, sizeof detail, "no results gathered");
        } else if (world_rank == 0 && ok) {
            diffs D = {0};
            diff_into(&D, r.g, R->g, r.w, R->w, gpt_num_params(&DIMS));
            diffs Dm = {0};
            diff_into(&Dm, r.mg, R->mg, r.mw, R->mw, moe_floats());
            double dl = 0;
            for (int it = 0; it < ITERS; it++)
                dl = fmax(dl, fabs(r.loss[it] - R->loss[it]) / fabs(R->loss[it]));
            double grel = sqrt(D.num / D.den), mgrel = sqrt(Dm.num / Dm.den);
            ok = dl <= 1e-5 && grel <= 1e-4 && mgrel <= 1e-4 && D.dgmax <= 1e-4 * D.gmax &&
                 Dm.dgmax <= 1e-4 * Dm.gmax && D.excess <= LR * 1e-2 && Dm.excess <= LR * 1e-2;
            snprintf(detail, sizeof detail,
                     "losses %.7f %.7f (rel %.1e); dense grad rel %.1e, max %.1e, |dw| %.1e (unexplained %.1e); MoE "
                     "grad rel %.1e, max %.1e, |dw| %.1e (unexplained %.1e)",
                     r.loss[0], r.loss[ITERS - 1], dl, grel, D.dgmax / D.gmax, D.dwmax, fmax(D.excess, 0.0), mgrel,
                     Dm.dgmax / Dm.gmax, Dm.dwmax, fmax(Dm.excess, 0.0));
        } else if (world_rank == 0) {
            snprintf(detail, sizeof detail, "%s", msg);
        }
        check(ok, what, detail);
        free_result(&r);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    for (int i = 0; i < 3; i++)
        free_result(&ref[i]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    static const layout Ls[] = {
        {1, 1, 1, 1, SCHED_1F1B, 1, 1},        {1, 1, 2, 1, SCHED_1F1B, 1, 1},  {1, 1, 2, 2, SCHED_1F1B, 1, 1},
        {1, 1, 4, 2, SCHED_1F1B, 1, 1},        {1, 1, 4, 4, SCHED_1F1B, 1, 1},  {1, 2, 2, 2, SCHED_1F1B, 1, 1},
        {1, 2, 2, 2, SCHED_INTERLEAVED, 2, 1}, {1, 2, 2, 2, SCHED_ZB_H1, 1, 1}, {1, 2, 1, 1, SCHED_GPIPE, 1, 1},
        {2, 1, 1, 2, SCHED_1F1B, 1, 1},        {2, 1, 2, 4, SCHED_1F1B, 1, 1},  {2, 2, 1, 2, SCHED_1F1B, 1, 1},
        {1, 1, 1, 2, SCHED_1F1B, 1, 2},        {1, 1, 2, 4, SCHED_1F1B, 1, 2},  {1, 1, 1, 1, SCHED_1F1B, 1, 4},
        {1, 2, 1, 2, SCHED_1F1B, 1, 2},        {2, 1, 1, 4, SCHED_1F1B, 1, 2},  {2, 1, 1, 1, SCHED_1F1B, 1, 2},
    };
    int nL = (int)(sizeof Ls / sizeof Ls[0]);
    DIMS = GPT_MOE;
    run_pass(Ls, nL, "gpt moe dropless", true, false);
    DIMS = GPT_MOE;
    DIMS.moe_capacity = 1.0;
    run_pass(Ls, nL, "gpt moe capacity 1.0", false, true);
    DIMS = GPT_MOE;
    DIMS.moe_force_balance = true;
    run_pass(Ls, nL, "gpt moe forced balance", false, false);
    DIMS = GPT_MOE;
    DIMS.moe_aux_coeff = 1e-2;
    run_pass(Ls, nL, "gpt moe aux loss 1e-2", false, false);
    DIMS = GPT_MOE;
    DIMS.rmsnorm = DIMS.swiglu = DIMS.no_bias = DIMS.rope = true;
    DIMS.tie_embed = false;
    run_pass(Ls, nL, "llama moe swiglu experts", true, false);
    /* the MoE layer checkpointed (--moe-layer-recompute: with the attention core; --recompute-modules
     * moe: alone): its forward rerun in the backward, against the references without */
    DIMS.recompute_moe = true;
    run_pass(Ls, nL, "llama moe swiglu experts recompute moe", true, false);
    DIMS = GPT_MOE;
    DIMS.recompute_moe = DIMS.recompute_attn = true;
    run_pass(Ls, nL, "gpt moe dropless recompute moe core_attn", true, false);
    DIMS = GPT_MOE;
    DIMS.recompute_moe = true;
    DIMS.moe_capacity = 1.0;
    run_pass(Ls, nL, "gpt moe capacity 1.0 recompute moe", false, true);
    DIMS = GPT_MOE;
    DIMS.recompute_moe = true;
    DIMS.moe_aux_coeff = 1e-2;
    run_pass(Ls, nL, "gpt moe aux loss 1e-2 recompute moe", false, false);
    if (world_rank == 0)
        printf("%d passed, %d failed\n", npass, nfail);
    MPI_Finalize();
    return 0;
}
