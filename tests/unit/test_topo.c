/* topo: the shipped topologies, the built-in default, and every bad input of
 * both forms with its file:line and column. Run from the repository root. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/config/topo.h"

static ts_err E;
static topo *T;
static char P[64];

static void fini(void)
{
    topo_free(T);
    T = NULL;
    if (P[0])
        unlink(P);
    P[0] = '\0';
}

TestSuite(topo, .fini = fini);

/* Field by field (struct padding is not comparable with memcmp). */
static bool params_equal(const topo_params *a, const topo_params *b)
{
    return a->nodes == b->nodes && a->gpus_per_node == b->gpus_per_node && !strcmp(a->gpu, b->gpu) &&
           a->intra_node_gbps == b->intra_node_gbps && a->intra_node_latency_us == b->intra_node_latency_us &&
           a->nics_per_node == b->nics_per_node && a->nic_gbps == b->nic_gbps &&
           a->nic_latency_us == b->nic_latency_us && a->fabric == b->fabric && a->levels == b->levels &&
           a->oversubscription == b->oversubscription && a->switch_latency_us == b->switch_latency_us &&
           a->switch_ports == b->switch_ports && a->pods == b->pods &&
           a->pod_oversubscription == b->pod_oversubscription;
}

/* Load text as a topology file; the path is in P. */
static int load(const char *text)
{
    if (P[0])
        unlink(P);
    snprintf(P, sizeof P, "/tmp/test_topoXXXXXX");
    int fd = mkstemp(P);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    topo_free(T);
    T = NULL;
    err_clear(&E);
    return topo_load(P, &T, &E);
}

/* Expect the message to hold "P:line: <rest>". */
#define EXPECT_AT(line, rest)                                                                                          \
    do {                                                                                                               \
        char want_[256];                                                                                               \
        snprintf(want_, sizeof want_, "%s:%d: %s", P, line, rest);                                                     \
        cr_expect(strstr(E.msg, want_), "want '%s'\n got '%s'", want_, E.msg);                                         \
    } while (0)

#define PHDR                                                                                                           \
    "nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,nic_latency_us,"             \
    "fabric,levels,oversubscription\n"
#define LHDR "endpoint_a,endpoint_b,bandwidth_gbps,latency_us,kind\n"

Test(topo, shipped_selene_and_default_agree)
{
    cr_assert_eq(topo_load("topologies/selene-dgx-a100.csv", &T, &E), TS_OK, "%s", E.msg);
    const topo_params *p = &T->params;
    cr_expect_eq(T->form, TOPO_PARAMETRIC);
    cr_expect_eq(p->nodes, 560);
    cr_expect_eq(p->gpus_per_node, 8);
    cr_expect_str_eq(p->gpu, "A100-SXM4-80GB");
    cr_expect_eq(p->nics_per_node, 8);
    cr_expect_float_eq(p->nic_gbps, 25.0, 1e-12);
    cr_expect_eq(p->fabric, TOPO_RAIL_OPTIMIZED);
    cr_expect_eq(p->levels, 3);
    cr_expect(strstr(T->description, "Selene"), "%s", T->description);
    topo *d = NULL;
    cr_assert_eq(topo_default(1024, &d, &E), TS_OK);
    topo_params q = d->params;
    cr_expect_eq(q.nodes, 128);
    q.nodes = p->nodes;
    cr_expect(params_equal(&q, p), "built-in default differs from selene-dgx-a100.csv");
    topo_free(d);
    cr_assert_eq(topo_default(9, &d, &E), TS_OK);
    cr_expect_eq(d->params.nodes, 2);
    cr_expect_eq(topo_gpu_capacity(d), 16);
    topo_free(d);
    cr_expect_eq(topo_default(0, &d, &E), TS_EINVAL);
}

Test(topo, shipped_h100_h200_and_default_for)
{
    cr_assert_eq(topo_load("topologies/dgx-h100-cluster.csv", &T, &E), TS_OK, "%s", E.msg);
    cr_expect_str_eq(T->params.gpu, "H100-SXM5-80GB");
    cr_expect_float_eq(T->params.nic_gbps, 50.0, 1e-12);
    cr_expect_float_eq(T->params.intra_node_gbps, 450.0, 1e-12);
    topo_params h100 = T->params;
    topo_free(T);
    T = NULL;
    cr_assert_eq(topo_load("topologies/dgx-h200-cluster.csv", &T, &E), TS_OK, "%s", E.msg);
    cr_expect_str_eq(T->params.gpu, "H200-SXM-141GB");
    cr_expect_float_eq(T->params.nic_gbps, 50.0, 1e-12);
    topo *d = NULL;
    gpu_spec g = {.name = "H100-SXM5-80GB", .nvlink_gbps = 450};
    cr_assert_eq(topo_default_for(&g, 8192, &d, &E), TS_OK);
    cr_expect(params_equal(&d->params, &h100), "H100 default differs from dgx-h100-cluster.csv");
    topo_free(d);
}

