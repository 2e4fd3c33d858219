/* trainsim topology — validate a topology CSV and summarise it (GPUs,
 * NVLink domains, switches per level, oversubscription per level,
 * bisection bandwidth); list its node and link names; print the route
 * between two GPUs; draw it with Graphviz. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/cli/cmd.h"
#include "sim/config/catalog.h"
#include "sim/config/topo.h"
#include "sim/net/net_names.h"
#include "sim/net/net_route.h"
#include "sim/net/net_topo.h"
#include "sim/util/afile.h"
#include "sim/util/opt.h"

typedef struct {
    int gpus;
    const char *gpu;
    bool list_nodes, list_links;
    const char *route, *dot, *png, *fail_link, *fail_node;
} targs;

static int add_flags(opt_table *t, targs *a, ts_err *e)
{
    int rc;
    if ((rc = opt_add(t,
                      &(opt_spec){.name = "--gpus",
                                  .type = OPT_INT,
                                  .target = &a->gpus,
                                  .min = 0,
                                  .max = 100000000,
                                  .unit = "GPUs",
                                  .defval = "0 (every node of the file)",
                                  .help = "build the fabric a run of this many GPUs uses (a parametric file fills "
                                          "its nodes in order)"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--gpu",
                                  .type = OPT_STRING,
                                  .target = &a->gpu,
                                  .metavar = "KIND",
                                  .defval = "the file's (a link list has none)",
                                  .help = "GPU kind for a link list (decides NVLink SHARP)"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--list-nodes",
                                  .type = OPT_BOOL,
                                  .target = &a->list_nodes,
                                  .help = "list the node names (what --fail-node, --degrade-link and --route take)"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--list-links",
                                  .type = OPT_BOOL,
                                  .target = &a->list_links,
                                  .help = "list the links as A-B,kind,line_gbps,latency_us (what --degrade-link "
                                          "and --fail-link take)"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--route",
                                  .type = OPT_STRING,
                                  .target = &a->route,
                                  .metavar = "A B",
                                  .defval = "none",
                                  .help = "print the path from node A to node B (GPU names like gpu0.3, or GPU "
                                          "indices), hop by hop; also A:B"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--dot",
                                  .type = OPT_STRING,
                                  .target = &a->dot,
                                  .metavar = "FILE",
                                  .defval = "none",
                                  .help = "write a Graphviz drawing (servers, then switch levels, collapsed into "
                                          "boxes past 300 nodes)"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--png",
                                  .type = OPT_STRING,
                                  .target = &a->png,
                                  .metavar = "FILE",
                                  .defval = "none",
                                  .help = "render the drawing to a PNG with Graphviz's dot (must be installed)"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--fail-link",
                                  .type = OPT_STRING,
                                  .target = &a->fail_link,
                                  .metavar = "A:B[,C:D...]",
                                  .defval = "none",
                                  .help = "links that are down (as simulate's --fail-link): routes avoid them"},
                      e)) ||
        (rc = opt_add(t,
                      &(opt_spec){.name = "--fail-node",
                                  .type = OPT_STRING,
                                  .target = &a->fail_node,
                                  .metavar = "NODE[,NODE...]",
                                  .defval = "none",
                                  .help = "nodes that are down (as simulate's --fail-node)"},
                      e)))
        return rc;
    return TS_OK;
}

/* A node by name or, for a plain number, GPU index; -1 if none. */
static int node_arg(const net_graph *g, const char *s)
{
    char *end;
    long x = strtol(s, &end, 10);
    if (end != s && !*end)
        return x >= 0 && x < g->n_gpus ? g->gpu_node[x] : -1;
    return net_graph_node_by_name(g, s);
}

static int do_route(const net_graph *g, const char *a_name, const char *b_name, ts_err *e)
{
    char ranges[1024];
    int a = node_arg(g, a_name), b = node_arg(g, b_name);
    if (a < 0 || b < 0)
        return err_set(e, TS_EINVAL, "--route: no node '%s' in this topology (nodes: %s)", a < 0 ? a_name : b_name,
                       net_names_ranges(g, ranges, sizeof ranges));
    if (a == b)
        return err_set(e, TS_EINVAL, "--route: %s and %s are the same node", a_name, b_name);
    return net_names_route(g, a, b, stdout, e);
}

