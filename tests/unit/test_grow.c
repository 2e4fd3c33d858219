/* grow: the first capacity, doubling, contents kept across moves, and the
 * refusals (sizes past size_t or INT_MAX, bad capacities) that change
 * nothing. No test makes realloc itself fail: under AddressSanitizer a
 * huge request aborts instead of returning NULL. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "sim/util/err.h"
#include "sim/util/grow.h"

Test(grow, first_allocation_takes_first_cap)
{
    int *a = NULL;
    size_t cap = 0;
    cr_assert_eq(grow_to((void **)&a, &cap, 1, 16, sizeof *a), TS_OK);
    cr_assert_not_null(a);
    cr_assert_eq(cap, 16);
    free(a);
}

Test(grow, first_cap_zero_means_exactly_need)
{
    int *a = NULL;
    size_t cap = 0;
    cr_assert_eq(grow_to((void **)&a, &cap, 7, 0, sizeof *a), TS_OK);
    cr_assert_eq(cap, 7);
    free(a);
}

Test(grow, doubles_until_need_fits)
{
    int *a = NULL;
    size_t cap = 0;
    cr_assert_eq(grow_to((void **)&a, &cap, 9, 4, sizeof *a), TS_OK);
    cr_assert_eq(cap, 16, "4 doubled twice holds 9");
    cr_assert_eq(grow_to((void **)&a, &cap, 17, 4, sizeof *a), TS_OK);
    cr_assert_eq(cap, 32, "an existing capacity doubles, first_cap is not used again");
    free(a);
}

Test(grow, enough_room_changes_nothing)
{
    int *a = NULL;
    size_t cap = 0;
    cr_assert_eq(grow_to((void **)&a, &cap, 8, 8, sizeof *a), TS_OK);
    int *before = a;
    cr_assert_eq(grow_to((void **)&a, &cap, 8, 64, sizeof *a), TS_OK);
    cr_assert_eq(grow_to((void **)&a, &cap, 0, 64, sizeof *a), TS_OK);
    cr_assert_eq(a, before);
    cr_assert_eq(cap, 8);
    free(a);
}

Test(grow, appends_keep_contents_across_moves)
{
    size_t *a = NULL, n = 0, cap = 0;
    for (size_t i = 0; i < 1000; i++) {
        if (n == cap)
            cr_assert_eq(grow_to((void **)&a, &cap, n + 1, 2, sizeof *a), TS_OK);
        /* cppcheck-suppress nullPointer ; the assertion above ends the test unless a holds n + 1 items */
        a[n++] = i * 3;
    }
    cr_assert_eq(cap, 1024);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(a[i], i * 3, "item %zu", i);
    free(a);
}

Test(grow, bytes_past_size_max_are_refused_unchanged)
{
    char *a = NULL;
    size_t cap = 0;
    cr_assert_eq(grow_to((void **)&a, &cap, 4, 4, 1), TS_OK);
    char *before = a;
    size_t elem = SIZE_MAX / 2; /* 3 items of it would wrap */
    cr_assert_eq(grow_to((void **)&a, &cap, 5, 0, elem), TS_ENOMEM);
    cr_assert_eq(grow_to((void **)&a, &cap, SIZE_MAX, 0, 2), TS_ENOMEM);
    cr_assert_eq(a, before);
    cr_assert_eq(cap, 4);
    free(a);
}

Test(grow, zero_sized_items_are_refused)
{
    void *a = NULL;
    size_t cap = 0;
    cr_assert_eq(grow_to(&a, &cap, 1, 1, 0), TS_ENOMEM);
    cr_assert_null(a);
    cr_assert_eq(cap, 0);
}

Test(grow, int_capacities)
{
    double *a = NULL;
    int cap = 0;
    cr_assert_eq(grow_to_int((void **)&a, &cap, 5, 4, sizeof *a), TS_OK);
    cr_assert_eq(cap, 8);
    a[7] = 1.5;
    cr_assert_eq(grow_to_int((void **)&a, &cap, 9, 4, sizeof *a), TS_OK);
    cr_assert_eq(cap, 16);
    cr_assert_eq(a[7], 1.5);
    double *before = a;
    cr_assert_eq(grow_to_int((void **)&a, &cap, -1, 4, sizeof *a), TS_OK, "a negative need fits");
    cr_assert_eq(a, before);
    free(a);
}

Test(grow, int_refusals_change_nothing)
{
    char *a = NULL;
    int cap = -1;
    cr_assert_eq(grow_to_int((void **)&a, &cap, 1, 4, 1), TS_ESTATE, "negative capacity");
    cap = 0;
    cr_assert_eq(grow_to_int((void **)&a, &cap, 1, -4, 1), TS_ESTATE, "negative first capacity");
    cr_assert_eq(grow_to_int((void **)&a, &cap, 3, 0, SIZE_MAX / 2), TS_ENOMEM, "bytes past size_t");
    cr_assert_null(a);
    cr_assert_eq(cap, 0);
}
