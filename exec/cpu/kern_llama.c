#include "exec/cpu/kern_llama.h"

#include <math.h>
#include <string.h>

#include "exec/cpu/kern.h"

void kern_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float ms = 0.0f;
        for (int c = 0; c < C; c++)
            ms += x[c] * x[c];
        ms /= C;
        float s = 1.0f / sqrtf(ms + KERN_RMSNORM_EPS);
        float *o = out + n * C;
        for (int c = 0; c < C; c++)
            o[c] = x[c] * s * w[c];
        rstd[n] = s;
    }
}

void kern_rmsnorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd,
                            size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *dy = dout + n * C;
        float *dx = dinp + n * C;
        float s = rstd[n];
        /* g = dy * w, xhat = x * s: dx = s * (g - xhat * mean(g * xhat)) */
        float gx = 0.0f;
        for (int c = 0; c < C; c++)
            gx += w[c] * dy[c] * x[c] * s;
        gx /= C;
        for (int c = 0; c < C; c++)
            dx[c] += s * (w[c] * dy[c] - x[c] * s * gx);
    }
}

void kern_rmsnorm_bwd_weight(float *dw, const float *dout, const float *inp, const float *rstd, size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *dy = dout + n * C;
        float s = rstd[n];
        for (int c = 0; c < C; c++)
            dw[c] += dy[c] * x[c] * s;
    }
}

static inline float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void kern_swiglu_fwd(float *out, const float *inp, size_t N, int F)
{
    for (size_t n = 0; n < N; n++) {
        const float *g = inp + n * 2 * F, *u = g + F;
        float *o = out + n * F;
        for (int j = 0; j < F; j++)
            o[j] = g[j] * sigmoidf(g[j]) * u[j];
    }
}

void kern_swiglu_bwd(float *dinp, const float *inp, const float *dout, size_t N, int F)
{
    for (size_t n = 0; n < N; n++) {
        const float *g = inp + n * 2 * F, *u = g + F, *dy = dout + n * F;
        float *dg = dinp + n * 2 * F, *du = dg + F;
        for (int j = 0; j < F; j++) {
            float sg = sigmoidf(g[j]);
            float silu = g[j] * sg;
            dg[j] += dy[j] * u[j] * sg * (1.0f + g[j] * (1.0f - sg));
            du[j] += dy[j] * silu;
        }
    }
}

/* Rotate the q and k heads of every row by +angle (dir = 1) or -angle; row
 * n at position n % T (T > 0) or pos0 + n (T = 0). */
static void rope_apply(float *qkv, size_t N, int T, int pos0, int NH, int NKV, int hs, float base, float dir)
{
    int half = hs / 2, heads = NH + NKV;
    size_t width = (size_t)(NH + 2 * NKV) * hs;
    for (size_t n = 0; n < N; n++) {
        double pos = T > 0 ? (double)(n % (size_t)T) : (double)pos0 + (double)n;
        float *row = qkv + n * width;
        for (int i = 0; i < half; i++) {
            double ang = pos * pow((double)base, -2.0 * i / hs);
            float c = (float)cos(ang), s = dir * (float)sin(ang);
            for (int h = 0; h < heads; h++) {
                float *x = row + (size_t)h * hs;
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c - x2 * s;
                x[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

void kern_rope_fwd(float *qkv, size_t N, int T, int NH, int NKV, int hs, float base)
{
    rope_apply(qkv, N, T, 0, NH, NKV, hs, base, 1.0f);
}

void kern_rope_bwd(float *dqkv, size_t N, int T, int NH, int NKV, int hs, float base)
{
    rope_apply(dqkv, N, T, 0, NH, NKV, hs, base, -1.0f);
}

void kern_rope_at_fwd(float *qkv, size_t N, int pos0, int NH, int NKV, int hs, float base)
{
    rope_apply(qkv, N, 0, pos0, NH, NKV, hs, base, 1.0f);
}

void kern_rope_at_bwd(float *dqkv, size_t N, int pos0, int NH, int NKV, int hs, float base)
{
    rope_apply(dqkv, N, 0, pos0, NH, NKV, hs, base, -1.0f);
}

void kern_attention_gqa_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int hs)
{
    size_t C = (size_t)NH * hs, W = (size_t)(NH + 2 * NKV) * hs, KV = (size_t)NKV * hs;
    int per = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t ko = C + (size_t)(h / per) * hs, vo = ko + KV;
            float *a = att + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * W + (size_t)h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + ko;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++)
                        dot += q[i] * k[i];
                    a[(size_t)t * T + j] = dot;
                }
            }
            kern_softmax_causal_fwd(a, T, scale);
            for (int t = 0; t < T; t++) {
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                memset(o, 0, sizeof(float) * hs);
                for (int j = 0; j <= t; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * W + vo;
                    float w = a[(size_t)t * T + j];
                    for (int i = 0; i < hs; i++)
                        o[i] += w * v[i];
                }
            }
        }
}