/* Render the dot file at dot_path to png_path with `dot -Tpng`. */
static int render_png(const char *dot_path, const char *png_path, ts_err *e)
{
    pid_t pid = fork();
    if (pid < 0)
        return err_set(e, TS_EIO, "--png: cannot start dot");
    if (pid == 0) {
        execlp("dot", "dot", "-Tpng", "-o", png_path, dot_path, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0)
        return err_set(e, TS_EIO, "--png: waiting for dot failed");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
        return err_set(e, TS_ENOTSUP,
                       "--png: Graphviz's 'dot' is not installed (install.sh installs the graphviz package; "
                       "--dot FILE writes the drawing without it)");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return err_set(e, TS_EIO, "--png %s: dot failed (exit %d)", png_path, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return TS_OK;
}

static int write_dot(const net_graph *g, const char *title, const char *path, ts_err *e)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(e, TS_EIO, "--dot %s: cannot create the file", path);
    int rc = net_names_dot(g, title, f, e);
    if (fclose(f) && !rc)
        rc = err_set(e, TS_EIO, "--dot %s: write error", path);
    return rc;
}

static int run(targs *a, opt_table *t, ts_err *e)
{
    topo *tp = NULL;
    net_graph *g = NULL;
    char desc[2048], tmp[64] = "";
    int rc;
    if (t->n_positional < 1)
        return err_set(e, TS_EINVAL,
                       "give a topology file: trainsim topology FILE (e.g. topologies/selene-dgx-a100.csv)");
    const char *route_b = NULL;
    if (a->route && !strchr(a->route, ':')) {
        if (t->n_positional != 2)
            return err_set(e, TS_EINVAL, "--route takes two nodes: --route A B (or --route A:B)");
        route_b = t->positional[1];
    } else if (t->n_positional > 1) {
        return err_set(e, TS_EINVAL, "one topology file, then flags ('%s' is extra)", t->positional[1]);
    }
    if ((rc = topo_load(t->positional[0], &tp, e)))
        return rc;
    if (a->gpus && (rc = topo_check_gpus(tp, a->gpus, e)))
        goto out;
    if ((rc = net_graph_from_topo(tp, a->gpus, a->gpu, &g, e)))
        goto out;
    if ((rc = net_route_apply_failures(g, a->fail_link, a->fail_node, 1, 1, e)))
        goto out;
    bool listed = a->list_nodes || a->list_links || a->route || a->dot || a->png;
    if (!listed) {
        topo_describe(tp, desc, sizeof desc);
        printf("topology             %s\n", desc);
        if (tp->description[0])
            printf("source               %s\n", tp->description);
        rc = net_names_summary(g, stdout, e);
    }
    if (!rc && (a->list_nodes || a->list_links))
        rc = net_names_list(g, stdout, e);
    if (!rc && a->route) {
        if (route_b) {
            rc = do_route(g, a->route, route_b, e);
        } else {
            const char *colon = strchr(a->route, ':');
            char first[64];
            snprintf(first, sizeof first, "%.*s", (int)(colon - a->route), a->route);
            rc = do_route(g, first, colon + 1, e);
        }
    }
    if (!rc && a->dot)
        rc = write_dot(g, t->positional[0], a->dot, e);
    if (!rc && a->png) {
        const char *src = a->dot;
        if (!src) {
            snprintf(tmp, sizeof tmp, "/tmp/trainsim-topologyXXXXXX");
            int fd = mkstemp(tmp);
            if (fd < 0) {
                tmp[0] = 0;
                rc = err_set(e, TS_EIO, "--png: cannot create a temporary file");
                goto out;
            }
            close(fd);
            src = tmp;
            rc = write_dot(g, t->positional[0], src, e);
        }
        if (!rc)
            rc = render_png(src, a->png, e);
    }
out:
    if (tmp[0])
        unlink(tmp);
    net_graph_free(g);
    topo_free(tp);
    return rc;
}

int cmd_topology(int argc, char **argv)
{
    ts_err e;
    err_clear(&e);
    targs a = {0};
    opt_table t;
    opt_table_init(&t, "trainsim topology FILE",
                   "Validate a topology CSV (parametric or link list, see docs/network.md) and summarise the fabric\n"
                   "a run builds from it: GPUs and NVLink domains, switches per level with their downlink and uplink\n"
                   "rates and oversubscription, the bisection bandwidth. --list-nodes/--list-links print the names\n"
                   "--degrade-link, --fail-link and --fail-node take; --route A B the path between two nodes;\n"
                   "--dot/--png a drawing. Exit status: 0 valid, 2 invalid file or flags, 1 other failure.");
    t.max_positional = 2;
    int rc = add_flags(&t, &a, &e);
    if (!rc)
        rc = opt_parse(&t, argc, argv, &e);
    if (!rc && t.help_requested) {
        opt_help(&t, stdout);
        opt_table_free(&t);
        return 0;
    }
    if (!rc)
        rc = run(&a, &t, &e);
    opt_table_free(&t);
    if (rc) {
        fprintf(stderr, "trainsim topology: %s\n", e.msg);
        return cmd_exit_status(rc);
    }
    return 0;
}
