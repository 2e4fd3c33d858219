/* net_whatif — see net_whatif.h. */
#include "sim/net/net_whatif.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sim/net/net_names.h"

/* A number that fills all of [s, end of string); false otherwise. strtod
 * (unlike sscanf) has a defined result out of range. */
static bool whole_double(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return end != s && !*end;
}

int net_parse_straggler(const char *s, int n_ranks, int *rank, double *factor, ts_err *err)
{
    char *colon = NULL;
    long r = s ? strtol(s, &colon, 10) : -1; /* LONG_MIN/MAX out of range: refused below */
    if (!s || colon == s || *colon != ':' || r < 0 || r >= n_ranks || !whole_double(colon + 1, factor) ||
        !(*factor >= NET_STRAGGLER_MIN && *factor <= NET_STRAGGLER_MAX))
        return err_set(err, TS_EINVAL,
                       "--straggler '%s': expected RANK:FACTOR with RANK in 0..%d and FACTOR in [%g, %g] "
                       "(2 = compute twice as slow)",
                       s ? s : "", n_ranks - 1, NET_STRAGGLER_MIN, NET_STRAGGLER_MAX);
    *rank = (int)r;
    return TS_OK;
}

int net_parse_degrade(const net_graph *g, const char *s, int *a, int *b, double *factor, ts_err *err)
{
    char na[64], nb[64];
    const char *dash = s ? strchr(s, '-') : NULL, *colon = s ? strrchr(s, ':') : NULL;
    if (!dash || !colon || colon < dash || dash - s >= 64 || colon - dash - 1 >= 64 ||
        !whole_double(colon + 1, factor) || !(*factor >= NET_DEGRADE_MIN && *factor <= NET_DEGRADE_MAX))
        return err_set(err, TS_EINVAL,
                       "--degrade-link '%s': expected A-B:FACTOR, e.g. nic0.0-sw1.0:0.5 "
                       "(FACTOR in [%g, %g] scales the link's bandwidth)",
                       s ? s : "", NET_DEGRADE_MIN, NET_DEGRADE_MAX);
    memcpy(na, s, (size_t)(dash - s));
    na[dash - s] = 0;
    memcpy(nb, dash + 1, (size_t)(colon - dash - 1));
    nb[colon - dash - 1] = 0;
    *a = net_graph_node_by_name(g, na);
    *b = net_graph_node_by_name(g, nb);
    char names[640];
    if (*a < 0 || *b < 0)
        return err_set(err, TS_EINVAL,
                       "--degrade-link '%s': no node named '%s' in this topology (nodes: %s; `trainsim "
                       "config --list-nodes` with the run's topology and cluster flags lists every node "
                       "and link)",
                       s, *a < 0 ? na : nb, net_names_ranges(g, names, sizeof names));
    if (net_graph_find_link(g, *a, *b) < 0)
        return err_set(err, TS_EINVAL,
                       "--degrade-link '%s': %s and %s are not linked (%s links to: %s; `trainsim config "
                       "--list-nodes` lists every link)",
                       s, na, nb, na, net_names_neighbors(g, *a, names, sizeof names));
    return TS_OK;
}