void kern_attention_gqa_bwd(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                            int T, int NH, int NKV, int hs)
{
    size_t C = (size_t)NH * hs, W = (size_t)(NH + 2 * NKV) * hs, KV = (size_t)NKV * hs;
    int per = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t ko = C + (size_t)(h / per) * hs, vo = ko + KV;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            float *da = datt + ((size_t)b * NH + h) * T * T;
            /* through out = att v: datt = dout v^T, dv += att^T dout */
            for (int t = 0; t < T; t++) {
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int j = 0; j < T; j++) {
                    if (j > t) {
                        da[(size_t)t * T + j] = 0.0f;
                        continue;
                    }
                    const float *v = qkv + ((size_t)b * T + j) * W + vo;
                    float *dv = dqkv + ((size_t)b * T + j) * W + vo;
                    float w = a[(size_t)t * T + j], dot = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        dot += dy[i] * v[i];
                        dv[i] += w * dy[i];
                    }
                    da[(size_t)t * T + j] = dot;
                }
            }
            kern_softmax_causal_bwd(da, a, da, T, scale);
            /* through the scores q k^T */
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * W + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * W + (size_t)h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + ko;
                    float *dk = dqkv + ((size_t)b * T + j) * W + ko;
                    float d = da[(size_t)t * T + j];
                    for (int i = 0; i < hs; i++) {
                        dq[i] += d * k[i];
                        dk[i] += d * q[i];
                    }
                }
            }
        }
}

/* The norm of nh heads of hs (one row's q or k block) from x into o. */
static void qk_norm_block(float *o, float *mean, float *rstd, const float *x, const float *w, const float *b, int nh,
                          int hs)
{
    if (mean)
        kern_layernorm_fwd(o, mean, rstd, x, w, b, (size_t)nh, hs);
    else
        kern_rmsnorm_fwd(o, rstd, x, w, (size_t)nh, hs);
}

void kern_qknorm_fwd(float *qkv, float *xin, float *mean, float *rstd, const float *qw, const float *qb,
                     const float *kw, const float *kb, size_t N, int NH, int NKV, int hs)
{
    size_t W = ((size_t)NH + 2 * (size_t)NKV) * (size_t)hs, nqk = (size_t)NH + (size_t)NKV, wq = (size_t)NH * hs;
    for (size_t n = 0; n < N; n++) {
        float *row = qkv + n * W, *x = xin + n * nqk * hs, *m = mean ? mean + n * nqk : NULL, *r = rstd + n * nqk;
        memcpy(x, row, nqk * hs * sizeof *x);
        qk_norm_block(row, m, r, x, qw, qb, NH, hs);
        qk_norm_block(row + wq, m ? m + NH : NULL, r + NH, x + wq, kw, kb, NKV, hs);
    }
}

void kern_qknorm_bwd_weight(float *dqw, float *dqb, float *dkw, float *dkb, const float *dqkv, const float *xin,
                            const float *mean, const float *rstd, size_t N, int NH, int NKV, int hs)
{
    size_t W = ((size_t)NH + 2 * (size_t)NKV) * (size_t)hs, nqk = (size_t)NH + (size_t)NKV, wq = (size_t)NH * hs;
    for (size_t n = 0; n < N; n++) {
        const float *dy = dqkv + n * W, *x = xin + n * nqk * hs, *r = rstd + n * nqk;
        if (mean) {
            const float *m = mean + n * nqk;
            kern_layernorm_bwd_weight(dqw, dqb, dy, x, m, r, (size_t)NH, hs);
            kern_layernorm_bwd_weight(dkw, dkb, dy + wq, x + wq, m + NH, r + NH, (size_t)NKV, hs);
        } else {
            kern_rmsnorm_bwd_weight(dqw, dy, x, r, (size_t)NH, hs);
            kern_rmsnorm_bwd_weight(dkw, dy + wq, x + wq, r + NH, (size_t)NKV, hs);
        }
    }
}

void kern_qknorm_bwd_input(float *dqkv, const float *xin, const float *mean, const float *rstd, const float *qw,
                           const float *kw, size_t N, int NH, int NKV, int hs)
{
    size_t W = ((size_t)NH + 2 * (size_t)NKV) * (size_t)hs, nqk = (size_t)NH + (size_t)NKV;
    for (size_t n = 0; n < N; n++)
        for (size_t h = 0; h < nqk; h++) {
            float *d = dqkv + n * W + h * hs;
            const float *x = xin + (n * nqk + h) * hs, *w = h < (size_t)NH ? qw : kw;
            float m = mean ? mean[n * nqk + h] : 0.0f, s = rstd[n * nqk + h];
            /* dxhat = w dy; LayerNorm: dx = s (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
             * RMSNorm: dx = s (dxhat - xhat mean(dxhat xhat)) */
            float dm = 0.0f, dmx = 0.0f;
            for (int c = 0; c < hs; c++) {
                float xhat = (x[c] - m) * s, dxhat = w[c] * d[c];
                dm += dxhat;
                dmx += dxhat * xhat;
            }
            dm = mean ? dm / hs : 0.0f;
            dmx /= hs;
            for (int c = 0; c < hs; c++) {
                float xhat = (x[c] - m) * s, dxhat = w[c] * d[c];
                d[c] = s * (dxhat - dm - xhat * dmx);
            }
        }
}
