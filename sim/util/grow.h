/* grow — growing a dynamic array: a first capacity, then doubling.
 *
 * An array is a pointer, a count the caller keeps, and a capacity in items.
 * Before appending, the caller asks for room for `need` items:
 *
 *   if (t->n == t->cap && grow_to((void **)&t->rows, &t->cap, t->n + 1, 32, sizeof *t->rows))
 *       return err_set(err, TS_ENOMEM, "%s: out of memory", path);
 *   t->rows[t->n++] = row;
 *
 * The capacity starts at first_cap items on the first allocation and doubles
 * until it holds `need` items, so n appends cost O(n) copies. Every size is
 * checked: a capacity whose byte count would overflow size_t is refused
 * like a failed allocation, never wrapped. The functions set no message:
 * the caller knows what the array holds and says so in its TS_ENOMEM.
 *
 * Ownership: *items stays the caller's (freed with free()) before and after
 * the call. On success it may have moved (realloc), so other pointers into
 * the old array are stale; on failure *items and *cap are left as they were,
 * the array still valid and still the caller's to free.
 */
#ifndef TRAINSIM_GROW_H
#define TRAINSIM_GROW_H

#include <stddef.h>

/* Make *items (capacity *cap items of elem_bytes each, elem_bytes > 0) hold
 * at least need items. Nothing happens when need <= *cap. Otherwise the
 * capacity becomes *cap, or first_cap when *cap is 0 (exactly need when
 * first_cap is 0 too), doubled until it is >= need; a doubling that would
 * pass the largest capacity whose bytes fit in size_t stops there. Returns
 * TS_OK, or TS_ENOMEM (nothing changed) when need items cannot be held or
 * realloc fails. */
int grow_to(void **items, size_t *cap, size_t need, size_t first_cap, size_t elem_bytes);

/* grow_to for arrays whose count and capacity are ints (the network
 * simulator's ids): the same policy, the capacity kept <= INT_MAX. need <=
 * *cap (a negative need included) does nothing; a negative *cap or
 * first_cap is TS_ESTATE. */
int grow_to_int(void **items, int *cap, int need, int first_cap, size_t elem_bytes);

#endif
