/* net_rdv — see net_rdv.h. */
#include "sim/net/net_rdv.h"

#include <stdlib.h>

/* splitmix64's finalizer (Steele et al. 2014) over both words. */
static uint64_t hash_key(net_rdv_key k)
{
    uint64_t z = k.a ^ (k.b * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int same(net_rdv_key x, net_rdv_key y)
{
    return x.a == y.a && x.b == y.b;
}

void net_rdv_init(net_rdv *t)
{
    t->s = NULL;
    t->cap = 0;
    t->n = 0;
}

void net_rdv_free(net_rdv *t)
{
    free(t->s);
    net_rdv_init(t);
}

net_rdv_slot *net_rdv_find(const net_rdv *t, net_rdv_key k)
{
    if (t->n == 0)
        return NULL;
    uint32_t mask = t->cap - 1;
    for (uint32_t i = (uint32_t)hash_key(k) & mask;; i = (i + 1) & mask) {
        net_rdv_slot *s = &t->s[i];
        if (s->k.a == NET_RDV_EMPTY)
            return NULL;
        if (same(s->k, k))
            return s;
    }
}

/* Place k in the first free slot of its probe sequence (k absent). */
static net_rdv_slot *place(net_rdv *t, net_rdv_key k)
{
    uint32_t mask = t->cap - 1, i = (uint32_t)hash_key(k) & mask;
    while (t->s[i].k.a != NET_RDV_EMPTY)
        i = (i + 1) & mask;
    t->s[i].k = k;
    t->s[i].v.i = 0;
    return &t->s[i];
}

static int grow(net_rdv *t)
{
    uint32_t cap = t->cap ? 2 * t->cap : 64;
    if (cap == 0 || cap > (UINT32_MAX >> 1))
        return TS_ENOMEM;
    net_rdv_slot *s = malloc(sizeof *s * (size_t)cap);
    if (!s)
        return TS_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        s[i].k.a = NET_RDV_EMPTY;
    net_rdv old = *t;
    t->s = s;
    t->cap = cap;
    for (uint32_t i = 0; i < old.cap; i++)
        if (old.s[i].k.a != NET_RDV_EMPTY)
            place(t, old.s[i].k)->v = old.s[i].v;
    free(old.s);
    return TS_OK;
}

int net_rdv_put(net_rdv *t, net_rdv_key k, net_rdv_slot **out)
{
    if (k.a == NET_RDV_EMPTY)
        return TS_EINVAL;
    if (2 * (t->n + 1) > t->cap && grow(t))
        return TS_ENOMEM;
    *out = place(t, k);
    t->n++;
    return TS_OK;
}

void net_rdv_remove(net_rdv *t, net_rdv_slot *s)
{
    uint32_t mask = t->cap - 1, hole = (uint32_t)(s - t->s);
    /* backward shift: move up each following entry whose home is not
     * between the hole and it (cyclically) */
    for (uint32_t j = (hole + 1) & mask; t->s[j].k.a != NET_RDV_EMPTY; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)hash_key(t->s[j].k) & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->s[hole] = t->s[j];
            hole = j;
        }
    }
    t->s[hole].k.a = NET_RDV_EMPTY;
    t->n--;
}
