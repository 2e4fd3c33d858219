/* MPI test of the executor: one training iteration of a small GPT under every
 * pipeline schedule and many (t, p, d) layouts (with and without sequence
 * parallelism, and uneven layer splits from Megatron-core layout strings,
 * including a stage with the embedding only) on 1-4 ranks gives the same
 * loss, the same gradients and the same updated weights as the
 * single-process run of the same global batch. Every layout runs twice: with
 * the GPT layers and with Llama-architecture layers (RMSNorm, SwiGLU, no
 * biases, grouped-query attention with 4 query groups of 2 heads, rope;
 * the output layer is untied in both), then with full recomputation (uniform
 * groups of 2 layers on the Llama layers, block of 1 on the GPT layers)
 * against the references without it, then with the distributed optimizer
 * (gradients reduce-scattered, Adam on each data-parallel rank's shard,
 * parameters all-gathered; each rank's reduced shard of the gradients is
 * what is compared). Flash attention (the log-sum-exp saved, the scores
 * recomputed in the backward) runs a subset of the layouts and the
 * context-parallel ones (cp = 2, 4; with d = 2, p = 2, t = 2, sp), on the
 * GPT layers (with selective recomputation, full recomputation and the
 * distributed optimizer, which then shards over d x cp) and on Llama layers
 * (grouped-query attention around the ring; rope at each chunk's
 * positions), with rope and with learned positions, each against the same
 * single-process references, which run the unfused attention. The query /
 * key norms (--qk-layernorm: RMSNorm on the Llama layers, LayerNorm on the
 * GPT ones) run a subset of the layouts, with recomputation and the
 * distributed optimizer, and every flash / context-parallel one.
 *
 * mpirun-np: 4
 *
 * Tolerances (fp32): layouts only re-associate sums (partial GEMM sums over
 * tensor ranks, gradient sums over micro-batches, data-parallel and
 * context-parallel ranks; flash attention sums the softmax online in double
 * and rounds once, the unfused one in fp32), each rounding at ~6e-8 relative; over the <= 16 micro-batches and <= 4
 * ranks here that is well under 1e-5 relative. Accepted: loss within 1e-5
 * relative; gradient vector within 1e-4 relative (L2) and every gradient
 * within 1e-4 of the largest; updated weights within lr * 1e-2 each, plus
 * what the accepted gradient difference dg moves Adam's first step
 * (lr g / (|g| + eps)) where |g| is near eps: lr eps dg / (|g| + eps)^2
 * (a Llama weight with |g| ~ 1.1e-9, dg ~ 2e-10 under context parallelism
 * moved 1.6e-5 = lr * 1.6e-2, all of it this term).
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
#include "exec/cpu/backend_cpu.h"
#include "exec/runtime.h"
#include "sim/sched/sched.h"
#include "sim/sched/sched_generate.h"
#include "sim/sched/sched_layout.h"

static const gpt_dims GPT_DIMS = {.vocab = 32, .seq = 8, .hidden = 16, .heads = 4, .ffn = 32, .layers = 8, .batch = 2};
/* t = 4 splits the 4 groups one per rank (2 query heads each) */
static const gpt_dims LLAMA_DIMS = {.vocab = 32,
                                    .seq = 8,
                                    .hidden = 32,
                                    .heads = 8,
                                    .ffn = 32,
                                    .layers = 8,
                                    .batch = 2,
                                    .groups = 4,
                                    .rmsnorm = true,
                                    .swiglu = true,
                                    .no_bias = true,
                                    .rope = true};
static gpt_dims DIMS; /* the model of the pass under way */
#define M        4    /* micro-batches per pipeline */
#define LR       1e-3f
#define ADAM_EPS 1e-8 /* rt_opts_default's --adam-eps */

typedef struct {
    int t, p, d;
    bool sp;
    sched_kind kind;
    int v;
    const char *split; /* Megatron-core layout string of the p*v stages; NULL = even split */
    int cp;            /* context-parallel ranks (0: 1) */
} layout;

static int cp_of(const layout *L)
{
    return L->cp > 1 ? L->cp : 1;
}

typedef struct {
    double loss;
    float *w, *g; /* full model after the iteration */
} result;

static int world_rank, world_size;
static int npass, nfail;

static void opts_for(rt_opts *o, bool sp)
{
    rt_opts_default(o);
    o->dims = DIMS;
    o->sp = sp;
    o->seed = 99;
    o->lr = LR;
}

/* Run one iteration of layout L on comm base (size t*cp*p*d); the full
 * weights/gradients are summed onto base rank 0 into r (allocated there). */
