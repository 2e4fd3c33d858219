/* cp_attn — ring attention with the causal load-balanced split. */
#include "exec/core/cp_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/core/cp_split.h"
#include "sim/util/ckd.h"

/* Visit the admitted (query row, key row) pairs of rank r's queries against
 * the keys of rank src: local row indices and their global positions. */
typedef struct {
    int T, cp, r, src, Tl, cs;
} blockset;

static int admitted(const blockset *bs, int qi, int ki)
{
    if (bs->cp == 1) /* one rank: plain causal attention, any T */
        return ki <= qi;
    cp_mask m = cp_block(cp_chunk(bs->cp, bs->r, qi / bs->cs), cp_chunk(bs->cp, bs->src, ki / bs->cs));
    if (m == CP_SKIP)
        return 0;
    if (m == CP_FULL)
        return 1;
    return cp_global_pos(bs->T, bs->cp, bs->src, ki) <= cp_global_pos(bs->T, bs->cp, bs->r, qi);
}

static int ring_step(const cp_ring *ring, float **cur, float **nxt, size_t n, ts_err *err)
{
    int rc = ring->sendrecv(ring->ud, *cur, *nxt, n, err);
    float *t = *cur;
    *cur = *nxt;
    *nxt = t;
    return rc;
}

/* The split (cp > 1; one rank takes any T >= 1, cp_split_check's evenness aside). */
static int split_check(int T, int cp, ts_err *err)
{
    if (cp == 1 && T >= 1)
        return TS_OK;
    return cp_split_check(T, cp, err);
}

/* NKV divides NH, both >= 1, hs >= 1 (TS_EINVAL otherwise). */
static int heads_check(int NH, int NKV, int hs, ts_err *err)
{
    if (NH < 1 || NKV < 1 || hs < 1 || NH % NKV)
        return err_set(err, TS_EINVAL,
                       "cp attention: %d query heads, %d key/value heads of %d: the key/value heads must divide the "
                       "query heads (all >= 1)",
                       NH, NKV, hs);
    return TS_OK;
}

size_t cp_attn_ring_floats(int B, int T, int cp, int NKV, int hs, bool bwd)
{
    if (cp <= 1)
        return 0;
    return (size_t)B * (size_t)(T / cp) * (size_t)NKV * (size_t)hs * (bwd ? 8 : 4);
}

int cp_attn_fwd(const cp_ring *ring, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs,
                float *ring_ws, ts_err *err)
{
    int cp = ring->size, r = ring->rank, rc = split_check(T, cp, err);
    if (!rc)
        rc = heads_check(NH, NKV, hs, err);
    if (rc)
        return rc;
    int64_t big; /* the largest buffer: B * Tl rows of 4C floats, twice, in doubles at most */
    if (ckd_mul_i64(&big, (int64_t)B * NH, (int64_t)T) || ckd_mul_i64(&big, big, (int64_t)hs * 8) ||
        ckd_mul_i64(&big, big, (int64_t)sizeof(double)) || big > CKD_MAX_BYTES)
        return err_set(err, TS_EINVAL, "cp attention: B %d x T %d x NH %d x hs %d overflows", B, T, NH, hs);
    int Tl = T / cp, C = NH * hs, KV = NKV * hs, W = C + 2 * KV, per = NH / NKV;
    size_t nkv = cp > 1 ? (size_t)B * (size_t)Tl * 2 * (size_t)KV : 0; /* one rank reads qkv in place */
    float *own = cp > 1 && !ring_ws ? malloc(2 * nkv * sizeof(float)) : NULL, *buf = ring_ws ? ring_ws : own;
    size_t nst = (size_t)B * (size_t)NH * (size_t)Tl;
    double *mx = calloc(nst, sizeof(double)), *sum = calloc(nst, sizeof(double));
    double *acc = calloc((size_t)B * (size_t)Tl * (size_t)C, sizeof(double));
    if ((cp > 1 && !buf) || !mx || !sum || !acc) {
        rc = err_set(err, TS_ENOMEM, "cp_attn_fwd: out of memory");
        goto done;
    }
    float *cur = buf, *nxt = cp > 1 ? buf + nkv : NULL; /* [B*Tl, 2KV]: k | v */
    for (size_t row = 0; cp > 1 && row < (size_t)B * Tl; row++)
        memcpy(cur + row * 2 * KV, qkv + row * W + C, 2 * (size_t)KV * sizeof(float));
    for (size_t i = 0; i < nst; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0;
    }
    double scale = 1.0 / sqrt((double)hs);
    for (int step = 0; step < cp; step++) {
        blockset bs = {T, cp, r, cp_ring_src(cp, r, step), Tl, cp > 1 ? T / (2 * cp) : T};
        const float *kb = cp > 1 ? cur : qkv + C; /* rows of k | v */
        size_t ks = cp > 1 ? 2 * (size_t)KV : (size_t)W;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int qi = 0; qi < Tl; qi++) {
                    const float *q = qkv + ((size_t)b * Tl + qi) * W + (size_t)h * hs;
                    size_t st = ((size_t)b * NH + h) * Tl + qi;
                    double *o = acc + ((size_t)b * Tl + qi) * C + (size_t)h * hs;
                    for (int ki = 0; ki < Tl; ki++) {
                        if (!admitted(&bs, qi, ki))
                            continue;
                        const float *k = kb + ((size_t)b * Tl + ki) * ks + (size_t)(h / per) * hs, *v = k + KV;
                        double s = 0.0;
                        for (int d = 0; d < hs; d++)
                            s += (double)q[d] * k[d];
                        s *= scale;
                        if (s > mx[st]) { /* online softmax: rescale what was summed */
                            double f = exp(mx[st] - s);
                            sum[st] *= f;
                            for (int d = 0; d < hs; d++)
                                o[d] *= f;
                            mx[st] = s;
                        }
                        double p = exp(s - mx[st]);
                        sum[st] += p;
                        for (int d = 0; d < hs; d++)
                            o[d] += p * v[d];
                    }
                }
        if (step + 1 < cp && (rc = ring_step(ring, &cur, &nxt, nkv, err)))
            goto done;
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qi = 0; qi < Tl; qi++) {
                size_t st = ((size_t)b * NH + h) * Tl + qi, o = ((size_t)b * Tl + qi) * C + (size_t)h * hs;
                for (int d = 0; d < hs; d++)
                    out[o + d] = (float)(acc[o + d] / sum[st]);
                lse[st] = (float)(mx[st] + log(sum[st]));
            }
