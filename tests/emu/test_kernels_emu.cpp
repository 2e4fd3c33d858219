/* Host-emulation test of the CUDA backend's fp32 Llama and flash kernels
 * (kernels/llama.cu, kernels/flash.cu compiled as host C++ against
 * tests/emu/kernels/common.cuh: every launch's threads run on the CPU, a
 * warp reduction's lanes as threads). It runs where no GPU is, and checks
 * the kernel bodies' index arithmetic, masks, bounds and reductions against
 * the CPU twins; tests/gpu/test_backend_cuda_llama checks the same on a GPU
 * through the backend.
 *
 * Tolerances (max |got - want|, the values O(1)):
 *   swiglu, rope, the grouped-query split/merge and flash attention: the
 *     same operations in the same order per thread as the twin: 1e-6
 *     (measured 0 to 5e-7);
 *   RMSNorm: the 32 lanes' partial sums added in lane order against one
 *     sequential sum: 1e-5 (measured <= 4e-7);
 *   q/k norm (LayerNorm and RMSNorm, all three ops): one thread per head or
 *     per weight element doing the twin's loops in its order, so the same
 *     roundings: 0 (bit-identical; on a GPU, where products may fuse into
 *     FMAs, test_backend_cuda_llama allows 1e-5);
 *   ring (cp = 2, 3) against the whole sequence on one rank: sums in
 *     another order across the ring steps: 1e-5.
 * A wrong index, mask or missing rescale gives O(1e-1). */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuk.h"

extern "C" {
#include "exec/core/cp_attn.h"
#include "exec/core/cp_split.h"
#include "exec/cpu/kern.h"
#include "exec/cpu/kern_llama.h"
}

typedef std::vector<float> vec;

static int passes, fails;