static int run_layout(const layout *L, MPI_Comm base, result *r, char *msg, size_t msz)
{
    ts_err err;
    err_clear(&err);
    backend *be = NULL;
    comm *cm = NULL;
    sched *s = NULL;
    runtime *rt = NULL;
    size_t np = gpt_num_params(&DIMS);
    float *w = calloc(np, 4), *g = calloc(np, 4);
    int rc = backend_cpu_create(1, &be, &err);
    if (!rc)
        rc = comm_mpi_create_cp(base, L->t, cp_of(L), L->p, L->d, &cm, &err);
    sched_opts so;
    sched_opts_default(&so, L->kind);
    so.p = L->p;
    so.m = M;
    so.v = L->v;
    so.num_layers = DIMS.layers;
    so.with_comm = true;
    so.with_reduce_optim = true;
    sched_layout lay;
    int v = 0;
    if (!rc && L->split && !(rc = sched_layout_parse(L->split, &lay, &err)) &&
        !(rc = sched_layout_check(&lay, L->p, DIMS.layers, &v, &err)))
        so.stage_layers = lay.layers;
    if (!rc && L->split && v != L->v)
        rc = err_set(&err, TS_EINVAL, "layout '%s' gives v = %d, the test says %d", L->split, v, L->v);
    if (!rc)
        rc = sched_generate(&so, &s, &err);
    rt_opts o;
    opts_for(&o, L->sp);
    if (!rc)
        rc = rt_create(&o, s, be, cm, &rt, &err);
    double loss = 0.0;
    if (!rc)
        rc = rt_iteration(rt, 0, &loss, &err);
    /* weights from data-parallel rank 0; gradients from there too, or with
     * the distributed optimizer each data-parallel rank's reduced shard */
    for (int c = 0; !rc && rt && c < rt_num_chunks(rt); c++) {
        gpt_stage *st = rt_chunk(rt, c);
        bool repl = cm->rank[COMM_TP] == 0;
        size_t lo, hi;
        gpt_stage_grad_shard(st, &lo, &hi);
        if (cm->rank[COMM_DP] == 0)
            rc = gpt_stage_export(st, false, repl, w, &err);
        if (!rc && (cm->rank[COMM_DP] == 0 || DIMS.dist_optim))
            rc = gpt_stage_export_range(st, true, repl, lo, hi, g, &err);
    }
    /* agree on failure before the reductions */
    int bad = rc != 0, anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, base);
    int brank;
    MPI_Comm_rank(base, &brank);
    if (!anybad) {
        MPI_Reduce(brank ? w : MPI_IN_PLACE, w, (int)np, MPI_FLOAT, MPI_SUM, 0, base);
        MPI_Reduce(brank ? g : MPI_IN_PLACE, g, (int)np, MPI_FLOAT, MPI_SUM, 0, base);
    }
    if (bad) {
        snprintf(msg, msz, "%s", err.msg);
        fprintf(stderr, "rank %d: %s\n", brank, err.msg);
    } else if (anybad)
        snprintf(msg, msz, "another rank failed");
    r->loss = loss;
    r->w = w;
    r->g = g;
    rt_free(rt);
    sched_free(s);
    if (cm)
        cm->destroy(cm);
    if (be)
        be->destroy(be);
    return anybad;
}

/* The single-process reference for m_total micro-batches. */
static int run_reference(int m_total, result *r, char *msg, size_t msz)
{
    ts_err err;
    backend *be = NULL;
    comm *cm = NULL;
    sched *s = NULL;
    runtime *rt = NULL;
    size_t np = gpt_num_params(&DIMS);
    r->w = calloc(np, 4);
    r->g = calloc(np, 4);
    sched_opts so;
    sched_opts_default(&so, SCHED_1F1B);
    so.m = m_total;
    so.num_layers = DIMS.layers;
    so.with_reduce_optim = true;
    rt_opts o;
    opts_for(&o, false);
    int rc = backend_cpu_create(1, &be, &err);
    if (!rc)
        rc = comm_local_create(&cm, &err);
    if (!rc)
        rc = sched_generate(&so, &s, &err);
    if (!rc)
        rc = rt_create(&o, s, be, cm, &rt, &err);
    if (!rc)
        rc = rt_iteration(rt, 0, &r->loss, &err);
    if (!rc)
        rc = gpt_stage_export(rt_chunk(rt, 0), false, true, r->w, &err);
    if (!rc)
        rc = gpt_stage_export(rt_chunk(rt, 0), true, true, r->g, &err);
    if (rc)
        snprintf(msg, msz, "reference: %s", err.msg);
    rt_free(rt);
    sched_free(s);
    if (cm)
        cm->destroy(cm);
    if (be)
        be->destroy(be);
    return rc;
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
    (void)fflush(stdout); /* progress */
}

