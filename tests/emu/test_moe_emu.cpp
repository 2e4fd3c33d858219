/* Host-emulation test of the CUDA MoE routing and dispatch kernels
 * (kernels/moe.cu compiled as host C++ against tests/emu/kernels/common.cuh:
 * every launch's threads run on the CPU). Twins, the CPU backend's MoE
 * ops called as they are: exec/core/moe_route.c's moe_route (top-k,
 * weights, capacity dropping, counts) and moe_route_send_order, and
 * exec/cpu/kern_moe.c's row permutes, combine, combine backward and router
 * backward.
 *
 * Cases: N tokens in {1, 13, 64}, (E, k) in {(1, 1), (4, 1), (4, 2), (8, 2),
 * (8, 8)}, capacity factor in {none, 0.5, 1, 1.25}, force balance on/off,
 * logits continuous or on a 0.5 grid in [-1, 1] (ties in the top-k choice
 * and, through equal weights, in the capacity ranking). Then 8 larger
 * routings (N k from 6000 to 16384 assignments, E 8 to 256, k 2 to 8,
 * capacity none or 0.5 to 1.25, most on the 0.5 grid, where most of a token's
 * k weights tie): the capacity and send-order sorts run over several blocks
 * of tiles, partial last tiles and runs, and drop thousands of assignments.
 * The test also requires that assignments were dropped and ties met, in
 * the small and in the large cases, so that the drop and tie paths were
 * exercised. The capacity kernel runs apart and in place (wkept = wts),
 * both checked.
 *
 * Tolerances: indices, keep flags, counts and send order exact; the float
 * results are computed by the same operations in the same order as the
 * twin, here with the same libm: TOL_SAME 0 (bit-identical). On a GPU the
 * device expf/exp may differ from glibc's by an ulp or two: the GPU test
 * uses 1e-6 there. A wrong index, order or weight gives O(1e-1). */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuk.h"

extern "C" {
#include "exec/core/moe_route.h"
#include "exec/cpu/kern_moe.h"
}

#define TOL_SAME 0.0

typedef std::vector<float> vec;
typedef std::vector<int> ivec;
typedef std::vector<int> lvec;

static int passes, fails;

struct tally {
    const char *what;
    int cases, bad;
    double worst;
};

static void acc(tally &t, double worst, bool ok, const char *ctx)
{
    t.cases++;
    t.worst = std::fmax(t.worst, worst);
    if (!ok) {
        t.bad++;
        std::printf("FAIL %s (%s): worst %.3g\n", t.what, ctx, worst);
    }
}

static double diff(const vec &a, const vec &b)
{
    if (a.size() != b.size())
        return INFINITY;
    double w = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = std::fabs((double)a[i] - b[i]);
        w = std::isnan(d) ? INFINITY : std::fmax(w, d);
    }
    return w;
}

template <typename T> static bool same(const std::vector<T> &a, const std::vector<T> &b)
{
    return a == b;
}

static vec rnd(size_t n, unsigned s, float scale, bool grid)
{
    vec v(n);
    for (auto &x : v) {
        s = s * 1664525u + 1013904223u;
        x = scale * ((float)((s >> 8) & 0xffff) / 32768.0f - 1.0f);
        if (grid)
            x = std::round(x * 2.0f) / 2.0f;
    }
    return v;
}

enum { T_TOPK, T_KEEP, T_WTS, T_COUNTS, T_ORDER, T_GATHER, T_SCATTER, T_COMB, T_DX, T_CBWD_DY, T_CBWD_G, T_RBWD, T_N };
static tally tallies[T_N] = {
    {"topk experts (exact)", 0, 0, 0},     {"capacity keep (exact)", 0, 0, 0},   {"routing weights", 0, 0, 0},
    {"counts (exact)", 0, 0, 0},           {"send order (exact)", 0, 0, 0},      {"gather by send slot", 0, 0, 0},
    {"scatter", 0, 0, 0},                  {"combine (weighted)", 0, 0, 0},      {"combine unweighted (dx)", 0, 0, 0},
    {"combine backward dy", 0, 0, 0},      {"combine backward g", 0, 0, 0},      {"router backward", 0, 0, 0},
};
static size_t total_dropped, total_ties;

