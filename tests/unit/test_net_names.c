/* net_names: the name ranges in --degrade-link's messages, the neighbours of
 * a node, and the node/link listing of `trainsim config --list-nodes`, on a
 * small H100 fabric: every name listed is one net_graph_node_by_name takes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/net/net_engine.h"
#include "sim/net/net_graph.h"
#include "sim/net/net_names.h"
#include "sim/net/net_whatif.h"

static net_graph *cluster(int servers)
{
    net_fabric_params p;
    ts_err e;
    net_graph *g = NULL;
    cr_assert_eq(net_fabric_defaults(&p, "H100", servers, &e), TS_OK);
    cr_assert_eq(net_graph_build_fabric(&p, &g, &e), TS_OK, "%s", e.msg);
    return g;
}

Test(net_names, ranges_name_every_kind)
{
    net_graph *g = cluster(2);
    char buf[512];
    const char *r = net_names_ranges(g, buf, sizeof buf);
    cr_expect_not_null(strstr(r, "gpu<s>.<k> with s in 0..1, k in 0..7; nvs<s> with s in 0..1; "
                                 "nic<s>.<k> with s in 0..1, k in 0..7; sw1.<i> with i in 0.."),
                       "%s", r);
    /* a short buffer is cut, still terminated */
    char small[10];
    cr_expect_eq(strlen(net_names_ranges(g, small, sizeof small)), sizeof small - 1);
    net_graph_free(g);
}

Test(net_names, neighbors_and_cut)
{
    net_graph *g = cluster(2);
    char buf[256];
    int nic = net_graph_node_by_name(g, "nic1.3");
    cr_assert_geq(nic, 0);
    cr_expect_str_eq(net_names_neighbors(g, nic, buf, sizeof buf), "gpu1.3, sw1.3");
    char small[12];
    cr_expect_str_eq(net_names_neighbors(g, nic, small, sizeof small), "gpu1.3, ...");
    net_graph_free(g);
}

/* Every node row is a name the graph resolves, every link row "A-B" is a
 * link --degrade-link accepts, and each pair of directions is listed once. */
Test(net_names, list_round_trips_through_degrade_link)
{
    net_graph *g = cluster(2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    ts_err e;
    cr_assert_eq(net_names_list(g, f, &e), TS_OK);
    cr_assert_eq(fclose(f), 0);
    int nodes = 0, links = 0, section = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        if (!strcmp(line, "node,kind") || !strcmp(line, "link,kind,line_gbps,latency_us")) {
            section++;
            continue;
        }
        char name[64];
        cr_assert_eq(sscanf(line, "%63[^,]", name), 1);
        if (section == 1) {
            cr_expect_geq(net_graph_node_by_name(g, name), 0, "%s", name);
            nodes++;
        } else {
            char spec[80];
            int a, b;
            double fac;
            snprintf(spec, sizeof spec, "%s:0.5", name);
            cr_expect_eq(net_parse_degrade(g, spec, &a, &b, &fac, &e), TS_OK, "%s: %s", spec, e.msg);
            links++;
        }
    }
    cr_expect_eq(nodes, g->n_nodes);
    cr_expect_eq(links * 2, g->n_links, "every link has its reverse, listed once");
    free(text);
    net_graph_free(g);
}
