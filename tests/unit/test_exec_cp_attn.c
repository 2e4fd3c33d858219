/* Unit test of context-parallel attention (exec/core/cp_attn.h) on one rank
 * (cp = 1, no exchange): the online-softmax forward and the flash-style
 * backward against kern_attention_fwd/bwd (the executor's attention), on
 * random q, k, v. Both compute the same sums in different orders (cp_attn in
 * double, then rounded; kern in fp32): outputs and gradients of magnitude
 * <= ~1 agree to ~1e-6; accepted 1e-5 absolute. A wrong mask or a missing
 * rescale changes them by O(1e-1). The multi-rank ring is tested in
 * tests/mpi/test_exec_cp.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "exec/core/cp_attn.h"
#include "exec/cpu/kern.h"
#include "exec/cpu/kern_llama.h"

Test(exec_cp_attn, one_rank_matches_kern_attention)
{
    enum { B = 2, T = 6, NH = 2, HS = 4, C = NH * HS };
    static float qkv[B * T * 3 * C], out[B * T * C], ref[B * T * C], att[B * NH * T * T], datt[B * NH * T * T];
    static float lse[B * NH * T], dout[B * T * C], dq1[B * T * 3 * C], dq2[B * T * 3 * C];
    unsigned s = 5;
    for (int i = 0; i < B * T * 3 * C; i++) {
        s = s * 1664525u + 1013904223u;
        qkv[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < B * T * C; i++) {
        s = s * 1664525u + 1013904223u;
        dout[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    cp_ring ring = {.size = 1, .rank = 0};
    ts_err e;
    cr_assert_eq(cp_attn_fwd(&ring, out, lse, qkv, B, T, NH, NH, HS, NULL, &e), TS_OK, "%s", e.msg);
    kern_attention_fwd(ref, att, qkv, B, T, NH, HS);
    double worst = 0.0;
    for (int i = 0; i < B * T * C; i++)
        worst = fmax(worst, fabs((double)out[i] - ref[i]));
    cr_assert_lt(worst, 1e-5, "forward differs by %g", worst);
    cr_assert_eq(cp_attn_bwd(&ring, dq1, dout, out, lse, qkv, B, T, NH, NH, HS, NULL, &e), TS_OK, "%s", e.msg);
    kern_attention_bwd(dq2, datt, dout, qkv, att, B, T, NH, HS);
    double gw = 0.0, gmax = 0.0;
    for (int i = 0; i < B * T * 3 * C; i++) {
        gw = fmax(gw, fabs((double)dq1[i] - dq2[i]));
        gmax = fmax(gmax, fabs((double)dq2[i]));
    }
    cr_assert_lt(gw, 1e-5, "backward differs by %g", gw);
    cr_assert_gt(gmax, 1e-2, "gradients too small for the test to mean anything");
    /* the first position attends only to itself: its output is its v */
    for (int d = 0; d < C; d++)
        cr_assert_float_eq(out[d], qkv[2 * C + d], 1e-6);
    cr_assert_eq(cp_attn_fwd(&(cp_ring){.size = 4, .rank = 0}, out, lse, qkv, B, T, NH, NH, HS, NULL, &e), TS_EINVAL);
}

/* Grouped-query attention (2 query heads per key/value head): cp = 1 against
 * kern_attention_gqa_fwd/bwd, the same 1e-5 as above. The key/value
 * gradients sum the contributions of both query heads of their group. */
Test(exec_cp_attn, grouped_query_matches_kern)
{
    enum { B = 2, T = 6, NH = 4, NKV = 2, HS = 4, C = NH * HS, W = (NH + 2 * NKV) * HS };
    static float qkv[B * T * W], out[B * T * C], ref[B * T * C], att[B * NH * T * T], datt[B * NH * T * T];
    static float lse[B * NH * T], dout[B * T * C], dq1[B * T * W], dq2[B * T * W];
    unsigned s = 11;
    for (int i = 0; i < B * T * W; i++) {
        s = s * 1664525u + 1013904223u;
        qkv[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < B * T * C; i++) {
        s = s * 1664525u + 1013904223u;
        dout[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    cp_ring ring = {.size = 1, .rank = 0};
    ts_err e;
    cr_assert_eq(cp_attn_fwd(&ring, out, lse, qkv, B, T, NH, NKV, HS, NULL, &e), TS_OK, "%s", e.msg);
    kern_attention_gqa_fwd(ref, att, qkv, B, T, NH, NKV, HS);
    double worst = 0.0;
    for (int i = 0; i < B * T * C; i++)
        worst = fmax(worst, fabs((double)out[i] - ref[i]));
    cr_assert_lt(worst, 1e-5, "forward differs by %g", worst);
    cr_assert_eq(cp_attn_bwd(&ring, dq1, dout, out, lse, qkv, B, T, NH, NKV, HS, NULL, &e), TS_OK, "%s", e.msg);
    kern_attention_gqa_bwd(dq2, datt, dout, qkv, att, B, T, NH, NKV, HS);
    double gw = 0.0, gmax = 0.0;
    for (int i = 0; i < B * T * W; i++) {
        gw = fmax(gw, fabs((double)dq1[i] - dq2[i]));
        gmax = fmax(gmax, fabs((double)dq2[i]));
    }
    cr_assert_lt(gw, 1e-5, "backward differs by %g", gw);
    cr_assert_gt(gmax, 1e-2, "gradients too small for the test to mean anything");
    cr_assert_eq(cp_attn_fwd(&ring, out, lse, qkv, B, T, NH, 3, HS, NULL, &e), TS_EINVAL,
                 "3 groups do not divide 4 heads");
}