static void one_case(size_t N, int E, int k, double cf, bool fb, bool grid, int C = 5)
{
    char ctx[96];
    std::snprintf(ctx, sizeof ctx, "N %zu E %d k %d cf %g%s%s", N, E, k, cf, fb ? " balance" : "",
                  grid ? " ties" : "");
    size_t nk = N * (size_t)k;
    moe_route_cfg rc = {E, k, cf, fb};
    vec logits = rnd(N * (size_t)E, 7 + (unsigned)(N * 31 + E * 7 + k), 1.0f, grid);

    /* twin: moe_route */
    ivec ridx(nk), rkeep(nk), rcounts(E);
    vec rwts(nk);
    std::vector<int> order(nk);
    size_t dropped = 0;
    moe_route(&rc, logits.data(), N, ridx.data(), rwts.data(), rkeep.data(), rcounts.data(), &dropped, order.data());
    total_dropped += dropped;

    /* kernels */
    ivec idx(nk), keep(nk), counts(E);
    vec wts(nk), wkept(nk);
    cuk_f32_moe_topk(idx.data(), wts.data(), logits.data(), N, E, k, fb, 0);
    for (size_t a = 0; a < nk; a++)
        for (size_t b = a + 1; b < nk && b < a + (size_t)k * 4; b++)
            total_ties += idx[a] == idx[b] && wts[a] == wts[b];
    std::vector<char> scratch(cuk_moe_scratch_bytes(nk));
    ivec keep2(nk);
    vec w2 = wts; /* in place: wkept = wts */
    cuk_f32_moe_capacity(keep.data(), wkept.data(), idx.data(), wts.data(), nk, moe_route_capacity(&rc, N),
                         scratch.data(), 0);
    cuk_f32_moe_capacity(keep2.data(), w2.data(), idx.data(), w2.data(), nk, moe_route_capacity(&rc, N), scratch.data(),
                         0);
    cuk_moe_counts(counts.data(), idx.data(), keep.data(), nk, E, 0);
    acc(tallies[T_TOPK], 0, same(idx, ridx), ctx);
    acc(tallies[T_KEEP], 0, same(keep, rkeep) && same(keep2, rkeep), ctx);
    double w = std::fmax(diff(wkept, rwts), diff(w2, rwts));
    acc(tallies[T_WTS], w, w <= TOL_SAME, ctx);
    acc(tallies[T_COUNTS], 0, same(counts, rcounts), ctx);

    /* twin: the send order (send slots by expert, then slot) */
    lvec rslot(nk), rpos(nk);
    moe_route_send_order(ridx.data(), rkeep.data(), nk, E, rslot.data(), rpos.data());
    size_t nsend = (size_t)std::count(rkeep.begin(), rkeep.end(), 1);
    rslot.resize(nsend);
    lvec slot(nsend, -7), pos(nk, -7);
    cuk_moe_send_order(slot.data(), pos.data(), ridx.data(), rkeep.data(), nk, scratch.data(), 0);
    bool ok = same(slot, rslot);
    for (size_t i = 0; i < nk; i++)
        ok = ok && (rkeep[i] ? pos[i] >= 0 && rslot[(size_t)pos[i]] == (int)i : pos[i] == -1);
    acc(tallies[T_ORDER], 0, ok, ctx);

    /* permute: the layer's send rows (x of the slot's token), and a scatter
     * by a permutation (its expert-order scatter back) */
    vec x = rnd(N * C, 3 + (unsigned)N, 1.0f, false), sb(nsend * C), rsb(nsend * C);
    kern_moe_gather(rsb.data(), x.data(), rslot.data(), nsend, k, C);
    cuk_f32_moe_gather(sb.data(), x.data(), rslot.data(), nsend, k, C, 0);
    w = diff(sb, rsb);
    acc(tallies[T_GATHER], w, w <= TOL_SAME, ctx);
    lvec perm(nsend);
    for (size_t p = 0; p < nsend; p++)
        perm[p] = (int)((p * 7 + 3) % (nsend ? nsend : 1));
    bool is_perm = nsend % 7 != 0;
    if (is_perm) {
        vec sc(nsend * C, -1.0f), rsc(nsend * C, -2.0f);
        kern_moe_scatter(rsc.data(), rsb.data(), perm.data(), nsend, C);
        cuk_f32_moe_scatter(sc.data(), rsb.data(), perm.data(), nsend, C, 0);
        w = diff(sc, rsc);
        acc(tallies[T_SCATTER], w, w <= TOL_SAME, ctx);
    }

    /* combine: out[t] = sum of w y over t's kept slots; dx the same with weight 1 */
    vec y = rnd(nsend * C, 5 + (unsigned)nk, 1.0f, false), out(N * C, 9.0f), rout(N * C, 8.0f), dx(N * C, 9.0f),
        rdx(N * C, 8.0f);
    kern_moe_combine(rout.data(), y.data(), rwts.data(), ridx.data(), rpos.data(), N, k, C);
    kern_moe_combine(rdx.data(), y.data(), nullptr, ridx.data(), rpos.data(), N, k, C);
    cuk_f32_moe_combine(out.data(), y.data(), rwts.data(), ridx.data(), pos.data(), N, k, C, 0);
    cuk_f32_moe_combine(dx.data(), y.data(), nullptr, ridx.data(), pos.data(), N, k, C, 0);
    w = diff(out, rout);
    acc(tallies[T_COMB], w, w <= TOL_SAME, ctx);
    w = diff(dx, rdx);
    acc(tallies[T_DX], w, w <= TOL_SAME, ctx);

    /* combine backward: g = dout . y, dy = w dout */
    vec dout = rnd(N * C, 9 + (unsigned)N, 1.0f, false), dy(nsend * C), rdy(nsend * C), g(nk, 0.0f), rg(nk, 0.0f);
    kern_moe_combine_bwd(rdy.data(), rg.data(), dout.data(), y.data(), rwts.data(), rslot.data(), nsend, k, C);
    cuk_f32_moe_combine_bwd(dy.data(), g.data(), dout.data(), y.data(), rwts.data(), rslot.data(), nsend, k, C, 0);
    w = diff(dy, rdy);
    acc(tallies[T_CBWD_DY], w, w <= TOL_SAME, ctx);
    w = diff(g, rg);
    acc(tallies[T_CBWD_G], w, w <= TOL_SAME, ctx);

    /* router backward (w_j = keep_j softmax_j) */
    vec dlog(N * E, 5.0f), rdlog(N * E, 4.0f);
    kern_moe_router_bwd(rdlog.data(), logits.data(), ridx.data(), rkeep.data(), rg.data(), N, E, k);
    cuk_f32_moe_router_bwd(dlog.data(), logits.data(), ridx.data(), rkeep.data(), rg.data(), N, E, k, 0);
    w = diff(dlog, rdlog);
    acc(tallies[T_RBWD], w, w <= TOL_SAME, ctx);
}

