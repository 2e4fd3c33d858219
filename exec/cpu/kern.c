#include "exec/cpu/kern.h"

#include <math.h>
#include <string.h>

#define LN_EPS 1e-5f

void kern_embed_fwd(float *out, const int *tokens, const float *wte, const float *wpe, size_t row0, size_t n, int T,
                    int C)
{
    for (size_t i = 0; i < n; i++) {
        size_t row = row0 + i;
        const float *e = wte + (size_t)tokens[row] * C;
        float *o = out + i * C;
        if (!wpe) {
            memcpy(o, e, sizeof(float) * C);
            continue;
        }
        const float *p = wpe + (row % (size_t)T) * C;
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
}

void kern_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, size_t row0, size_t n, int T, int C)
{
    for (size_t i = 0; i < n; i++) {
        size_t row = row0 + i;
        float *de = dwte + (size_t)tokens[row] * C;
        const float *d = dout + i * C;
        for (int c = 0; c < C; c++)
            de[c] += d[c];
        if (!dwpe)
            continue;
        float *dp = dwpe + (row % (size_t)T) * C;
        for (int c = 0; c < C; c++)
            dp[c] += d[c];
    }
}

void kern_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += d * d;
        }
        var /= C;
        float s = 1.0f / sqrtf(var + LN_EPS);
        float *o = out + n * C;
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void kern_layernorm_bwd_input(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                              const float *rstd, size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *dy = dout + n * C;
        float *dx = dinp + n * C;
        float m = mean[n], s = rstd[n];
        /* dxhat = dy * w; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dxhat = w[c] * dy[c];
            dnorm_mean += dxhat;
            dnorm_norm_mean += dxhat * xhat;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dxhat = w[c] * dy[c];
            dx[c] += s * (dxhat - dnorm_mean - xhat * dnorm_norm_mean);
        }
    }
}

void kern_layernorm_bwd_weight(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                               const float *rstd, size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *dy = dout + n * C;
        float m = mean[n], s = rstd[n];
        for (int c = 0; c < C; c++) {
            dw[c] += dy[c] * (x[c] - m) * s;
            db[c] += dy[c];
        }
    }
}

void kern_softmax_causal_fwd(float *x, int T, float scale)
{
    for (int t = 0; t < T; t++) {
        float *row = x + (size_t)t * T;
        float mx = -INFINITY;
        for (int j = 0; j <= t; j++)
            if (row[j] * scale > mx)
                mx = row[j] * scale;
        float sum = 0.0f;
        for (int j = 0; j <= t; j++) {
            row[j] = expf(row[j] * scale - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= t; j++)
            row[j] *= inv;
        for (int j = t + 1; j < T; j++)
            row[j] = 0.0f;
    }
}

void kern_softmax_causal_bwd(float *dx, const float *y, const float *dy, int T, float scale)
{
    for (int t = 0; t < T; t++) {
        const float *yr = y + (size_t)t * T, *dyr = dy + (size_t)t * T;
        float *dxr = dx + (size_t)t * T;
        float s = 0.0f;
        for (int j = 0; j <= t; j++)
            s += yr[j] * dyr[j];
        for (int j = 0; j <= t; j++)
            dxr[j] = scale * yr[j] * (dyr[j] - s);
        for (int j = t + 1; j < T; j++)
            dxr[j] = 0.0f;
    }
}

void kern_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int hs)
{
    size_t C = (size_t)NH * hs, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *a = att + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hs;
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
                    const float *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + (size_t)h * hs;
                    float w = a[(size_t)t * T + j];
                    for (int i = 0; i < hs; i++)
                        o[i] += w * v[i];
                }
            }
        }
}

void kern_attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B, int T,
                        int NH, int hs)
{
    size_t C = (size_t)NH * hs, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
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
                    const float *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + (size_t)h * hs;
                    float *dv = dqkv + ((size_t)b * T + j) * C3 + 2 * C + (size_t)h * hs;
                    float w = a[(size_t)t * T + j], dot = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        dot += dy[i] * v[i];
                        dv[i] += w * dy[i];
                    }
                    da[(size_t)t * T + j] = dot;
                }
            }
            /* through the softmax, in place on da (rows read before written) */
            for (int t = 0; t < T; t++) {
                float *dr = da + (size_t)t * T;
                const float *yr = a + (size_t)t * T;
                float s = 0.0f;
                for (int j = 0; j <= t; j++)
                    s += yr[j] * dr[j];
                for (int j = 0; j <= t; j++)
                    dr[j] = scale * yr[j] * (dr[j] - s);
            }
            /* through the scores q k^T */
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hs;
                    float *dk = dqkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hs;
                    float d = da[(size_t)t * T + j];
                    for (int i = 0; i < hs; i++) {
                        dq[i] += d * k[i];
                        dk[i] += d * q[i];
                    }
                }
            }
        }
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one expf (tanhf is several times slower in glibc): exact to
 * fp32 rounding away from 0; the argument is clamped where tanh is +-1. */
