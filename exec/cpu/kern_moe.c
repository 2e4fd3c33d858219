/* kern_moe — MoE row permutes, combine and router backward, fp32 loops. */
#include "exec/cpu/kern_moe.h"

#include <limits.h>
#include <math.h>
#include <string.h>

void kern_moe_gather(float *dst, const float *src, const int *rows, size_t nrows, int div, int C)
{
    for (size_t r = 0; r < nrows; r++)
        memcpy(dst + r * (size_t)C, src + (size_t)(rows[r] / div) * (size_t)C, (size_t)C * sizeof(float));
}

void kern_moe_scatter(float *dst, const float *src, const int *rows, size_t nrows, int C)
{
    for (size_t r = 0; r < nrows; r++)
        memcpy(dst + (size_t)rows[r] * (size_t)C, src + r * (size_t)C, (size_t)C * sizeof(float));
}

void kern_moe_combine(float *out, const float *y, const float *wts, const int *idx, const int *pos, size_t N, int k,
                      int C)
{
    for (size_t t = 0; t < N; t++) {
        float *o = out + t * (size_t)C;
        const int *id = idx + t * (size_t)k;
        for (int c = 0; c < C; c++)
            o[c] = 0.0f;
        int last = INT_MIN;
        for (int step = 0; step < k; step++) { /* the slots by ascending expert */
            int j = -1;
            for (int q = 0; q < k; q++)
                if (id[q] > last && (j < 0 || id[q] < id[j]))
                    j = q;
            if (j < 0)
                break;
            last = id[j];
            size_t sl = t * (size_t)k + (size_t)j;
            if (pos[sl] < 0)
                continue;
            float w = wts ? wts[sl] : 1.0f;
            const float *yr = y + (size_t)pos[sl] * (size_t)C;
            for (int c = 0; c < C; c++)
                o[c] += w * yr[c];
        }
    }
}

void kern_moe_combine_bwd(float *dy, float *g, const float *dout, const float *y, const float *wts,
                          const int *send_slot, size_t nsend, int k, int C)
{
    for (size_t p = 0; p < nsend; p++) {
        size_t sl = (size_t)send_slot[p];
        const float *d = dout + (sl / (size_t)k) * (size_t)C, *yr = y + p * (size_t)C;
        float *o = dy + p * (size_t)C, acc = 0.0f;
        for (int c = 0; c < C; c++) {
            acc += d[c] * yr[c];
            o[c] = wts[sl] * d[c];
        }
        g[sl] = acc;
    }
}

void kern_moe_router_bwd(float *dlog, const float *logits, const int *idx, const int *keep, const float *g, size_t N,
                         int E, int k)
{
    for (size_t t = 0; t < N; t++) {
        const float *lg = logits + t * (size_t)E;
        const int *id = idx + t * (size_t)k;
        float *dl = dlog + t * (size_t)E;
        double mx = lg[id[0]], z = 0.0, G = 0.0;
        for (int j = 1; j < k; j++)
            mx = fmax(mx, (double)lg[id[j]]);
        for (int j = 0; j < k; j++)
            z += exp((double)lg[id[j]] - mx);
        for (int j = 0; j < k; j++) {
            size_t sl = t * (size_t)k + (size_t)j;
            G += keep[sl] ? (double)g[sl] * (exp((double)lg[id[j]] - mx) / z) : 0.0;
        }
        for (int e = 0; e < E; e++)
            dl[e] = 0.0f;
        for (int j = 0; j < k; j++) {
            size_t sl = t * (size_t)k + (size_t)j;
            double gj = keep[sl] ? (double)g[sl] : 0.0;
            dl[id[j]] = (float)((exp((double)lg[id[j]] - mx) / z) * (gj - G));
        }
    }
}
