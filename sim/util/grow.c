/* grow — see grow.h. */
#include "sim/util/grow.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "sim/util/err.h"

/* grow_to with the capacity kept <= max_items. */
static int grow_capped(void **items, size_t *cap, size_t need, size_t first_cap, size_t elem_bytes, size_t max_items)
{
    int rc = TS_OK;
    size_t limit = elem_bytes ? SIZE_MAX / elem_bytes : 0;
    if (limit > max_items)
        limit = max_items;
    if (need <= *cap) {
        rc = TS_OK;
    } else if (need > limit) {
        rc = TS_ENOMEM;
    } else {
        size_t ncap = *cap ? *cap : first_cap ? first_cap : need;
        if (ncap > limit)
            ncap = limit;
        while (ncap < need)
            ncap = ncap > limit / 2 ? limit : 2 * ncap;
        void *q = realloc(*items, ncap * elem_bytes); /* ncap <= SIZE_MAX / elem_bytes */
        if (q) {
            *items = q;
            *cap = ncap;
        } else {
            rc = TS_ENOMEM;
        }
    }
    return rc;
}

int grow_to(void **items, size_t *cap, size_t need, size_t first_cap, size_t elem_bytes)
{
    return grow_capped(items, cap, need, first_cap, elem_bytes, SIZE_MAX);
}

int grow_to_int(void **items, int *cap, int need, int first_cap, size_t elem_bytes)
{
    int rc = TS_OK;
    if (need <= *cap) {
        rc = TS_OK;
    } else if (*cap < 0 || first_cap < 0) {
        rc = TS_ESTATE;
    } else {
        size_t c = (size_t)*cap;
        rc = grow_capped(items, &c, (size_t)need, (size_t)first_cap, elem_bytes, INT_MAX);
        if (rc == TS_OK)
            *cap = (int)c;
    }
    return rc;
}
