/* net_share — the state of net_flows shared by its two files, and the
 * max-min computation (see net_flow.h for the model).
 *
 * net_flow.c keeps the API and the per-flow and per-link bookkeeping
 * (starts, ends, link lists, usage); net_share.c computes rates: the
 * completion heap, the lone-flow rate, and the progressive filling of the
 * components of dirty links. This header is internal to sim/net/net_flow*
 * and sim/net/net_share*: nothing else includes it.
 *
 * Ownership: every function borrows f; nothing here allocates but the
 * scratch arrays inside f, which net_flows_free releases. */
#ifndef TRAINSIM_NET_SHARE_H
#define TRAINSIM_NET_SHARE_H

#include <stdint.h>

#include "sim/net/net_graph.h"

/* The same type as net_flow.h's (this header may not include it: net_flow
 * is the module above). */
typedef struct net_flows net_flows;

/* A flow that never ends: net_flow.h's NET_TIME_NEVER. */
#define NET_SHARE_NEVER_NS INT64_MAX

/* The counters behind net_flow_stats (see there), in the same order. */
typedef struct {
    uint64_t flows_started, recomputes, rate_updates, max_component, recompute_retries;
} net_share_stats;

typedef struct {
    int nlinks, cap; /* links in use / allocated (kept when the slot is reused) */
    int *links;      /* the route's entries; a link may repeat (a bundle crossing it twice) */
    int *pos;        /* index of this flow in each link's flow list, per entry (links + cap) */
    int *w;          /* occurrences each entry stands for (>= 1; links + 2 cap) */
    double left_bytes;
    double rate;        /* GB/s = bytes/ns; 0 until first assigned */
    double new_rate;    /* scratch of the water-filling (before it: the share of own_link) */
    int bott, new_bott; /* link that froze it in the last filling, -1 if none (solo); scratch of the filling */
    int own_link;       /* scratch: its tightest link no other flow uses, -1 if none */
    int sh_off, sh_n;   /* scratch: its occurrences of shared links, net_flows.sh[sh_off ..] */
    int64_t last_ns;    /* time left_bytes was last brought up to date */
    int64_t done_ns;
    uint64_t tag;
    uint32_t mark;     /* component epoch */
    uint32_t fast_gen; /* == net_flows.gen: started alone, rate set, not yet counted */
    uint8_t active, frozen;
    uint8_t may_repeat; /* may list a link twice (0: known not to, from a start on idle links) */
    uint8_t solo;       /* scratch: no other flow on any of its links */
} flow_t;

/* A link's flows: occurrence 0 in the dense hot array (a lone flow on
 * idle links touches only that), the others in the link record. */
typedef struct {
    int n;   /* flow entries on the link */
    int fl0; /* entry 0 (if n > 0) */
    int w;   /* flow occurrences on the link: the entries' weights together */
} link_hot;

typedef struct {
    int *fl;  /* occurrences 1 .. n-1 at fl[k - 1]; cap entries */
    int *occ; /* which occurrence of its flow each is (index into the flow's links): occ0 for
                 occurrence 0, occ[k - 1] for k >= 1; cap entries */
    int occ0;
    int cap;
    int dirty;
} link_t;

/* A link's state in the water-filling, dense (16 bytes: the filling
 * touches every link of every flow it freezes). */
typedef struct {
    double rem; /* capacity left, GB/s */
    int unfrozen;
    uint32_t ver; /* heap version */
} link_fill;

typedef struct {
    double share;
    int link;
    uint32_t ver;
} fill_ent;
typedef struct {
    int64_t t_ns;
    int id;
} done_ent; /* completion heap entry: (done_ns, flow id) */