/* Every layout of Ls against the single-process references, for DIMS. */
static void run_pass(const layout *Ls, int nL, const char *model)
{
    const int me = world_rank; /* (a local: the analyzer cannot see MPI keep it) */
    size_t np = gpt_num_params(&DIMS);
    char msg[ERR_MSG_BYTES + 64] = "";

    /* references for d = 1, 2, 4 (m*d micro-batches), on rank 0, without recomputation */
    result ref[3] = {{0}};
    int refbad = 0;
    gpt_dims run_dims = DIMS;
    DIMS.recompute = GPT_RC_NONE;
    DIMS.recompute_attn = false;
    DIMS.dist_optim = false; /* (tie_embed stays: it changes the model) */
    DIMS.flash = false;      /* flash attention is checked against the unfused one */
    if (me == 0)
        for (int i = 0; i < 3 && !refbad; i++)
            refbad = run_reference(M << i, &ref[i], msg, sizeof msg);
    DIMS = run_dims;
    MPI_Bcast(&refbad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char rwhat[64];
    snprintf(rwhat, sizeof rwhat, "%s: single-process reference runs", model);
    check(!refbad, rwhat, msg);

    for (int li = 0; li < nL && !refbad; li++) {
        const layout *L = &Ls[li];
        int n = L->t * cp_of(L) * L->p * L->d;
        if (n > world_size)
            continue;
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, me < n ? 0 : MPI_UNDEFINED, me, &sub);
        result r = {0};
        int bad = 0;
        msg[0] = '\0';
        if (sub != MPI_COMM_NULL) {
            bad = run_layout(L, sub, &r, msg, sizeof msg);
            MPI_Comm_free(&sub);
        }
        MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
        char what[192], detail[ERR_MSG_BYTES + 256] = "";
        snprintf(what, sizeof what, "%s: %s t=%d cp=%d p=%d d=%d v=%d%s%s%s", model, sched_kind_name(L->kind), L->t,
                 cp_of(L), L->p, L->d, L->v, L->sp ? " sp" : "", L->split ? " layout " : "", L->split ? L->split : "");
        bool ok = !bad;
        const result *R = &ref[L->d == 1 ? 0 : L->d == 2 ? 1 : 2];
        if (me == 0 && ok && !(r.g && r.w && R->g && R->w)) {
            ok = false;
            snprintf(detail, sizeof detail, "no results gathered");
        } else if (me == 0 && ok) {
            double dl = fabs(r.loss - R->loss) / fabs(R->loss);
            double gmax = 0, dgmax = 0, num = 0, den = 0, dwmax = 0, dwover = 0;
            for (size_t i = 0; i < np; i++) {
                double dg = fabs((double)r.g[i] - R->g[i]);
                gmax = fmax(gmax, fabs(R->g[i]));
                dgmax = fmax(dgmax, dg);
                num += dg * dg;
                den += (double)R->g[i] * R->g[i];
                double dw = fabs((double)r.w[i] - R->w[i]), gmin = fmin(fabs(r.g[i]), fabs(R->g[i]));
                dwmax = fmax(dwmax, dw);
                /* Adam's first step moves w by lr g / (|g| + eps): a gradient off by dg moves it
                 * by up to lr eps dg / (|g| + eps)^2 more, large only where |g| ~ eps */
                dwover = fmax(dwover, dw - LR * ADAM_EPS * dg / ((gmin + ADAM_EPS) * (gmin + ADAM_EPS)));
            }
            double grel = sqrt(num / den);
            ok = dl <= 1e-5 && grel <= 1e-4 && dgmax <= 1e-4 * gmax && dwover <= LR * 1e-2;
            snprintf(detail, sizeof detail,
                     "loss %.7f (ref %.7f, rel %.1e), grad rel %.1e, max |dg|/max|g| %.1e, "
                     "max |dw| %.1e",
                     r.loss, R->loss, dl, grel, dgmax / gmax, dwmax);
        } else if (me == 0) {
            snprintf(detail, sizeof detail, "%s", msg);
        }
        check(ok, what, detail);
        free(r.w);
        free(r.g);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    for (int i = 0; i < 3; i++) {
        free(ref[i].w);
        free(ref[i].g);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    static const sched_kind pipe_kinds[] = {SCHED_GPIPE, SCHED_1F1B,  SCHED_INTERLEAVED,
                                            SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_V};
    layout Ls[96];
    int nL = 0;
    /* no pipeline: tensor and data parallelism, sequence parallelism */
    static const int tpd[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 1, 2}, {1, 1, 4}, {2, 1, 2}};
    for (size_t i = 0; i < sizeof tpd / sizeof tpd[0]; i++) {
        Ls[nL++] = (layout){tpd[i][0], 1, tpd[i][2], false, SCHED_1F1B, 1, NULL, 1};
        if (tpd[i][0] > 1)
            Ls[nL++] = (layout){tpd[i][0], 1, tpd[i][2], true, SCHED_1F1B, 1, NULL, 1};
    }
    /* every schedule on p = 2 (alone, with t = 2, with t = 2 + sp, with d = 2) and p = 4 */
    for (size_t k = 0; k < sizeof pipe_kinds / sizeof pipe_kinds[0]; k++) {
        int v = pipe_kinds[k] == SCHED_INTERLEAVED || pipe_kinds[k] == SCHED_ZB_V ? 2 : 1;
        Ls[nL++] = (layout){1, 2, 1, false, pipe_kinds[k], v, NULL, 1};
        Ls[nL++] = (layout){2, 2, 1, false, pipe_kinds[k], v, NULL, 1};
        Ls[nL++] = (layout){2, 2, 1, true, pipe_kinds[k], v, NULL, 1};
        Ls[nL++] = (layout){1, 2, 2, false, pipe_kinds[k], v, NULL, 1};
        Ls[nL++] = (layout){1, 4, 1, false, pipe_kinds[k], v, NULL, 1};
    }
    /* uneven splits from layout strings: stages of 1-3 layers, a stage
     * with the embedding only, ZB-V's V placement, with t = 2 and d = 2 */
    Ls[nL++] = (layout){1, 2, 1, false, SCHED_INTERLEAVED, 2, "Et|t*3|t*3|tL", 1};
    Ls[nL++] = (layout){2, 2, 1, true, SCHED_INTERLEAVED, 2, "Et*3|t|t*3|tL", 1};
    Ls[nL++] = (layout){1, 2, 2, false, SCHED_INTERLEAVED, 2, "Et|(t*2|)*2t*3L", 1};
    Ls[nL++] = (layout){1, 4, 1, false, SCHED_1F1B, 1, "E|t*3|t*3|t*2L", 1};
    Ls[nL++] = (layout){1, 4, 1, false, SCHED_INTERLEAVED, 2, "E|(t|)*6t*2L", 1};
    Ls[nL++] = (layout){1, 2, 1, false, SCHED_ZB_V, 2, "Et*2|t*3|t*2|tL", 1};
    Ls[nL++] = (layout){1, 2, 1, false, SCHED_ZB_H2, 1, "Et*5|t*3L", 1};
    /* DualPipeV (V placement, F&B pairs run back to back): m = 4 = 2p at p = 2 */
    Ls[nL++] = (layout){1, 2, 1, false, SCHED_DUALPIPEV, 2, NULL, 1};
    Ls[nL++] = (layout){2, 2, 1, true, SCHED_DUALPIPEV, 2, NULL, 1};
    Ls[nL++] = (layout){1, 2, 2, false, SCHED_DUALPIPEV, 2, NULL, 1};

    DIMS = GPT_DIMS;
    run_pass(Ls, nL, "gpt");
    DIMS = LLAMA_DIMS;
    run_pass(Ls, nL, "llama");
    /* full recomputation: the layouts against the same references (no recomputation there) */
    DIMS = LLAMA_DIMS;
    DIMS.recompute = GPT_RC_UNIFORM;
    DIMS.recompute_layers = 2;
    run_pass(Ls, nL, "llama recompute uniform 2");
    DIMS = GPT_DIMS;
    DIMS.recompute = GPT_RC_BLOCK;
    DIMS.recompute_layers = 1;
    run_pass(Ls, nL, "gpt recompute block 1");
    /* the distributed optimizer (Adam sharded over d; the layouts with d = 1 run it unsharded) */
    DIMS = LLAMA_DIMS;
    DIMS.dist_optim = true;
    run_pass(Ls, nL, "llama distributed optimizer");
    DIMS = GPT_DIMS;
    DIMS.dist_optim = true;
    run_pass(Ls, nL, "gpt distributed optimizer");
    /* the output layer tied to the word embedding (Megatron's default): the first and last
     * stages' copies summed before Adam */
    DIMS = GPT_DIMS;
    DIMS.tie_embed = true;
    run_pass(Ls, nL, "gpt tied");
    DIMS = LLAMA_DIMS;
    DIMS.tie_embed = true;
    DIMS.recompute = GPT_RC_UNIFORM;
    DIMS.recompute_layers = 1;
    run_pass(Ls, nL, "llama tied recompute uniform 1");
    DIMS = LLAMA_DIMS;
    DIMS.recompute_attn = true;
    run_pass(Ls, nL, "llama recompute selective core_attn");
    /* flash attention: a few layouts without context parallelism, then every
     * context-parallel one on <= 4 ranks */
    const layout FL[] = {
        {1, 1, 1, false, SCHED_1F1B, 1, NULL, 1},        {2, 1, 1, true, SCHED_1F1B, 1, NULL, 1},
        {1, 2, 1, false, SCHED_ZB_V, 2, NULL, 1},        {1, 1, 1, false, SCHED_1F1B, 1, NULL, 2},
        {1, 1, 1, false, SCHED_1F1B, 1, NULL, 4},        {1, 1, 2, false, SCHED_1F1B, 1, NULL, 2},
        {1, 2, 1, false, SCHED_1F1B, 1, NULL, 2},        {1, 2, 1, false, SCHED_ZB_H1, 1, NULL, 2},
        {1, 2, 1, false, SCHED_INTERLEAVED, 2, NULL, 2}, {2, 1, 1, false, SCHED_1F1B, 1, NULL, 2},
        {2, 1, 1, true, SCHED_1F1B, 1, NULL, 2},
    };
    const int nFL = (int)(sizeof FL / sizeof FL[0]);
    DIMS = GPT_DIMS;
    DIMS.flash = true;
    run_pass(FL, nFL, "gpt flash");
    DIMS.recompute_attn = true;
    run_pass(FL, nFL, "gpt flash recompute selective core_attn");
    DIMS.recompute_attn = false;
    DIMS.recompute = GPT_RC_UNIFORM;
    DIMS.recompute_layers = 2;
    run_pass(FL, nFL, "gpt flash recompute uniform 2");
    DIMS = GPT_DIMS;
    DIMS.flash = true;
    DIMS.dist_optim = true;
    run_pass(FL, nFL, "gpt flash distributed optimizer");
    DIMS = LLAMA_DIMS;
    DIMS.flash = true;
    run_pass(FL, nFL, "llama flash");
    DIMS.rope = false;
    run_pass(FL, nFL, "llama learned positions flash");
    /* --qk-layernorm (the q and k heads normalised before rope; the norms' weight gradients
     * summed over the tensor ranks): RMSNorm on the Llama layers, LayerNorm on the GPT ones, under
     * tensor, sequence, pipeline (zero-bubble split backward), data and context parallelism and
     * recomputation, against references with the same norms */
    const layout QK[] = {
        {2, 1, 1, false, SCHED_1F1B, 1, NULL, 1},     {4, 1, 1, true, SCHED_1F1B, 1, NULL, 1},
        {2, 1, 2, true, SCHED_1F1B, 1, NULL, 1},      {2, 2, 1, true, SCHED_ZB_H2, 1, NULL, 1},
        {1, 2, 2, false, SCHED_ZB_V, 2, NULL, 1},     {1, 4, 1, false, SCHED_INTERLEAVED, 2, "E|(t|)*6t*2L", 1},
        {2, 2, 1, true, SCHED_DUALPIPEV, 2, NULL, 1},
    };
    const int nQK = (int)(sizeof QK / sizeof QK[0]);
    DIMS = LLAMA_DIMS;
    DIMS.qk_norm = true;
    run_pass(QK, nQK, "llama qk-norm");
    DIMS.recompute = GPT_RC_UNIFORM;
    DIMS.recompute_layers = 2;
    run_pass(QK, nQK, "llama qk-norm recompute uniform 2");
    DIMS = GPT_DIMS;
    DIMS.qk_norm = true;
    run_pass(QK, nQK, "gpt qk-norm");
    DIMS.recompute_attn = true;
    DIMS.dist_optim = true;
    run_pass(QK, nQK, "gpt qk-norm recompute selective core_attn distributed optimizer");
    DIMS = LLAMA_DIMS;
    DIMS.qk_norm = true;
    DIMS.flash = true;
    run_pass(FL, nFL, "llama qk-norm flash");
    if (world_rank == 0)
        printf("%d passed, %d failed\n", npass, nfail);
    MPI_Finalize();
    return 0;
}