static vec rnd(size_t n, unsigned s, float scale)
{
    vec v(n);
    for (auto &x : v) {
        s = s * 1664525u + 1013904223u;
        x = scale * ((float)((s >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return v;
}

static void check(const char *what, const vec &got, const vec &want, double tol)
{
    double worst = 0.0, big = 0.0;
    bool ok = got.size() == want.size();
    for (size_t i = 0; ok && i < got.size(); i++) {
        double d = std::fabs((double)got[i] - want[i]);
        worst = std::isnan(d) ? INFINITY : std::fmax(worst, d);
        big = std::fmax(big, std::fabs((double)want[i]));
    }
    ok = ok && worst <= tol;
    ok ? passes++ : fails++;
    std::printf("%s %s: worst %.3g (limit %.0e, max |want| %.3g, n %zu)\n", ok ? "PASS" : "FAIL", what, worst, tol, big,
                want.size());
}

static void test_rmsnorm_swiglu(void)
{
    char what[96];
    for (int N : {1, 7, 37})
        for (int C : {1, 31, 70, 300}) {
            vec x = rnd((size_t)N * C, 11 + C, 2.0f), w = rnd(C, 12, 1.0f), dy = rnd((size_t)N * C, 13, 1.0f);
            vec y1(x.size()), y2(x.size()), r1(N), r2(N), dx1 = rnd(x.size(), 14, 0.1f), dx2 = dx1;
            vec dw1 = rnd(C, 15, 0.1f), dw2 = dw1;
            kern_rmsnorm_fwd(y1.data(), r1.data(), x.data(), w.data(), N, C);
            cuk_f32_rmsnorm_fwd(y2.data(), r2.data(), x.data(), w.data(), N, C, 0);
            std::snprintf(what, sizeof what, "rmsnorm_fwd N %d C %d", N, C);
            check(what, y2, y1, 1e-5);
            std::snprintf(what, sizeof what, "rmsnorm_fwd rstd N %d C %d", N, C);
            check(what, r2, r1, 1e-5);
            kern_rmsnorm_bwd_input(dx1.data(), dy.data(), x.data(), w.data(), r1.data(), N, C);
            cuk_f32_rmsnorm_bwd_input(dx2.data(), dy.data(), x.data(), w.data(), r1.data(), N, C, 0);
            std::snprintf(what, sizeof what, "rmsnorm_bwd_input (+=) N %d C %d", N, C);
            check(what, dx2, dx1, 1e-5);
            kern_rmsnorm_bwd_weight(dw1.data(), dy.data(), x.data(), r1.data(), N, C);
            cuk_f32_rmsnorm_bwd_weight(dw2.data(), dy.data(), x.data(), r1.data(), N, C, 0);
            std::snprintf(what, sizeof what, "rmsnorm_bwd_weight (+=) N %d C %d", N, C);
            check(what, dw2, dw1, 1e-5);
        }
    int N = 37, F = 45;
    vec g = rnd((size_t)2 * N * F, 1, 3.0f), dy = rnd((size_t)N * F, 2, 1.0f);
    vec o1((size_t)N * F), o2((size_t)N * F), d1 = rnd(g.size(), 3, 0.1f), d2 = d1;
    kern_swiglu_fwd(o1.data(), g.data(), N, F);
    cuk_f32_swiglu_fwd(o2.data(), g.data(), N, F, 0);
    check("swiglu_fwd", o2, o1, 1e-6);
    kern_swiglu_bwd(d1.data(), g.data(), dy.data(), N, F);
    cuk_f32_swiglu_bwd(d2.data(), g.data(), dy.data(), N, F, 0);
    check("swiglu_bwd (+=)", d2, d1, 1e-6);
}

/* kern_qknorm_* against cuk_f32_qknorm_*: the forward in place on qkv (v
 * untouched) with its saved xin, mean and rstd, the weight gradients
 * accumulated onto nonzero values, the input gradient in place on dqkv. */
static void test_qknorm(size_t N, int NH, int NKV, int hs, bool rms)
{
    size_t heads = (size_t)NH + NKV, W = (heads + NKV) * hs, nh = N * heads;
    unsigned sd = (unsigned)(N * 131 + NH * 17 + NKV * 5 + hs + rms);
    vec qkv = rnd(N * W, sd, 2.0f), a = qkv, b = qkv;
    vec qw = rnd(hs, sd + 1, 1.0f), qb = rnd(hs, sd + 2, 0.5f), kw = rnd(hs, sd + 3, 1.0f), kb = rnd(hs, sd + 4, 0.5f);
    vec xa(nh * hs), xb(nh * hs), ma(nh), mb(nh), ra(nh), rb(nh);
    float *ma_ = rms ? nullptr : ma.data(), *mb_ = rms ? nullptr : mb.data();
    kern_qknorm_fwd(a.data(), xa.data(), ma_, ra.data(), qw.data(), qb.data(), kw.data(), kb.data(), N, NH, NKV, hs);
    cudaError_t st = cuk_f32_qknorm_fwd(b.data(), xb.data(), mb_, rb.data(), qw.data(), qb.data(), kw.data(),
                                        kb.data(), N, NH, NKV, hs, 0);
    char what[192], tag[80];
    std::snprintf(tag, sizeof tag, "%s N %zu NH %d NKV %d hs %d", rms ? "RMSNorm" : "LayerNorm", N, NH, NKV, hs);
    std::snprintf(what, sizeof what, "qknorm_fwd qkv, %s", tag);
    check(what, st == cudaSuccess ? b : vec(), a, 0.0);
    std::snprintf(what, sizeof what, "qknorm_fwd xin (q, k before the norm), %s", tag);
    check(what, xb, xa, 0.0);
    std::snprintf(what, sizeof what, "qknorm_fwd xin = the input's q, k, %s", tag);
    vec qk(nh * hs);
    for (size_t n = 0; n < N; n++)
        std::memcpy(&qk[n * heads * hs], &qkv[n * W], heads * hs * sizeof(float));
    check(what, xb, qk, 0.0);
    std::snprintf(what, sizeof what, "qknorm_fwd rstd, %s", tag);
    check(what, rb, ra, 0.0);
    if (!rms) {
        std::snprintf(what, sizeof what, "qknorm_fwd mean, %s", tag);
        check(what, mb, ma, 0.0);
    }
    vec dy = rnd(N * W, sd + 5, 1.0f), da = dy, db = dy;
    vec gqw = rnd(hs, sd + 6, 0.1f), gqb = rnd(hs, sd + 7, 0.1f), gkw = rnd(hs, sd + 8, 0.1f), gkb = rnd(hs, sd + 9, 0.1f);
    vec gqw2 = gqw, gqb2 = gqb, gkw2 = gkw, gkb2 = gkb;
    kern_qknorm_bwd_weight(gqw.data(), rms ? nullptr : gqb.data(), gkw.data(), rms ? nullptr : gkb.data(), dy.data(),
                           xa.data(), ma_, ra.data(), N, NH, NKV, hs);
    st = cuk_f32_qknorm_bwd_weight(gqw2.data(), rms ? nullptr : gqb2.data(), gkw2.data(), rms ? nullptr : gkb2.data(),
                                   dy.data(), xa.data(), ma_, ra.data(), N, NH, NKV, hs, 0);
    std::snprintf(what, sizeof what, "qknorm_bwd_weight dqw (+=), %s", tag);
    check(what, st == cudaSuccess ? gqw2 : vec(), gqw, 0.0);
    std::snprintf(what, sizeof what, "qknorm_bwd_weight dkw (+=), %s", tag);
    check(what, gkw2, gkw, 0.0);
    std::snprintf(what, sizeof what, "qknorm_bwd_weight dqb, dkb (+=; RMSNorm: untouched), %s", tag);
    vec bb = gqb2, ba = gqb;
    bb.insert(bb.end(), gkb2.begin(), gkb2.end());
    ba.insert(ba.end(), gkb.begin(), gkb.end());
    check(what, bb, ba, 0.0);
    kern_qknorm_bwd_input(da.data(), xa.data(), ma_, ra.data(), qw.data(), kw.data(), N, NH, NKV, hs);
    st = cuk_f32_qknorm_bwd_input(db.data(), xa.data(), ma_, ra.data(), qw.data(), kw.data(), N, NH, NKV, hs, 0);
    std::snprintf(what, sizeof what, "qknorm_bwd_input dqkv (in place), %s", tag);
    check(what, st == cudaSuccess ? db : vec(), da, 0.0);
}

static void test_rope(void)
{
    int N = 37, T = 13, NH = 4, NKV = 2, hs = 8, W = (NH + 2 * NKV) * hs;
    vec x = rnd((size_t)N * W, 7, 1.0f), a = x, b = x;
    kern_rope_fwd(a.data(), N, T, NH, NKV, hs, 10000.0f);
    cuk_f32_rope(b.data(), N, T, 0, NH, NKV, hs, 10000.0f, 1.0f, 0);
    check("rope_fwd (positions n % T)", b, a, 1e-6);
    kern_rope_bwd(a.data(), N, T, NH, NKV, hs, 10000.0f);
    cuk_f32_rope(b.data(), N, T, 0, NH, NKV, hs, 10000.0f, -1.0f, 0);
    check("rope_bwd", b, a, 1e-6);
    check("rope_bwd(rope_fwd(x)) = x", b, x, 1e-5);
    kern_rope_at_fwd(a.data(), N, 1000, NH, NKV, hs, 500000.0f);
    cuk_f32_rope(b.data(), N, 0, 1000, NH, NKV, hs, 500000.0f, 1.0f, 0);
    check("rope_at_fwd (positions 1000 + n, base 5e5)", b, a, 1e-6);
    kern_rope_at_bwd(a.data(), N, 7, NH, NKV, hs, 10000.0f);
    cuk_f32_rope(b.data(), N, 0, 7, NH, NKV, hs, 10000.0f, -1.0f, 0);
    check("rope_at_bwd (positions 7 + n)", b, a, 1e-6);
}

/* The backend's grouped-query path: split (k, v copied per query head),
 * multi-head attention on the copies (kern_attention_*, the CPU's), merge
 * (k, v gradients summed per group) = kern_attention_gqa_*. */
static void test_gqa_layout(int NKV)
{
    int B = 2, T = 13, NH = 4, hs = 8, C = NH * hs, W = (NH + 2 * NKV) * hs;
    size_t per = (size_t)B * NH * T * hs, na = (size_t)B * NH * T * T;
    vec qkv = rnd((size_t)B * T * W, 8 + NKV, 1.0f), dout = rnd((size_t)B * T * C, 9, 1.0f);
    vec q(per), k(per), v(per), mha((size_t)B * T * 3 * C), o1((size_t)B * T * C), o2(o1.size()), att(na), datt(na);
    cuk_f32_qkv_split_gqa(q.data(), k.data(), v.data(), qkv.data(), B, T, NH, NKV, hs, 0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    size_t s = (((size_t)b * NH + h) * T + t) * hs + d, r = ((size_t)b * T + t) * 3 * C + h * hs + d;
                    mha[r] = q[s], mha[r + C] = k[s], mha[r + 2 * C] = v[s];
                }
    kern_attention_fwd(o2.data(), att.data(), mha.data(), B, T, NH, hs);
    vec dm(mha.size(), 0.0f), dq(per), dk(per), dv(per), g1 = rnd(qkv.size(), 10, 0.1f), g2 = g1;
    kern_attention_bwd(dm.data(), datt.data(), dout.data(), mha.data(), att.data(), B, T, NH, hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    size_t s = (((size_t)b * NH + h) * T + t) * hs + d, r = ((size_t)b * T + t) * 3 * C + h * hs + d;
                    dq[s] = dm[r], dk[s] = dm[r + C], dv[s] = dm[r + 2 * C];
                }
    cuk_f32_qkv_merge_gqa_acc(g2.data(), dq.data(), dk.data(), dv.data(), B, T, NH, NKV, hs, 0);
    kern_attention_gqa_fwd(o1.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
    kern_attention_gqa_bwd(g1.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NKV, hs);
    char what[96];
    std::snprintf(what, sizeof what, "qkv_split_gqa then multi-head = gqa forward (%d groups)", NKV);
    check(what, o2, o1, 1e-5);
    std::snprintf(what, sizeof what, "multi-head backward then qkv_merge_gqa_acc = gqa backward (%d groups)", NKV);
    check(what, g2, g1, 1e-5);
}

/* Flash attention over a ring of cp ranks, run in lock step (cp = 1: one
 * rank, qkv in place), against cp_attn on the whole sequence. */
static void test_flash(int cp, int NKV)
{
    int B = 2, T = cp == 1 ? 13 : 12, NH = 4, hs = 8, C = NH * hs, W = (NH + 2 * NKV) * hs, Tl = T / cp;
    size_t rows = (size_t)B * Tl, KV = (size_t)NKV * hs;
    vec qkv = rnd((size_t)B * T * W, 20 + cp + NKV, 1.0f), dout = rnd((size_t)B * T * C, 21, 1.0f);
    vec ro((size_t)B * T * C), rl((size_t)B * NH * T), g0 = rnd(qkv.size(), 22, 0.1f), rg = g0;
    cp_ring one = {1, 0, NULL, NULL};
    ts_err e;
    if (cp_attn_fwd(&one, ro.data(), rl.data(), qkv.data(), B, T, NH, NKV, hs, NULL, &e) ||
        cp_attn_bwd(&one, rg.data(), dout.data(), ro.data(), rl.data(), qkv.data(), B, T, NH, NKV, hs, NULL, &e)) {
        std::printf("FAIL cp_attn reference: %s\n", e.msg);
        fails++;
        return;
    }
    auto grow = [&](int r, size_t i) {
        return cp == 1 ? i : i / Tl * T + (size_t)cp_global_pos(T, cp, r, (int)(i % Tl));
    };
    std::vector<vec> q(cp), d(cp), o(cp), l(cp), g(cp), buf(cp), ws(cp);
    for (int r = 0; r < cp; r++) {
        q[r].resize(rows * W), d[r].resize(rows * C), o[r].resize(rows * C), l[r].resize((size_t)B * NH * Tl);
        g[r] = vec(rows * W);
        for (size_t i = 0; i < rows; i++) {
            std::memcpy(&q[r][i * W], &qkv[grow(r, i) * W], (size_t)W * sizeof(float));
            std::memcpy(&d[r][i * C], &dout[grow(r, i) * C], (size_t)C * sizeof(float));
            std::memcpy(&g[r][i * W], &g0[grow(r, i) * W], (size_t)W * sizeof(float)); /* (+=) from the same start */
        }
    }
    cuk_flash_dims D = {B, T, cp, 0, 0, NH, NKV, hs};
    auto hop = [&]() { /* rank r receives rank r - 1's block */
                       std::vector<vec> nb(cp);
                       for (int r = 0; r < cp; r++)
                           nb[r] = buf[(r + cp - 1) % cp];
                       buf = nb;
    };
    for (int r = 0; r < cp; r++) {
        D.rank = r;
        ws[r] = vec(cuk_f32_flash_fwd_scratch_bytes(&D) / sizeof(float) + 1);
        buf[r] = vec(rows * 2 * KV);
        cuk_f32_flash_fwd_init(ws[r].data(), &D, 0);
        cuk_f32_flash_pack(buf[r].data(), q[r].data(), rows, NH, NKV, hs, false, 0);
    }
    for (int step = 0; step < cp; step++) {
        for (int r = 0; r < cp; r++) {
            D.rank = r, D.src = ((r - step) % cp + cp) % cp;
            const float *kb = cp > 1 ? buf[r].data() : q[r].data() + C;
            cuk_f32_flash_fwd_step(ws[r].data(), q[r].data(), kb, cp > 1 ? 2 * KV : (size_t)W, &D, 0);
        }
        if (step + 1 < cp)
            hop();
    }
    for (int r = 0; r < cp; r++) {
        D.rank = r;
        cuk_f32_flash_fwd_finish(o[r].data(), l[r].data(), ws[r].data(), &D, 0);
        ws[r] = vec(cuk_f32_flash_bwd_scratch_bytes(&D) / sizeof(float) + 1);
        buf[r] = vec(rows * 4 * KV);
        cuk_f32_flash_bwd_D(ws[r].data(), d[r].data(), o[r].data(), &D, 0);
        cuk_f32_flash_pack(buf[r].data(), q[r].data(), rows, NH, NKV, hs, true, 0);
    }
    for (int step = 0; step < cp; step++) {
        for (int r = 0; r < cp; r++) {
            D.rank = r, D.src = ((r - step) % cp + cp) % cp;
            const float *kb = cp > 1 ? buf[r].data() : q[r].data() + C;
            float *db = cp > 1 ? buf[r].data() + 2 * KV : g[r].data() + C;
            cuk_f32_flash_bwd_step(g[r].data(), db, ws[r].data(), d[r].data(), l[r].data(), q[r].data(), kb,
                                   cp > 1 ? 4 * KV : (size_t)W, &D, 0);
        }
        if (cp > 1)
            hop();
    }
    for (int r = 0; r < cp && cp > 1; r++)
        cuk_f32_flash_unpack_grad(g[r].data(), buf[r].data(), rows, NH, NKV, hs, 0);
    double tol = cp == 1 ? 1e-6 : 1e-5;
    for (int r = 0; r < cp; r++) {
        vec wo(rows * C), wl((size_t)B * NH * Tl), wg(rows * W);
        for (size_t i = 0; i < rows; i++) {
            size_t gr = grow(r, i), b = i / Tl;
            std::memcpy(&wo[i * C], &ro[gr * C], (size_t)C * sizeof(float));
            std::memcpy(&wg[i * W], &rg[gr * W], (size_t)W * sizeof(float));
            for (int h = 0; h < NH; h++)
                wl[(b * NH + h) * Tl + i % Tl] = rl[(b * NH + h) * T + gr % T];
        }
        char what[96];
        std::snprintf(what, sizeof what, "flash cp %d rank %d, %d groups: out", cp, r, NKV);
        check(what, o[r], wo, tol);
        std::snprintf(what, sizeof what, "flash cp %d rank %d, %d groups: log-sum-exp", cp, r, NKV);
        check(what, l[r], wl, tol);
        std::snprintf(what, sizeof what, "flash cp %d rank %d, %d groups: dqkv (+=)", cp, r, NKV);
        check(what, g[r], wg, 1e-5);
    }
}

int main(void)
{
    test_rmsnorm_swiglu();
    test_rope();
    for (bool rms : {false, true})
        for (size_t N : {1, 7, 37})
            for (auto hk : {std::pair{4, 4}, std::pair{4, 2}, std::pair{6, 1}})
                for (int hs : {8, 33})
                    test_qknorm(N, hk.first, hk.second, hs, rms);
    for (int nkv : {1, 2, 4}) {
        test_gqa_layout(nkv);
        for (int cp : {1, 2, 3})
            test_flash(cp, nkv);
    }
    /* an argument out of range launches nothing */
    cuk_flash_dims bad = {2, 12, 2, 0, 0, 3, 2, 8};
    vec ws(16);
    bool ok = cuk_f32_flash_fwd_init(ws.data(), &bad, 0) == cudaErrorInvalidValue;
    ok ? passes++ : fails++;
    std::printf("%s flash: 3 query heads over 2 groups refused\n", ok ? "PASS" : "FAIL");
    vec q(48), x(32), r(4), w(8);
    ok = cuk_f32_qknorm_fwd(q.data(), x.data(), r.data(), r.data(), w.data(), nullptr, w.data(), nullptr, 1, 2, 1, 8,
                            0) == cudaErrorInvalidValue &&
         cuk_f32_qknorm_bwd_input(q.data(), x.data(), nullptr, r.data(), w.data(), w.data(), 1, 2, 0, 8, 0) ==
             cudaErrorInvalidValue;
    ok ? passes++ : fails++;
    std::printf("%s qknorm: LayerNorm without biases, and no key heads, refused\n", ok ? "PASS" : "FAIL");
    std::printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}
