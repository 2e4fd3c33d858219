/* net_rdv — an open-addressing hash table from a 128-bit key to a number
 * or a pointer: net_engine's rendezvous (the collectives some members of a
 * group have started, by group, tag and micro-batch) and its plans (by
 * group or sending rank, kind, peer and size), each found in one probe
 * sequence instead of a scan of a per-group list.
 *
 * Linear probing on a power-of-two table kept at most half full; removal
 * shifts the following entries back (no tombstones), so lookups never
 * slow down over a long run. Nothing depends on where an entry lands:
 * lookups are exact, so the outputs of a caller stay deterministic.
 *
 *   net_rdv t;
 *   net_rdv_init(&t);
 *   net_rdv_slot *s = net_rdv_find(&t, k);
 *   if (!s && net_rdv_put(&t, k, &s) == TS_OK) s->v.i = 42;
 *   ...
 *   net_rdv_remove(&t, s);
 *   net_rdv_free(&t);
 *
 * Ownership: the table owns its slots (net_rdv_free); pointer values are
 * borrowed. A slot pointer is valid until the next put or remove.
 */
#ifndef TRAINSIM_NET_RDV_H
#define TRAINSIM_NET_RDV_H

#include <stdint.h>

#include "sim/util/err.h"

/* a == NET_RDV_EMPTY is reserved (marks a free slot) */
#define NET_RDV_EMPTY UINT64_MAX

typedef struct {
    uint64_t a, b;
} net_rdv_key;

typedef struct {
    net_rdv_key k;
    union {
        int64_t i;
        const void *p;
    } v;
} net_rdv_slot;

typedef struct {
    net_rdv_slot *s;
    uint32_t cap; /* 0 or a power of two */
    uint32_t n;   /* entries */
} net_rdv;

void net_rdv_init(net_rdv *t);
void net_rdv_free(net_rdv *t);

/* The entry of key k, or NULL. */
net_rdv_slot *net_rdv_find(const net_rdv *t, net_rdv_key k);

/* Insert k (not present; k.a != NET_RDV_EMPTY): *out gets its slot, value
 * zero, for the caller to fill. TS_EINVAL for the reserved key, TS_ENOMEM
 * (the table unchanged). */
int net_rdv_put(net_rdv *t, net_rdv_key k, net_rdv_slot **out);

/* Remove the entry at slot s (from find or put, no put or remove since). */
void net_rdv_remove(net_rdv *t, net_rdv_slot *s);

#endif