struct net_flows {
    const net_graph *g;
    link_hot *lh;
    link_t *lk;
    link_fill *lf;
    int *lsat;        /* per link: flows whose bott it is (> 0: saturated, the search crosses it) */
    uint32_t *lout;   /* per link: epoch of a pass in which it is a boundary link with flows outside */
    int *bnd_links;   /* scratch: a pass's boundary links, cap n_links */
    uint64_t *ltouch; /* per link: the filling step (pop) that last changed it */
    uint64_t n_pops;  /* filling steps so far */
    int *touched;     /* scratch: the links one step changed, cap n_links */
    int pass_counted; /* scratch: the flows a pass (re)assigned */
    uint32_t *lmark;  /* per link: component epoch (apart: lh stays 8 bytes a link) */
    flow_t *fl;
    int n_flows, cap_flows;
    int *free_ids;
    int n_free, cap_free;
    done_ent *heap;
    int n_heap; /* completion heap, cap = cap_flows */
    int *hpos;  /* per flow: position in the heap, -1 if absent */
    int *dirty;
    int n_dirty;                  /* dirty link ids, cap = n_links */
    int *comp_links, *comp_flows; /* scratch, caps n_links and cap_flows */
    fill_ent *fh;
    int n_fh, cap_fh; /* water-filling heap */
    int *sh, *shw;
    int cap_sh; /* scratch: the component's flows' shared-link entries and their weights */
    uint32_t epoch;
    uint32_t gen;     /* recomputation generation (starts at 1) */
    double *bw;       /* per link: the graph's bw_gbps, dense (solo rates read
                                      one per link of a bundle) */
    uint32_t bw_seen; /* the graph's bw_version that bw holds */
    uint32_t bw_gen;  /* bumped with each reread of bw: hints of another are stale */
    int n_fast;       /* flows started alone since the last recomputation */
    int64_t now_ns;
    int active;
    net_share_stats st;
    /* per link, with net_flows_track_links (else NULL) */
    double *u_bytes, *u_peak;
    int64_t *u_busy, *u_since; /* busy time of closed periods; start of the open one */
};

/* Occurrence k of link l's flow list. */
static inline int lfl(const net_flows *f, int l, int k)
{
    return k ? f->lk[l].fl[k - 1] : f->lh[l].fl0;
}

/* Set occurrence k of link l's flow list: flow id's route entry h. */
static inline void lfl_set(net_flows *f, int l, int k, int id, int h)
{
    if (k) {
        f->lk[l].fl[k - 1] = id;
        f->lk[l].occ[k - 1] = h;
    } else {
        f->lh[l].fl0 = id;
        f->lk[l].occ0 = h;
    }
}

/* The route entry (of its flow) of occurrence k of link l's list. */
static inline int lfl_occ(const net_flows *f, int l, int k)
{
    return k ? f->lk[l].occ[k - 1] : f->lk[l].occ0;
}

/* Insert flow id into the completion heap at its done_ns, or move it there. */
void net_share_heap_update(net_flows *f, int id);

/* Remove flow id from the completion heap (nothing if absent). */
void net_share_heap_remove(net_flows *f, int id);

/* Is flow id the only flow on every one of its links? */
int net_share_alone_on_links(const net_flows *f, int id);

/* Rate of a flow alone on its links (each holding only its occurrences):
 * its tightest link's share bw / occurrences, GB/s. */
double net_share_solo_rate(const net_flows *f, const int *links, int nlinks);

/* Link l carries rate_gbps now: keep the largest utilisation (u_peak must
 * be allocated). */
void net_share_peak_note(net_flows *f, int l, double rate_gbps);

/* ns to carry bytes at rate GB/s, rounded up (a relative 1e-9 slack), one
 * past CKD_MAX_NS when beyond the engine's horizon. */
int64_t net_share_duration_ns(double bytes, double rate);

/* One recomputation that (re)assigned n flow rates, in the stats. */
void net_share_count_recompute(net_flows *f, int n);

/* Recompute the rates of the components of the dirty links at f->now_ns
 * (n_dirty > 0), and count the lone starts since the last call. TS_OK or
 * TS_ENOMEM. */
int net_share_recompute_dirty(net_flows *f);

#endif
