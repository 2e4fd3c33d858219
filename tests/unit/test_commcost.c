/* Tests for commcost: the alpha-beta closed forms of formulas.md, groups
 * across nodes, defaults from networks.csv. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sim/model/commcost.h"
#include "tests/unit/gpu_specs.h"

static commcost_params P(void)
{
    commcost_params p = {.nvlink_allreduce_busbw_gbps = 200.0,
                         .nvlink_busbw_gbps = 100.0,
                         .nvlink_p2p_gbps = 150.0,
                         .nvlink_alpha_ns = 2000.0,
                         .nic_gbps_per_gpu = 20.0,
                         .nic_alpha_ns = 8000.0};
    return p;
}

static int64_t ns(commcost_coll c, int64_t S, int n, int k)
{
    commcost_params p = P();
    commcost_group g = {n, k};
    cr_assert_eq(commcost_group_check(c, &g, NULL), TS_OK);
    return commcost_ns(&p, c, S, &g);
}

Test(commcost, ring_closed_forms_inside_a_node)
{
    double S = 1e9;
    for (int n = 2; n <= 8; n++) {
        double ar = 2.0 * (n - 1) * 2000.0 + 2.0 * (n - 1) / n * S / 200.0;
        double ag = (n - 1) * 2000.0 + (double)(n - 1) / n * S / 100.0;
        cr_assert_eq(ns(COMM_ALL_REDUCE, (int64_t)S, n, n), llround(ar));
        cr_assert_eq(ns(COMM_ALL_GATHER, (int64_t)S, n, n), llround(ag));
        cr_assert_eq(ns(COMM_REDUCE_SCATTER, (int64_t)S, n, n), llround(ag));
    }
}

Test(commcost, p2p)
{
    cr_assert_eq(ns(COMM_P2P, 150000000, 2, 2), llround(2000.0 + 1.5e8 / 150.0));
    cr_assert_eq(ns(COMM_P2P, 20000000, 2, 1), llround(8000.0 + 2e7 / 20.0));
}

Test(commcost, one_rank_per_node_is_a_nic_ring)
{
    double S = 4e8;
    int N = 16;
    double ar = 2.0 * (N - 1) * 8000.0 + 2.0 * (N - 1) / N * S / 20.0;
    cr_assert_eq(ns(COMM_ALL_REDUCE, (int64_t)S, N, 1), llround(ar));
}

Test(commcost, group_spanning_nodes_is_hierarchical)
{
    double S = 8e8;
    int k = 8, N = 4;
    double rs = (k - 1) * 2000.0 + (double)(k - 1) / k * S / 100.0;
    double inter_ar = 2.0 * (N - 1) * 8000.0 + 2.0 * (N - 1) / N * (S / k) / 20.0;
    double inter_ag = (N - 1) * 8000.0 + (double)(N - 1) / N * (S / k) / 20.0;
    /* exact up to the one rounding of the sum */
    cr_assert(llabs(ns(COMM_ALL_REDUCE, (int64_t)S, 32, 8) - llround(rs + inter_ar + rs)) <= 1);
    cr_assert(llabs(ns(COMM_ALL_GATHER, (int64_t)S, 32, 8) - llround(rs + inter_ag)) <= 1);
    /* the NIC share is the bottleneck: slower than the same group in one node */
    commcost_params p = P();
    p.nvlink_busbw_gbps = p.nvlink_allreduce_busbw_gbps;
    commcost_group in = {8, 8}, across = {16, 8};
    cr_assert_lt(commcost_ns(&p, COMM_ALL_REDUCE, (int64_t)S, &in),
                 commcost_ns(&p, COMM_ALL_REDUCE, (int64_t)S, &across));
}

Test(commcost, monotonic_in_bytes_and_trivial_cases)
{
    int64_t prev = -1;
    for (int64_t S = 1; S < (1LL << 34); S *= 4) {
        int64_t t = ns(COMM_ALL_REDUCE, S, 64, 8);
        if (S >= (1 << 20))
            cr_assert_gt(t, prev);
        else
            cr_assert_geq(t, prev);
        prev = t;
    }
    cr_assert_eq(ns(COMM_ALL_REDUCE, 1 << 20, 1, 1), 0);
    cr_assert_eq(ns(COMM_ALL_GATHER, 0, 8, 8), 0);
}