static inline float fast_tanh(float x)
{
    if (x > 9.0f)
        return 1.0f;
    if (x < -9.0f)
        return -1.0f;
    float e = expf(2.0f * x);
    return (e - 1.0f) / (e + 1.0f);
}

void kern_gelu_fwd(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + fast_tanh(GELU_SCALE * (x + cube)));
    }
}

void kern_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float targ = GELU_SCALE * (x + cube);
        float th = fast_tanh(targ);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

void kern_bias_fwd(float *out, const float *bias, size_t N, int OC)
{
    for (size_t n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            out[n * OC + o] += bias[o];
}

void kern_bias_bwd(float *dbias, const float *dout, size_t N, int OC)
{
    for (size_t n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            dbias[o] += dout[n * OC + o];
}

void kern_bias_residual_fwd(float *out, const float *a, const float *b, const float *bias, size_t N, int OC)
{
    for (size_t n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            size_t i = n * OC + o;
            out[i] = a[i] + b[i] + (bias ? bias[o] : 0.0f);
        }
}

void kern_add(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void kern_crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets, size_t N, int V)
{
    for (size_t n = 0; n < N; n++) {
        const float *l = logits + n * V;
        float *p = probs + n * V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++)
            if (l[v] > mx)
                mx = l[v];
        float sum = 0.0f;
        for (int v = 0; v < V; v++) {
            p[v] = expf(l[v] - mx);
            sum += p[v];
        }
        float inv = 1.0f / sum;
        for (int v = 0; v < V; v++)
            p[v] *= inv;
        losses[n] = -logf(p[targets[n]]);
    }
}

void kern_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, size_t N, int V, float scale)
{
    for (size_t n = 0; n < N; n++) {
        const float *p = probs + n * V;
        float *d = dlogits + n * V;
        for (int v = 0; v < V; v++)
            d[v] += scale * (p[v] - (v == targets[n] ? 1.0f : 0.0f));
    }
}

void kern_adam(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
               float wd, int t)
{
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float mh = m[i] / c1, vh = v[i] / c2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

void kern_embed_pos_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B, int n, int pos0,
                        int C)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            size_t row = (size_t)b * n + i;
            const float *e = wte + (size_t)tokens[row] * C;
            const float *p = wpe + (size_t)(pos0 + i) * C;
            float *o = out + row * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        }
}

void kern_kv_append(float *kc, float *vc, const float *qkv, int B, int n, int pos0, int Tmax, int NH, int hs)
{
    size_t C = (size_t)NH * hs, C3 = 3 * C;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < n; i++) {
                const float *row = qkv + ((size_t)b * n + i) * C3 + (size_t)h * hs;
                size_t dst = (((size_t)b * NH + h) * Tmax + (size_t)(pos0 + i)) * hs;
                memcpy(kc + dst, row + C, sizeof(float) * hs);
                memcpy(vc + dst, row + 2 * C, sizeof(float) * hs);
            }
}

void kern_attention_kv_fwd(float *out, float *att, const float *qkv, const float *kc, const float *vc, int B, int n,
                           int pos0, int Tmax, int NH, int hs)
{
    size_t C = (size_t)NH * hs, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *K = kc + ((size_t)b * NH + h) * Tmax * hs, *V = vc + ((size_t)b * NH + h) * Tmax * hs;
            for (int i = 0; i < n; i++) {
                int len = pos0 + i + 1;
                const float *q = qkv + ((size_t)b * n + i) * C3 + (size_t)h * hs;
                float *a = att + (((size_t)b * NH + h) * n + i) * Tmax;
                /* kern_softmax_causal_fwd's row, on the len visible positions */
                float mx = -INFINITY;
                for (int j = 0; j < len; j++) {
                    const float *k = K + (size_t)j * hs;
                    float dot = 0.0f;
                    for (int x = 0; x < hs; x++)
                        dot += q[x] * k[x];
                    a[j] = dot;
                    if (dot * scale > mx)
                        mx = dot * scale;
                }
                float sum = 0.0f;
                for (int j = 0; j < len; j++) {
                    a[j] = expf(a[j] * scale - mx);
                    sum += a[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j < len; j++)
                    a[j] *= inv;
                float *o = out + ((size_t)b * n + i) * C + (size_t)h * hs;
                memset(o, 0, sizeof(float) * hs);
                for (int j = 0; j < len; j++) {
                    const float *v = V + (size_t)j * hs;
                    float w = a[j];
                    for (int x = 0; x < hs; x++)
                        o[x] += w * v[x];
                }
            }
        }
}
