/* MPI test of the executor's MoE layer with expert parallelism: a few SGD
 * iterations of one MoE layer (exec/core/moe.h) on ep = 1, 2, 4 ranks give
 * the single-process run's losses and weights, dropless, with capacity
 * dropping, with forced balance, with a skewed router and with the
 * auxiliary load-balancing loss; then the per-rank expert token counts
 * and expert GEMM times of a skewed router against forced balance.
 *
 * mpirun-np: 4
 *
 * Setup: G = 4 token groups of n tokens (the global batch). The single
 * process runs the 4 groups as 4 accumulated micro-batches; ep ranks run
 * groups r, r + ep, ... (EP folded into data parallelism), exchange rows by
 * all-to-all and sum the router's gradient over the EP group. The capacity
 * applies per group in both (Megatron's is per local batch), so the routing
 * is the same function of the same weights.
 *
 * Tolerances (fp32): the layouts differ only in the order of sums (the
 * router gradient over micro-batches and ranks; the expert weight gradients
 * over the rows of different groups, which arrive in rank order), each
 * rounding at ~6e-8 relative, over <= 4 groups and 3 iterations; routing
 * decisions are discrete but the logits agree to rounding, far from the
 * ~1e-2 gaps of this data's top-k and capacity boundaries. Accepted: loss
 * within 1e-5 relative per iteration; weights within 1e-6 absolute (weights
 * ~0.2, SGD steps lr * |g| ~ 1e-2, so 1e-6 is 1e-4 of a step: a wrong
 * exchange or a missing gradient term moves weights by a whole step).
 * Measured maxima are printed.
 */
#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/backend.h"
#include "exec/core/moe.h"
#include "exec/cpu/backend_cpu.h"
#include "exec/moe_mpi.h"
#include "exec/watchdog.h"

#define G     4
#define ITERS 3
#define LR    0.1f

static int world_rank, world_size, npass, nfail;

static void check(int ok, const char *what)
{
    if (world_rank != 0)
        return;
    if (ok)
        npass++;
    else
        nfail++;
    printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
}

/* Deterministic data: x[:, 0] = 1 + noise (so a router column 0 can skew),
 * other features noise; targets noise. */
static float rnd(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}
static void make_data(float *x, float *tg, size_t rows, int C)
{
    unsigned s = 12345;
    for (size_t i = 0; i < rows * (size_t)C; i++) {
        x[i] = rnd(&s);
        tg[i] = 0.5f * rnd(&s);
    }
    for (size_t r = 0; r < rows; r++)
        x[r * (size_t)C] = 1.0f + 0.1f * x[r * (size_t)C];
}

typedef struct {
    int C, F, n;
    moe_route_cfg rc;
    float skew; /* added to router row 0, column 0 */
    double aux; /* auxiliary loss coefficient */
} setup;

typedef struct {
    double loss[ITERS];
    long dropped;        /* assignments lost to capacity, all ranks and iterations */
    float *wr, *w1, *w2; /* full layer (valid on comm rank 0) */
} result;

/* ITERS iterations on comm (size ep); the result gathered on its rank 0. */
/* keep (may be NULL): receives the layer and keep_be its backend (which
 * must outlive it), both then the caller's to free. */