Test(commcost, wire_bytes_bus_bandwidth_convention)
{
    cr_assert_float_eq(commcost_wire_bytes(COMM_ALL_REDUCE, 800, 8), 1400.0, 1e-9);
    cr_assert_float_eq(commcost_wire_bytes(COMM_ALL_GATHER, 800, 8), 700.0, 1e-9);
    cr_assert_float_eq(commcost_wire_bytes(COMM_REDUCE_SCATTER, 800, 8), 700.0, 1e-9);
    cr_assert_float_eq(commcost_wire_bytes(COMM_P2P, 800, 2), 800.0, 1e-9);
    cr_assert_float_eq(commcost_wire_bytes(COMM_ALL_REDUCE, 800, 1), 0.0, 1e-9);
}

Test(commcost, defaults_from_networks_csv)
{
    gpu_spec a100 = {GPU_SPEC_A100};
    gpu_spec h100 = {GPU_SPEC_H100};
    gpu_spec h200 = {GPU_SPEC_H200};
    gpu_spec other = {.name = "V100-SXM2-32GB",
                      .bf16_tflops = 125,
                      .fp16_tflops = 125,
                      .fp32_tflops = 15.7,
                      .hbm_gib = 32,
                      .hbm_gbps = 900,
                      .nvlink_gbps = 150};
    commcost_params p;
    cr_assert_eq(commcost_params_default(&a100, &p, NULL), TS_OK);
    cr_assert_eq(p.nvlink_allreduce_busbw_gbps, 230.0);
    cr_assert_float_eq(p.nic_gbps_per_gpu, 24.4, 1e-9);
    /* a large all-reduce in a DGX A100 reaches the measured bus bandwidth */
    commcost_group g = {8, 8};
    double S = 8e9, t = (double)commcost_ns(&p, COMM_ALL_REDUCE, (int64_t)S, &g);
    double busbw = S / t * 2.0 * 7 / 8;
    cr_assert(fabs(busbw - 230.0) < 0.5, "%g", busbw);
    cr_assert_eq(commcost_params_default(&h100, &p, NULL), TS_OK);
    cr_assert_eq(p.nvlink_allreduce_busbw_gbps, 480.0);
    cr_assert_eq(p.nvlink_busbw_gbps, 370.0);
    cr_assert_eq(p.nic_gbps_per_gpu, 47.0);
    cr_assert_eq(commcost_params_default(&h200, &p, NULL), TS_OK);
    ts_err e;
    cr_assert_eq(commcost_params_default(&other, &p, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "V100") && strstr(e.msg, "A100"), "%s", e.msg);
}

Test(commcost, bad_groups)
{
    ts_err e;
    commcost_group g = {12, 8};
    cr_assert_eq(commcost_group_check(COMM_ALL_REDUCE, &g, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "divisor of 12"), "%s", e.msg);
    g = (commcost_group){3, 3};
    cr_assert_eq(commcost_group_check(COMM_P2P, &g, &e), TS_EINVAL);
    g = (commcost_group){0, 1};
    cr_assert_eq(commcost_group_check(COMM_ALL_GATHER, &g, &e), TS_EINVAL);
}

/* A strided group's ranks per node: gcd(n, gpn / stride) when the stride
 * divides the node, else one; a group of one is alone. */
Test(commcost, group_strided)
{
    cr_assert_eq(commcost_gcd(12, 8), 4);
    cr_assert_eq(commcost_gcd(7, 0), 7);
    commcost_group g = commcost_group_strided(16, 2, 8); /* 4 ranks in each node of 8 at stride 2 */
    cr_assert(g.ranks == 16 && g.ranks_per_node == 4);
    cr_assert_eq(commcost_group_strided(6, 1, 8).ranks_per_node, 2); /* gcd(6, 8) */
    cr_assert_eq(commcost_group_strided(4, 8, 8).ranks_per_node, 1); /* stride spans a node */
    cr_assert_eq(commcost_group_strided(4, 3, 8).ranks_per_node, 1); /* 3 does not divide 8 */
    cr_assert_eq(commcost_group_strided(1, 1, 8).ranks_per_node, 1);
    cr_assert_eq(commcost_group_strided(8, 1, 8).ranks_per_node, 8); /* one whole node */
}
