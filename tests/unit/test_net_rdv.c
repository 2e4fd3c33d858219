/* net_rdv: puts, finds and removals against a plain array, through growth
 * and the backward shift of removals; the reserved key is refused. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "sim/net/net_rdv.h"

#define N 5000

static net_rdv_key key_of(int i)
{
    /* keys that differ in one word only, as the rendezvous' do */
    return (net_rdv_key){(uint64_t)(i % 97) << 32 | (uint64_t)(i / 97), (uint64_t)(i % 3)};
}

Test(net_rdv, matches_a_reference_through_growth_and_removals)
{
    net_rdv t;
    net_rdv_init(&t);
    static int present[N];
    for (int i = 0; i < N; i++) {
        net_rdv_slot *s = NULL;
        cr_assert_null(net_rdv_find(&t, key_of(i)));
        cr_assert_eq(net_rdv_put(&t, key_of(i), &s), TS_OK);
        cr_assert_eq(s->v.i, 0, "a new slot's value is zero");
        s->v.i = 10 * i + 1;
        present[i] = 1;
    }
    cr_assert_eq(t.n, N);
    cr_assert(t.cap >= 2 * N && (t.cap & (t.cap - 1)) == 0, "cap %u: a power of two, at most half full", t.cap);
    /* remove a pseudo-random two thirds, checking everything after each batch */
    uint64_t r = 12345;
    for (int round = 0; round < 4; round++) {
        for (int j = 0; j < N / 6; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int i = (int)((r >> 33) % N);
            net_rdv_slot *s = net_rdv_find(&t, key_of(i));
            if (present[i]) {
                cr_assert_not_null(s, "key %d lost", i);
                cr_assert_eq(s->v.i, 10 * i + 1);
                net_rdv_remove(&t, s);
                present[i] = 0;
            } else {
                cr_assert_null(s, "key %d found after its removal", i);
            }
        }
        uint32_t n = 0;
        for (int i = 0; i < N; i++) {
            net_rdv_slot *s = net_rdv_find(&t, key_of(i));
            cr_assert_eq(s != NULL, present[i] != 0, "key %d: found %d, present %d", i, s != NULL, present[i]);
            if (s)
                cr_assert_eq(s->v.i, 10 * i + 1);
            n += (uint32_t)present[i];
        }
        cr_assert_eq(t.n, n);
    }
    net_rdv_free(&t);
    cr_assert_eq(t.n, 0);
    cr_assert_null(net_rdv_find(&t, key_of(1)));
}

Test(net_rdv, reserved_key_refused_and_pointer_values_kept)
{
    net_rdv t;
    net_rdv_init(&t);
    net_rdv_slot *s = NULL;
    cr_assert_eq(net_rdv_put(&t, (net_rdv_key){NET_RDV_EMPTY, 0}, &s), TS_EINVAL);
    cr_assert_eq(t.n, 0);
    static const int x = 7;
    cr_assert_eq(net_rdv_put(&t, (net_rdv_key){1, 2}, &s), TS_OK);
    s->v.p = &x;
    cr_assert_null(net_rdv_find(&t, (net_rdv_key){2, 1}), "the words are not interchangeable");
    cr_assert_eq(net_rdv_find(&t, (net_rdv_key){1, 2})->v.p, &x);
    net_rdv_free(&t);
}