static int run(const setup *S, MPI_Comm comm, const float *x, const float *tg, result *res, moe_layer **keep,
               backend **keep_be, char *msg, size_t msz)
{
    int ep, er;
    MPI_Comm_size(comm, &ep);
    MPI_Comm_rank(comm, &er);
    ts_err err;
    err_clear(&err);
    backend *be = NULL;
    moe_layer *L = NULL;
    moe_mpi_ctx ctx = {.comm = comm, .edp_comm = MPI_COMM_NULL};
    size_t nC = (size_t)S->n * (size_t)S->C;
    float *out = malloc(nC * sizeof(float)), *dout = malloc(nC * sizeof(float)), *dx = malloc(nC * sizeof(float));
    int rc = backend_cpu_create(1, &be, &err);
    moe_xchg xc = ep == 1 ? moe_xchg_local(be) : moe_mpi_xchg(&ctx);
    if (!rc)
        rc = moe_layer_create(&S->rc, S->C, S->F, false, ep, er, 7, be, &L, &err);
    if (!rc) {
        L->wr[0] += S->skew; /* the router is replicated: every rank */
        L->aux_coeff = S->aux;
    }
    double Nglob = (double)G * S->n;
    for (int it = 0; it < ITERS && !rc; it++) {
        double ls = 0.0;
        for (int g = er; g < G && !rc; g += ep) {
            moe_saved *sv = NULL;
            const float *xg = x + (size_t)g * nC, *tgg = tg + (size_t)g * nC;
            rc = moe_forward(L, &xc, xg, (size_t)S->n, out, &sv, &err);
            if (rc)
                break;
            for (size_t i = 0; i < nC; i++) {
                double d = (double)out[i] - tgg[i];
                ls += 0.5 * d * d / Nglob;
                dout[i] = (float)(d / Nglob);
            }
            res->dropped += (long)L->dropped;
            ls += L->aux_loss; /* per group, as Megatron's is per local batch */
            rc = moe_backward(L, &xc, sv, dout, dx, &err);
            moe_saved_free(sv);
        }
        if (rc)
            break;
        size_t nr = (size_t)S->rc.num_experts * (size_t)S->C;
        MPI_Allreduce(MPI_IN_PLACE, L->gwr, (int)nr, MPI_FLOAT, MPI_SUM, comm);
        MPI_Allreduce(MPI_IN_PLACE, &ls, 1, MPI_DOUBLE, MPI_SUM, comm);
        if (it == ITERS - 1)
            MPI_Allreduce(MPI_IN_PLACE, &res->dropped, 1, MPI_LONG, MPI_SUM, comm);
        res->loss[it] = ls;
        if ((rc = moe_layer_sgd(L, LR, &err)))
            break;
    }
    if (rc)
        snprintf(msg, msz, "%s", err.msg);
    else if (res->w1) {
        size_t ne = (size_t)L->El * (size_t)S->F * (size_t)S->C;
        memcpy(res->wr, L->wr, (size_t)S->rc.num_experts * (size_t)S->C * sizeof(float));
        MPI_Gather(L->w1, (int)ne, MPI_FLOAT, er == 0 ? res->w1 : NULL, (int)ne, MPI_FLOAT, 0, comm);
        MPI_Gather(L->w2, (int)ne, MPI_FLOAT, er == 0 ? res->w2 : NULL, (int)ne, MPI_FLOAT, 0, comm);
    }
    free(out);
    free(dout);
    free(dx);
    if (keep && !rc) {
        *keep = L;
        *keep_be = be;
        return rc;
    }
    moe_layer_free(L);
    if (be)
        be->destroy(be);
    return rc;
}

static int alloc_result(const setup *S, result *r)
{
    size_t E = (size_t)S->rc.num_experts, ne = E * (size_t)S->F * (size_t)S->C;
    r->wr = calloc(E * (size_t)S->C, sizeof(float));
    r->w1 = calloc(ne, sizeof(float));
    r->w2 = calloc(ne, sizeof(float));
    return r->wr && r->w1 && r->w2 ? 0 : -1;
}
static void free_result(result *r)
{
    free(r->wr);
    free(r->w1);
    free(r->w2);
}
static double maxdiff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void exactness(const char *name, const setup *S, const float *x, const float *tg)
{
    result ref = {0};
    char msg[1024] = "";
    int rc = 0;
    if (alloc_result(S, &ref))
        rc = -1;
    if (!rc && world_rank == 0)
        rc = run(S, MPI_COMM_SELF, x, tg, &ref, NULL, NULL, msg, sizeof msg);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc) {
        char w[1200];
        snprintf(w, sizeof w, "%s: single-process reference ran (%s)", name, msg);
        check(0, w);
        free_result(&ref);
        return;
    }
    size_t E = (size_t)S->rc.num_experts, ne = E * (size_t)S->F * (size_t)S->C;
    for (int ep = 1; ep <= world_size && ep <= 4; ep *= 2) {
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < ep ? 0 : MPI_UNDEFINED, world_rank, &sub);
        result r = {0};
        int lrc = 0;
        if (sub != MPI_COMM_NULL) {
            lrc = alloc_result(S, &r);
            if (!lrc)
                lrc = run(S, sub, x, tg, &r, NULL, NULL, msg, sizeof msg);
            MPI_Comm_free(&sub);
        }
        int anybad;
        MPI_Allreduce(&lrc, &anybad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        char w[1400];
        if (world_rank == 0) {
            if (anybad || lrc || !r.wr || !r.w1 || !r.w2 || !ref.wr || !ref.w1 || !ref.w2) {
                snprintf(w, sizeof w, "%s ep=%d ran (%s)", name, ep, msg);
                check(0, w);
            } else {
                double dl = 0.0;
                for (int i = 0; i < ITERS; i++)
                    dl = fmax(dl, fabs(r.loss[i] - ref.loss[i]) / fabs(ref.loss[i]));
                double dw = fmax(maxdiff(r.wr, ref.wr, E * (size_t)S->C),
                                 fmax(maxdiff(r.w1, ref.w1, ne), maxdiff(r.w2, ref.w2, ne)));
                snprintf(w, sizeof w,
                         "%s ep=%d: losses %.6f %.6f %.6f, max rel loss diff %.2e, max weight diff %.2e, %ld dropped "
                         "(reference %ld)",
                         name, ep, r.loss[0], r.loss[1], r.loss[2], dl, dw, r.dropped, ref.dropped);
                bool drops = S->rc.capacity_factor > 0.0;
                check(dl <= 1e-5 && dw <= 1e-6 && r.dropped == ref.dropped && (r.dropped > 0) == drops, w);
            }
        }
        free_result(&r);
    }
    free_result(&ref);
}