int main(void)
{
    const int ek[][2] = {{1, 1}, {4, 1}, {4, 2}, {8, 2}, {8, 8}};
    for (size_t N : {1, 13, 64})
        for (const auto &p : ek)
            for (double cf : {0.0, 0.5, 1.0, 1.25})
                for (bool fb : {false, true})
                    for (bool grid : {false, true})
                        one_case(N, p[0], p[1], cf, fb, grid);
    size_t small_dropped = total_dropped, small_ties = total_ties;
    const struct {
        size_t N;
        int E, k;
        double cf;
        bool fb, grid;
    } big[] = {{2048, 64, 8, 1.0, false, true},   {2048, 256, 8, 0.5, false, true}, {1000, 64, 6, 1.25, false, false},
               {4096, 8, 2, 0.75, false, true},   {3001, 256, 2, 1.0, false, true}, {2048, 64, 8, 0.5, true, false},
               {1999, 16, 4, 1.0, false, false}, {2048, 64, 8, 0.0, false, true}};
    for (const auto &b : big)
        one_case(b.N, b.E, b.k, b.cf, b.fb, b.grid, 2);
    size_t big_dropped = total_dropped - small_dropped, big_ties = total_ties - small_ties;
    for (const tally &t : tallies) {
        bool ok = t.bad == 0 && t.cases > 0;
        ok ? passes++ : fails++;
        std::printf("%s %s: %d cases, %d wrong, worst %.3g (limit %.0e)\n", ok ? "PASS" : "FAIL", t.what, t.cases,
                    t.bad, t.worst, TOL_SAME);
    }
    bool exercised = small_dropped > 0 && small_ties > 0 && big_dropped > 1000 && big_ties > 1000;
    exercised ? passes++ : fails++;
    std::printf("%s capacity drops and ties exercised: %zu and %zu assignments dropped, %zu and %zu equal-weight "
                "pairs (small cases, large cases)\n",
                exercised ? "PASS" : "FAIL", small_dropped, big_dropped, small_ties, big_ties);
    /* arguments out of range launch nothing */
    ivec id(4);
    vec wv(4), lg(8);
    bool bad = cuk_f32_moe_topk(id.data(), wv.data(), lg.data(), 1, 2, 3, false, 0) == cudaErrorInvalidValue &&
               cuk_f32_moe_router_bwd(wv.data(), lg.data(), id.data(), id.data(), wv.data(), 1, 2, 0, 0) ==
                   cudaErrorInvalidValue &&
               cuk_f32_moe_capacity(id.data(), wv.data(), id.data(), wv.data(), 4, 1, nullptr, 0) ==
                   cudaErrorInvalidValue &&
               cuk_moe_send_order(id.data(), id.data(), id.data(), id.data(), 4, nullptr, 0) == cudaErrorInvalidValue;
    bad ? passes++ : fails++;
    std::printf("%s top-3 of 2 experts, top-0 and sorts without scratch refused\n", bad ? "PASS" : "FAIL");
    std::printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}
