/* --moe-shared-expert-overlap: the chain rule of ops beside a transfer
 * (overlap_beside_chain_ns) reproduced by hand, and the MoE block's op
 * lists (moe_block_ops): the shared experts beside the dispatch all-to-all
 * (forward) and the combine's backward all-to-all (B, I), the same ops and
 * flops as without the flag, nothing changed without an all-to-all (ep 1)
 * or in W. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/core/overlap.h"
#include "sim/model/flops.h"
#include "sim/model/moe.h"
#include "tests/unit/layer_fixture.h"

/* Transfer 1000 ns, three ops of 300 ns on 132 SMs, 20 taken: 300 x 132 /
 * 112 = 353.57 -> 354 twice (the transfer outlasts them: 646, then 292
 * left), then 300 + 292 x 20 / 132 = 344.24 -> 344 (slowed until the
 * transfer ends), then 300 at full speed. */
Test(shared_overlap, chain_closed_form)
{
    int64_t left = 1000;
    cr_assert_eq(overlap_beside_chain_ns(300, &left, 132, 20), 354);
    cr_assert_eq(left, 646);
    cr_assert_eq(overlap_beside_chain_ns(300, &left, 132, 20), 354);
    cr_assert_eq(left, 292);
    cr_assert_eq(overlap_beside_chain_ns(300, &left, 132, 20), 344);
    cr_assert_eq(left, 0);
    cr_assert_eq(overlap_beside_chain_ns(300, &left, 132, 20), 300);
    cr_assert_eq(left, 0);
    /* SMs unknown: no slowdown, the transfer still counted down */
    left = 500;
    cr_assert_eq(overlap_beside_chain_ns(300, &left, 0, 20), 300);
    cr_assert_eq(left, 200);
}

/* Never slower than the op alone by more than the SM share of the
 * transfer's remaining time, never faster than the op alone. */
Test(shared_overlap, chain_bounds)
{
    for (int64_t comm = 0; comm <= 4000; comm += 250)
        for (int64_t comp = 1; comp <= 4000; comp += 333) {
            int64_t left = comm;
            int64_t t = overlap_beside_chain_ns(comp, &left, 132, 20);
            cr_assert_geq(t, comp);
            cr_assert_leq(t, overlap_sm_slowed_ns(comp, 132, 20));
            cr_assert_leq((double)t, (double)comp + (double)comm * 20.0 / 132.0 + 0.5);
            cr_assert_eq(left, comm > t ? comm - t : 0);
        }
}

static layer_shape shape_of(void)
{
    return layer_fixture_mixtral();
}

static moe_config moe_of(int ep, bool overlap)
{
    moe_config e;
    memset(&e, 0, sizeof e);
    e.num_experts = 8;
    e.topk = 2;
    e.ffn_hidden_size = 14336;
    e.shared_ffn_hidden_size = 4096;
    e.ep = ep;
    e.etp = 1;
    e.dispatcher = MOE_DISPATCH_ALLTOALL;
    e.shared_overlap = overlap;
    return e;
}

static void ops_of(int ep, bool overlap, layer_pass pass, layer_ops *o)
{
    layer_shape L = shape_of();
    moe_config e = moe_of(ep, overlap);
    ts_err err;
    o->n = 0;
    cr_assert_eq(moe_block_ops(&L, &e, 1.0, pass, o, &err), TS_OK, "%s", err.msg);
}

static int find(const layer_ops *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->op[i].name, name))
            return i;
    return -1;
}

/* The shared ops of o beside all-to-all a: the first waits for what a
 * waits for, each marked beside a; the op after them (next) waits for them
 * and for a. */
static void check_beside(const layer_ops *o, const char *a2a, const char *first, const char *next, int n_shared)
{
    int a = find(o, a2a), s = find(o, first), x = find(o, next);
    cr_assert(a >= 0 && s == a + 1 && x == s + n_shared, "%s at %d, %s at %d, %s at %d", a2a, a, first, s, next, x);
    cr_assert_eq(o->op[s].dep[0], o->op[a].dep[0]);
    for (int i = s; i < x; i++) {
        cr_assert_eq(o->op[i].overlap, a, "%s", o->op[i].name);
        cr_assert(!strncmp(o->op[i].name, "moe.shared.", 11), "%s", o->op[i].name);
    }
    cr_assert_eq(o->op[x].dep[0], x - 1);
    cr_assert_eq(o->op[x].dep[1], a);
}

Test(shared_overlap, op_lists)
{
    layer_ops off, on;
    ops_of(8, true, LAYER_PASS_F, &on);
    check_beside(&on, "moe.a2a.dispatch", "moe.shared.fc1", "moe.fc1", 3);
    ops_of(8, true, LAYER_PASS_B, &on);
    check_beside(&on, "moe.a2a.combine.bwd", "moe.shared.fc2.dgrad", "moe.fc2.dgrad", 5);
    ops_of(8, true, LAYER_PASS_I, &on);
    check_beside(&on, "moe.a2a.combine.bwd", "moe.shared.fc2.dgrad", "moe.fc2.dgrad", 3);
    /* the same ops and flops in every pass; W (no all-to-all) and ep 1 (none
     * at all) listed exactly as without the flag */
    layer_pass passes[] = {LAYER_PASS_F, LAYER_PASS_B, LAYER_PASS_I, LAYER_PASS_W};
    for (int p = 0; p < 4; p++) {
        ops_of(8, false, passes[p], &off);
        ops_of(8, true, passes[p], &on);
        cr_assert_eq(on.n, off.n);
        cr_assert_float_eq(layer_ops_flops(&on), layer_ops_flops(&off), 1e-6 * layer_ops_flops(&off));
        if (passes[p] == LAYER_PASS_W)
            cr_assert_eq(memcmp(on.op, off.op, (size_t)on.n * sizeof on.op[0]), 0);
        ops_of(1, false, passes[p], &off);
        ops_of(1, true, passes[p], &on);
        cr_assert_eq(on.n, off.n);
        cr_assert_eq(memcmp(on.op, off.op, (size_t)on.n * sizeof on.op[0]), 0);
    }
}
