/* ckd — checked arithmetic for sizes (bytes, elements) and times (ns).
 *
 * Sizes multiply (batch x heads x seq x seq ...) and times add up; a product
 * or sum past int64 must be an error, never a wrapped (negative) number.
 * The ckd_*_i64 helpers return true on overflow (like C23's ckd_mul) and
 * leave *out unspecified then. Times are bounded by CKD_MAX_NS = 2^62 ns
 * (about 146 years of simulated time): anything longer is refused by the
 * engine, and the bound leaves room to add two such times without overflow.
 */
#ifndef TRAINSIM_CKD_H
#define TRAINSIM_CKD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define CKD_MAX_NS    ((int64_t)1 << 62)
#define CKD_MAX_BYTES ((int64_t)1 << 62)

/* a * b into *out; true on overflow. */
static inline bool ckd_mul_i64(int64_t *out, int64_t a, int64_t b)
{
    return __builtin_mul_overflow(a, b, out);
}

/* a + b into *out; true on overflow. */
static inline bool ckd_add_i64(int64_t *out, int64_t a, int64_t b)
{
    return __builtin_add_overflow(a, b, out);
}

/* A time in ns (double) rounded to int64; anything at or past CKD_MAX_NS (or
 * not a number) becomes INT64_MAX, which the engine refuses with the task
 * that asked for it. Negative times round as they are (callers reject them). */
static inline int64_t ckd_ns(double ns)
{
    if (!(ns < (double)CKD_MAX_NS))
        return INT64_MAX;
    if (ns <= -(double)CKD_MAX_NS)
        return -CKD_MAX_NS;
    return (int64_t)llround(ns);
}

/* a + b for times in ns, saturating at INT64_MAX (refused by the engine). */
static inline int64_t ckd_add_ns(int64_t a, int64_t b)
{
    int64_t s;
    return __builtin_add_overflow(a, b, &s) ? INT64_MAX : s;
}

#endif
