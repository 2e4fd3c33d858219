/* fd_check — the finite-difference check the executor's kernel tests
 * share: a deterministic uniform generator, random vectors, the probe loss
 * L = sum(out * R) and the central-difference comparison of an analytic
 * gradient with it (tolerances FD_ABS + FD_REL |fd|, step FD_H: fp32
 * kernels, O(h^2) truncation). Header-only, for tests/unit. */
#ifndef TRAINSIM_TESTS_FD_CHECK_H
#define TRAINSIM_TESTS_FD_CHECK_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#define FD_H   1e-2f
#define FD_ABS 1e-3
#define FD_REL 1e-2

static inline float urand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* n values in [-scale, scale) from seed; the caller frees. */
static inline float *rvec(size_t n, unsigned seed, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = scale * urand(&seed);
    return v;
}

static inline double probe(const float *out, const float *R, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)out[i] * R[i];
    return s;
}

/* A forward under test: recomputes `out` from its inputs. */
typedef void (*fwd_fn)(void *ctx);

/* Check analytic gradient g[0..n) of L = probe(out, R) w.r.t. x[0..n). */
static inline void check_fd(const char *what, fwd_fn f, void *ctx, float *x, const float *g, size_t n, const float *out,
                            const float *R, size_t nout)
{
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i];
        x[i] = x0 + FD_H;
        f(ctx);
        double lp = probe(out, R, nout);
        x[i] = x0 - FD_H;
        f(ctx);
        double lm = probe(out, R, nout);
        x[i] = x0;
        double fd = (lp - lm) / (2.0 * FD_H);
        cr_assert(fabs(g[i] - fd) <= FD_ABS + FD_REL * fabs(fd), "%s: gradient[%zu] = %.6g, finite difference %.6g",
                  what, i, g[i], fd);
    }
    f(ctx);
}

#endif