Test(topo, shipped_link_list)
{
    cr_assert_eq(topo_load("topologies/two-dgx-a100-links.csv", &T, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(T->form, TOPO_LINK_LIST);
    cr_expect_eq(T->params.nodes, 2);
    cr_expect_eq(T->params.gpus_per_node, 8);
    cr_expect_eq(T->params.nics_per_node, 8);
    cr_expect_eq(T->params.levels, 2);
    cr_expect_eq(T->n_links, 56);
    cr_expect_eq(T->links[0].line, 4);
    cr_expect_eq(T->links[0].kind, TOPO_LINK_NVLINK);
    cr_expect_eq(topo_gpu_index(T, &T->links[9].a), 9);
    cr_expect_eq(topo_check_gpus(T, 16, &E), TS_OK);
    cr_expect_eq(topo_check_gpus(T, 17, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "--gpus 17 does not fit the 16 GPUs of topologies/two-dgx-a100-links.csv"), "%s", E.msg);
}

Test(topo, endpoint_grammar)
{
    topo_endpoint e;
    char buf[32];
    const char *good[] = {"gpu0.0", "gpu12.7", "nvs3", "nic1.7", "sw1.0", "sw3.1234"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr_assert_eq(topo_endpoint_parse(good[i], &e, &E), TS_OK, "%s: %s", good[i], E.msg);
        cr_expect_str_eq(topo_endpoint_name(&e, buf, sizeof buf), good[i]);
    }
    const char *bad[] = {"gpu0", "gpu-1.0", "gpux.1", "nvs", "nic1.", "sw0.1", "sw9.0", "switch1", "gpu0.0x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(topo_endpoint_parse(bad[i], &e, &E), TS_EINVAL, "'%s' accepted", bad[i]);
        cr_expect(strstr(E.msg, "expected gpu<server>.<gpu>, nvs<server>"), "%s", E.msg);
    }
}

Test(topo, empty_file_and_unknown_form)
{
    cr_expect_eq(load(""), TS_EINVAL);
    cr_expect(strstr(E.msg, "empty: no header row"), "%s", E.msg);
    cr_expect(strstr(E.msg, P), "%s", E.msg);
    cr_expect_eq(load("# only comments\n"), TS_EINVAL);
    cr_expect(strstr(E.msg, "empty"), "%s", E.msg);
    cr_expect_eq(load(PHDR), TS_EINVAL);
    EXPECT_AT(1, "empty: a header but no data rows");
    cr_expect_eq(load("a,b\n1,2\n"), TS_EINVAL);
    EXPECT_AT(1, "not a topology");
    cr_expect_eq(topo_load("/nonexistent/t.csv", &T, &E), TS_EIO);
    cr_expect(strstr(E.msg, "/nonexistent/t.csv: cannot open"), "%s", E.msg);
}

Test(topo, parametric_missing_column)
{
    cr_expect_eq(load("# c\nnodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,"
                      "fabric,levels,oversubscription\n4,8,a100,300,0.6,8,25,fat-tree,2,1\n"),
                 TS_EINVAL);
    EXPECT_AT(2, "missing column 'nic_latency_us'");
}

Test(topo, parametric_non_number_and_bad_bandwidth)
{
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,fast,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'nic_gbps': 'fast' is not a number (expected a number in [0.001, 1e+06])");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,25x,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'nic_gbps': '25x' is not a number");
    cr_expect_eq(load(PHDR "4,8,a100,-300,0.6,8,25,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'intra_node_gbps': -300 is out of range (expected a number in [0.001, 1e+06])");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,0,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'nic_gbps': 0 is out of range (expected a number in [0.001, 1e+06])");
    cr_expect_eq(load(PHDR "4,8,a100,300,-1,8,25,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'intra_node_latency_us': -1 is out of range");
    cr_expect_eq(load(PHDR "4.5,8,a100,300,0.6,8,25,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'nodes': '4.5' is not an integer");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,25,0.6,fat-tree,2,\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'oversubscription': empty");
}

Test(topo, parametric_unknown_gpu_fabric_and_rows)
{
    cr_expect_eq(load("# x\n" PHDR "4,8,V100,300,0.6,8,25,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(3, "column 'gpu': unknown GPU kind 'V100' (valid: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, "
                 "H200-SXM-141GB");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,25,0.6,dragonfly,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'fabric': 'dragonfly' is not valid (valid: fat-tree, rail-optimized)");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,25,0.6,fat-tree,2,1\n4,8,a100,300,0.6,8,25,0.6,fat-tree,2,1\n"),
                 TS_EINVAL);
    EXPECT_AT(3, "a parametric topology has exactly one data row");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,8,25,0.6,fat-tree,2,0.5\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'oversubscription': 0.5 is out of range (expected a number in [1, 1e+06])");
    cr_expect_eq(load(PHDR "4,8,a100,300,0.6,0,25,0.6,fat-tree,2,1\n"), TS_EINVAL);
    EXPECT_AT(2, "column 'nics_per_node': 0 NICs cannot join 4 nodes");
}

Test(topo, parametric_optional_columns)
{
    cr_assert_eq(load("nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,"
                      "nic_latency_us,fabric,levels,oversubscription,pods,pod_oversubscription,switch_ports\n"
                      "768,8,h100,450,0.6,8,50,0.6,fat-tree,3,1,2,7,\n"),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(T->params.pods, 2);
    cr_expect_float_eq(T->params.pod_oversubscription, 7.0, 1e-12);
    cr_expect_eq(T->params.switch_ports, 64);
    cr_expect_str_eq(T->params.gpu, "H100-SXM5-80GB");
    cr_expect_float_eq(T->params.switch_latency_us, 0.13, 1e-12);
    cr_expect_eq(load("nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,"
                      "nic_latency_us,fabric,levels,oversubscription,pods\n"
                      "10,8,h100,450,0.6,8,50,0.6,fat-tree,3,1,3\n"),
                 TS_EINVAL);
    EXPECT_AT(2, "column 'pods': 3 pods do not split 10 nodes evenly");
}

/* A 2-server, 2-GPU link list; extra rows appended by the tests. */
#define LBASE                                                                                                          \
    LHDR "gpu0.0,nvs0,300,0.3,nvlink\ngpu0.1,nvs0,300,0.3,nvlink\ngpu1.0,nvs1,300,0.3,nvlink\n"                        \
         "gpu1.1,nvs1,300,0.3,nvlink\ngpu0.0,nic0.0,32,0.5,pcie\ngpu1.0,nic1.0,32,0.5,pcie\n"                          \
         "nic0.0,sw1.0,25,0.6,fabric\nnic1.0,sw1.0,25,0.6,fabric\n"

Test(topo, link_list_good_base)
{
    cr_assert_eq(load(LBASE), TS_OK, "%s", E.msg);
    cr_expect_eq(T->params.nodes, 2);
    cr_expect_eq(T->params.gpus_per_node, 2);
    cr_expect_eq(T->params.nics_per_node, 1);
    cr_expect_eq(T->params.levels, 1);
}

Test(topo, link_list_missing_column_and_numbers)
{
    cr_expect_eq(load("endpoint_a,endpoint_b,bandwidth_gbps,kind\ngpu0.0,nvs0,300,nvlink\n"), TS_EINVAL);
    EXPECT_AT(1, "missing column 'latency_us'");
    cr_expect_eq(load(LBASE "sw1.0,sw2.0,lots,0.1,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'bandwidth_gbps': 'lots' is not a number");
    cr_expect_eq(load(LBASE "sw1.0,sw2.0,-50,0.1,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'bandwidth_gbps': -50 is out of range (expected a number in [0.001, 1e+06])");
    /* bandwidths that would make transfer times leave int64 ns are refused */
    cr_expect_eq(load(LBASE "sw1.0,sw2.0,1e-300,0.1,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'bandwidth_gbps': 1e-300 is out of range (expected a number in [0.001, 1e+06])");
    cr_expect_eq(load(LBASE "sw1.0,sw2.0,1e7,0.1,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'bandwidth_gbps': 1e7 is out of range");
    cr_expect_eq(load(LBASE "sw1.0,sw2.0,50,soon,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'latency_us': 'soon' is not a number");
    cr_expect_eq(load(LBASE "sw1.0,sw2.0,50,0.1,ethernet\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'kind': 'ethernet' is not valid (valid: nvlink, pcie, fabric)");
}

Test(topo, link_list_duplicate_link)
{
    cr_expect_eq(load(LBASE "sw1.0,nic1.0,25,0.6,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "duplicate link sw1.0 - nic1.0 (first at line 9");
    cr_expect_eq(load(LHDR "gpu0.0,gpu0.1,300,0.3,nvlink\ngpu0.0,gpu0.1,300,0.3,nvlink\n"), TS_EINVAL);
    EXPECT_AT(3, "duplicate link gpu0.0 - gpu0.1 (first at line 2");
}

Test(topo, link_list_dangling)
{
    /* endpoint not declared: not a name of the grammar */
    cr_expect_eq(load(LBASE "nic1.0,leaf7,25,0.6,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'endpoint_b': 'leaf7' is not a valid endpoint");
    /* a server without GPUs */
    cr_expect_eq(load(LBASE "nic2.0,sw1.0,25,0.6,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'endpoint_a': nic2.0 is a dangling link end: server 2 holds no GPU");
    /* a GPU slot missing: gpu1.1 absent while gpu0.1 exists */
    cr_expect_eq(load(LHDR "gpu0.0,nvs0,300,0.3,nvlink\ngpu0.1,nvs0,300,0.3,nvlink\ngpu1.0,nvs1,300,0.3,nvlink\n"
                           "gpu0.0,nic0.0,32,0.5,pcie\ngpu1.0,nic1.0,32,0.5,pcie\n"
                           "nic0.0,sw1.0,25,0.6,fabric\nnic1.0,sw1.0,25,0.6,fabric\n"),
                 TS_EINVAL);
    cr_expect(strstr(E.msg, "gpu1.1 is not connected: every server 0..1 must hold gpu<s>.0 .. gpu<s>.1"), "%s", E.msg);
    /* switches joined only to each other */
    cr_expect_eq(load(LBASE "sw2.0,sw2.1,100,0.1,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "dangling link: sw2.0 (first named here) is not connected to gpu0.0");
    /* two servers with no path between them */
    cr_expect_eq(load(LHDR "gpu0.0,nvs0,300,0.3,nvlink\ngpu1.0,nvs1,300,0.3,nvlink\n"), TS_EINVAL);
    EXPECT_AT(3, "dangling link: gpu1.0 (first named here) is not connected");
    /* a NIC with a fabric link but no PCIe link to its GPUs */
    cr_expect_eq(load(LBASE "nic0.1,sw1.0,25,0.6,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "dangling link: nic0.1 (first named here) has no pcie link to a GPU of server 0");
}

Test(topo, link_list_kind_rules)
{
    cr_expect_eq(load(LBASE "gpu0.1,nic1.0,32,0.5,pcie\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'kind': a pcie link joins a GPU and a NIC of the same server (got gpu0.1 - nic1.0)");
    cr_expect_eq(load(LBASE "gpu0.1,sw1.0,25,0.5,nvlink\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'kind': a nvlink link joins");
    cr_expect_eq(load(LBASE "nvs0,sw1.0,25,0.5,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'kind': a fabric link joins");
    cr_expect_eq(load(LBASE "sw1.0,sw1.0,25,0.5,fabric\n"), TS_EINVAL);
    EXPECT_AT(10, "column 'endpoint_b': 'sw1.0' links to itself");
}

Test(topo, describe)
{
    char buf[512];
    cr_assert_eq(topo_default(16, &T, &E), TS_OK);
    topo_describe(T, buf, sizeof buf);
    cr_expect(strstr(buf, "2 nodes x 8 A100-SXM4-80GB"), "%s", buf);
    cr_expect(strstr(buf, "3-level rail-optimized"), "%s", buf);
}

/* Damaged files never crash and never pass silently as something else:
 * every truncation and a fixed set of byte substitutions of the shipped
 * files load or fail with TS_EINVAL and a message (run under ASan by make
 * test-sanitize). */
Test(topo, damaged_files_fail_cleanly)
{
    const char *files[] = {"topologies/two-dgx-a100-links.csv", "topologies/selene-dgx-a100.csv"};
    const char subst[] = {',', '"', '\n', '-', 'x', '0', '#', ' ', '\0'};
    unsigned seed = 12345;
    for (size_t fi = 0; fi < 2; fi++) {
        FILE *f = fopen(files[fi], "rb");
        cr_assert_not_null(f);
        static char text[16384];
        size_t n = fread(text, 1, sizeof text - 1, f);
        cr_assert_eq(fclose(f), 0);
        text[n] = '\0';
        cr_assert(n > 0, "%s is empty", files[fi]);
        static char buf[16384];
        for (size_t cut = 0; cut < n; cut += 13) {
            memcpy(buf, text, cut);
            buf[cut] = '\0';
            int rc = load(buf);
            cr_assert(rc == TS_OK || (rc == TS_EINVAL && E.msg[0]), "%s cut at %zu: rc %d", files[fi], cut, rc);
        }
        for (int k = 0; k < 300; k++) {
            memcpy(buf, text, n + 1);
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            buf[at] = subst[(seed >> 4) % sizeof subst];
            if (!buf[at])
                buf[at] = ';';
            int rc = load(buf);
            cr_assert(rc == TS_OK || (rc == TS_EINVAL && E.msg[0]), "%s byte %zu: rc %d", files[fi], at, rc);
        }
    }
}