done:
    free(own);
    free(mx);
    free(sum);
    free(acc);
    return rc;
}

int cp_attn_bwd(const cp_ring *ring, float *dqkv, const float *dout, const float *out, const float *lse,
                const float *qkv, int B, int T, int NH, int NKV, int hs, float *ring_ws, ts_err *err)
{
    int cp = ring->size, r = ring->rank, rc = split_check(T, cp, err);
    if (!rc)
        rc = heads_check(NH, NKV, hs, err);
    if (rc)
        return rc;
    int64_t big; /* the largest buffer: B * Tl rows of 4C floats, twice, in doubles at most */
    if (ckd_mul_i64(&big, (int64_t)B * NH, (int64_t)T) || ckd_mul_i64(&big, big, (int64_t)hs * 8) ||
        ckd_mul_i64(&big, big, (int64_t)sizeof(double)) || big > CKD_MAX_BYTES)
        return err_set(err, TS_EINVAL, "cp attention: B %d x T %d x NH %d x hs %d overflows", B, T, NH, hs);
    int Tl = T / cp, C = NH * hs, KV = NKV * hs, W = C + 2 * KV, per = NH / NKV;
    size_t rows = (size_t)B * Tl, nkv = cp > 1 ? rows * 4 * (size_t)KV : 0; /* k | v | dk | dv; one rank: in place */
    float *own = cp > 1 && !ring_ws ? malloc(2 * nkv * sizeof(float)) : NULL, *buf = ring_ws ? ring_ws : own;
    double *D = calloc(rows * (size_t)NH, sizeof(double));
    if ((cp > 1 && !buf) || !D) {
        rc = err_set(err, TS_ENOMEM, "cp_attn_bwd: out of memory");
        goto done;
    }
    float *cur = buf, *nxt = cp > 1 ? buf + nkv : NULL;
    for (size_t row = 0; cp > 1 && row < rows; row++) {
        memcpy(cur + row * 4 * KV, qkv + row * W + C, 2 * (size_t)KV * sizeof(float));
        memset(cur + row * 4 * KV + 2 * KV, 0, 2 * (size_t)KV * sizeof(float));
    }
    for (size_t row = 0; row < rows; row++)
        for (int h = 0; h < NH; h++) {
            double s = 0.0;
            for (int d = 0; d < hs; d++)
                s += (double)dout[row * C + (size_t)h * hs + d] * out[row * C + (size_t)h * hs + d];
            D[row * NH + h] = s;
        }
    double scale = 1.0 / sqrt((double)hs);
    for (int step = 0; step < cp; step++) {
        blockset bs = {T, cp, r, cp_ring_src(cp, r, step), Tl, cp > 1 ? T / (2 * cp) : T};
        /* rows of k | v and of their gradients dk | dv: the travelling buffer, or qkv and dqkv in place */
        const float *kb = cp > 1 ? cur : qkv + C;
        float *db = cp > 1 ? cur + 2 * KV : dqkv + C;
        size_t ks = cp > 1 ? 4 * (size_t)KV : (size_t)W;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int qi = 0; qi < Tl; qi++) {
                    size_t qrow = (size_t)b * Tl + qi;
                    const float *q = qkv + qrow * W + (size_t)h * hs, *dO = dout + qrow * C + (size_t)h * hs;
                    float *dq = dqkv + qrow * W + (size_t)h * hs;
                    double L = lse[((size_t)b * NH + h) * Tl + qi], Di = D[qrow * NH + h];
                    for (int ki = 0; ki < Tl; ki++) {
                        if (!admitted(&bs, qi, ki))
                            continue;
                        size_t ko = ((size_t)b * Tl + ki) * ks + (size_t)(h / per) * hs;
                        const float *k = kb + ko, *v = k + KV;
                        float *dk = db + ko, *dv = dk + KV;
                        double s = 0.0, dp = 0.0;
                        for (int d = 0; d < hs; d++) {
                            s += (double)q[d] * k[d];
                            dp += (double)dO[d] * v[d];
                        }
                        double p = exp(s * scale - L), ds = p * (dp - Di) * scale;
                        for (int d = 0; d < hs; d++) {
                            dv[d] += (float)(p * dO[d]);
                            dq[d] += (float)(ds * k[d]);
                            dk[d] += (float)(ds * q[d]);
                        }
                    }
                }
        /* cp hops in all: the last one brings dK, dV home */
        if (cp > 1 && (rc = ring_step(ring, &cur, &nxt, nkv, err)))
            goto done;
    }
    for (size_t row = 0; cp > 1 && row < rows; row++)
        for (int c = 0; c < 2 * KV; c++)
            dqkv[row * W + C + c] += cur[row * 4 * KV + 2 * KV + c];
done:
    free(own);
    free(D);
    return rc;
}