/* Skewed router vs forced balance on ep = world ranks: token counts (exact)
 * and expert GEMM times (printed, not asserted). */
static void imbalance(const float *x, const float *tg, const setup *S0)
{
    int ep = world_size;
    for (int force = 0; force <= 1; force++) {
        setup S = *S0;
        S.rc.force_balance = force;
        moe_layer *L = NULL;
        backend *be = NULL;
        result r = {0};
        char msg[1024] = "";
        int rc = run(&S, MPI_COMM_WORLD, x, tg, &r, &L, &be, msg, sizeof msg);
        int tok = 0, all[64];
        double t = 0.0, ts[64];
        if (!rc) {
            for (int e = 0; e < L->El; e++)
                tok += L->tok_per_expert[e];
            t = L->expert_gemm_s;
        }
        MPI_Gather(&tok, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Gather(&t, 1, MPI_DOUBLE, ts, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        int anybad;
        MPI_Allreduce(&rc, &anybad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (world_rank == 0) {
            int balanced = S.n * S.rc.topk, mx = 0, sum = 0; /* per rank: ep*n*k/E * El = n*k */
            printf("router skew %.1f, --moe-router-force-load-balancing %s, ep %d, %d tokens/rank, top-%d of %d:\n",
                   S.skew, force ? "on" : "off", ep, S.n, S.rc.topk, S.rc.num_experts);
            for (int i = 0; i < ep; i++) {
                printf("  rank %d: %6d expert rows (balanced %d), expert GEMMs %.3f ms (fwd+bwd, sum over %d "
                       "iterations x %d groups)\n",
                       i, all[i], balanced, ts[i] * 1e3, ITERS, G / ep);
                mx = all[i] > mx ? all[i] : mx;
                sum += all[i];
            }
            char w[256];
            snprintf(w, sizeof w, "force %s: rows conserved (%d = %d) and %s (busiest %d vs %d)", force ? "on" : "off",
                     sum, ep * balanced, force ? "exactly balanced" : "skewed", mx, balanced);
            check(!anybad && sum == ep * balanced && (force ? mx == balanced : mx > balanced + balanced / 2), w);
        }
        moe_layer_free(L);
        if (be)
            be->destroy(be);
        free_result(&r);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    wd_start(world_rank, 120.0);
    setup S = {.C = 16, .F = 24, .n = 16, .rc = {.num_experts = 8, .topk = 2, .capacity_factor = 0.0}};
    size_t rows = (size_t)G * 512, cols = 128;
    float *x = malloc(rows * cols * sizeof(float)), *tg = malloc(rows * cols * sizeof(float));
    make_data(x, tg, (size_t)G * S.n, S.C);
    exactness("dropless", &S, x, tg);
    S.rc.capacity_factor = 1.0;
    exactness("capacity 1.0", &S, x, tg);
    S.rc.capacity_factor = 0.0;
    S.rc.force_balance = true;
    exactness("forced balance", &S, x, tg);
    S.rc.force_balance = false;
    S.skew = 2.0f;
    exactness("skewed router", &S, x, tg);
    S.aux = 0.01;
    exactness("skewed router + aux loss 0.01", &S, x, tg);
    S.aux = 0.0;

    setup B = {.C = 128, .F = 256, .n = 512, .rc = {.num_experts = 8, .topk = 2, .capacity_factor = 0.0}, .skew = 4.0f};
    make_data(x, tg, rows, B.C);
    if (world_size <= 64)
        imbalance(x, tg, &B);
    free(x);
    free(tg);
    if (world_rank == 0)
        printf("%d passed, %d failed\n", npass, nfail);
    wd_stop();
    MPI_Finalize();
    return nfail ? 1 : 0;
}
