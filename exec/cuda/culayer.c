/* culayer — a bf16 GPT layer shard on one GPU. Contract in culayer.h. */
#include "exec/cuda/culayer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuk.h"

typedef uint16_t bf;

/* Buffers, in allocation order (one cudaMalloc each). */
enum {
    /* weights (bf16) */
    W_LN1,
    B_LN1,
    W_QKV,
    B_QKV,
    W_PROJ,
    B_PROJ,
    W_LN2,
    B_LN2,
    W_FC1,
    B_FC1,
    W_FC2,
    B_FC2,
    /* fp32 main grads, same order */
    G_LN1,
    GB_LN1,
    G_QKV,
    GB_QKV,
    G_PROJ,
    GB_PROJ,
    G_LN2,
    GB_LN2,
    G_FC1,
    GB_FC1,
    G_FC2,
    GB_FC2,
    /* activations */
    A_X,
    A_LN1,
    A_MEAN1,
    A_RSTD1,
    A_QKV,
    A_Q,
    A_K,
    A_V,
    A_PROBS,
    A_DROP,
    A_MASKATT,
    A_O,
    A_LSE,
    A_ATTN,
    A_PROJ,
    A_MASK1,
    A_X1,
    A_LN2,
    A_MEAN2,
    A_RSTD2,
    A_FC1,
    A_G,
    A_FC2,
    A_MASK2,
    A_OUT,
    /* gradients of activations */
    D_OUT,
    D_FC2,
    D_G,
    D_LN2,
    D_TMP,
    D_X1,
    D_PROJ,
    D_ATTN,
    D_O,
    D_ATT,
    D_Q,
    D_K,
    D_V,
    D_QKV,
    D_LN1,
    D_X,
    /* scratch */
    S_COLSUM,
    S_FLASH,
    NBUF
};

struct culayer {
    culayer_dims d;
    int N, hl, fl, H, hs; /* tokens, local hidden, local ffn, local heads, head size */
    cugemm *g;
    cudaStream_t s;
    void *buf[NBUF];
    size_t bytes[NBUF];
    size_t total;
};

#define P(L, i)  ((bf *)(L)->buf[i])
#define F(L, i)  ((float *)(L)->buf[i])
#define U8(L, i) ((uint8_t *)(L)->buf[i])

#define CK(st, what)                                                                                                   \
    do {                                                                                                               \
        cudaError_t ck_ = (st);                                                                                        \
        if (ck_ != cudaSuccess)                                                                                        \
            return err_set(err, TS_ESTATE, "culayer: %s: %s", what, cudaGetErrorString(ck_));                          \
    } while (0)
#define CKR(rc)                                                                                                        \
    do {                                                                                                               \
        int ckr_ = (rc);                                                                                               \
        if (ckr_ != TS_OK)                                                                                             \
            return ckr_;                                                                                               \
    } while (0)

/* culayer_tensor -> buffer. */
static int tensor_buf(culayer_tensor t)
{
    if (t < CULAYER_GRAD0)
        return W_LN1 + (int)t;
    if (t < CULAYER_X)
        return G_LN1 + (int)(t - CULAYER_GRAD0);
    switch (t) {
    case CULAYER_X:
        return A_X;
    case CULAYER_DOUT:
        return D_OUT;
    case CULAYER_OUT:
        return A_OUT;
    case CULAYER_DX:
        return D_X;
    default:
        return -1;
    }
}

int culayer_read(culayer *L, culayer_tensor which, float *host, size_t n, ts_err *err)
{
    int b = tensor_buf(which);
    if (b < 0)
        return err_set(err, TS_EINVAL, "culayer_read: tensor %d: valid are 0..%d", (int)which, CULAYER_NTENSORS - 1);
    bool f32 = b >= G_LN1 && b <= GB_FC2;
    size_t es = f32 ? 4 : 2, have = L->bytes[b] / es;
    if (n != have)
        return err_set(err, TS_EINVAL, "culayer_read: tensor %d holds %zu elements, not %zu", (int)which, have, n);
    CK(cudaStreamSynchronize(L->s), "read (sync)");
    if (f32) {
        CK(cudaMemcpy(host, L->buf[b], n * 4, cudaMemcpyDeviceToHost), "read");
        return TS_OK;
    }
    uint16_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return err_set(err, TS_ENOMEM, "culayer_read: %zu elements", n);
    cudaError_t st = cudaMemcpy(tmp, L->buf[b], n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n && st == cudaSuccess; i++) {
        uint32_t u = (uint32_t)tmp[i] << 16;
        memcpy(&host[i], &u, 4);
    }
    free(tmp);
    CK(st, "read");
    return TS_OK;
}

double culayer_flops(const culayer_dims *d)
{
    double b = d->micro_batch, s = d->seq, h = d->hidden, f = d->ffn;
    double fwd = 2.0 * b * s * (4.0 * h * h + 2.0 * h * f) + 4.0 * b * s * s * h;
    return 3.0 * fwd / d->tp;
}

size_t culayer_bytes(const culayer *L)
{
    return L->total;
}

void culayer_free(culayer *L)
{
    if (!L)
        return;
    for (int i = 0; i < NBUF; i++)
        cudaFree(L->buf[i]);
    free(L);
}

static int check_dims(const culayer_dims *d, ts_err *err)
{
    if (d->hidden <= 0 || d->heads <= 0 || d->ffn <= 0 || d->seq <= 0 || d->micro_batch <= 0 || d->tp <= 0)
        return err_set(err, TS_EINVAL,
                       "culayer: hidden %d, heads %d, ffn %d, seq %d, "
                       "micro-batch %d, t %d: all must be > 0",
                       d->hidden, d->heads, d->ffn, d->seq, d->micro_batch, d->tp);
    if (d->hidden % d->heads)
        return err_set(err, TS_EINVAL,
                       "culayer: --hidden-size %d is not a multiple of "
                       "--num-attention-heads %d",
                       d->hidden, d->heads);
    if (d->heads % d->tp || d->ffn % d->tp)
        return err_set(err, TS_EINVAL,
                       "culayer: --num-attention-heads %d and "
                       "--ffn-hidden-size %d must be multiples of "
                       "--tensor-model-parallel-size %d",
                       d->heads, d->ffn, d->tp);
    int hs = d->hidden / d->heads;
    if (d->fused_attention && (hs % 32 || hs > 128))
        return err_set(err, TS_EINVAL,
                       "culayer: the fused attention kernel takes head sizes "
                       "32, 64, 96 or 128, not %d (hidden / heads)",
                       hs);
    if (d->attention_dropout < 0 || d->attention_dropout >= 1 || d->hidden_dropout < 0 || d->hidden_dropout >= 1)
        return err_set(err, TS_EINVAL, "culayer: dropout %.3g / %.3g: valid is [0, 1)", d->attention_dropout,
                       d->hidden_dropout);
    return TS_OK;
}

int culayer_create(const culayer_dims *d, cugemm *g, cudaStream_t stream, culayer **out, ts_err *err)
{
    *out = NULL;
    CKR(check_dims(d, err));
    culayer *L = calloc(1, sizeof *L);
    if (!L)
        return err_set(err, TS_ENOMEM, "culayer: out of host memory");
    L->d = *d;
    L->g = g;
    L->s = stream;
    size_t N = (size_t)d->micro_batch * d->seq, h = d->hidden;
    L->N = (int)N;
    L->H = d->heads / d->tp;
    L->hs = d->hidden / d->heads;
    L->hl = L->H * L->hs;
    L->fl = d->ffn / d->tp;
    size_t hl = L->hl, fl = L->fl, att = (size_t)d->micro_batch * L->H * d->seq * d->seq;
    size_t colmax = h > 3 * hl ? h : 3 * hl;
    if (fl > colmax)
        colmax = fl;
    /* element counts and element sizes */
    size_t n[NBUF] = {
        [W_LN1] = h,
        [B_LN1] = h,
        [W_QKV] = 3 * hl * h,
        [B_QKV] = 3 * hl,
        [W_PROJ] = h * hl,
        [B_PROJ] = h,
        [W_LN2] = h,
        [B_LN2] = h,
        [W_FC1] = fl * h,
        [B_FC1] = fl,
        [W_FC2] = h * fl,
        [B_FC2] = h,
        [A_X] = N * h,
        [A_LN1] = N * h,
        [A_MEAN1] = N,
        [A_RSTD1] = N,
        [A_QKV] = N * 3 * hl,
        [A_Q] = N * hl,
        [A_K] = N * hl,
        [A_V] = N * hl,
        [A_PROBS] = att,
        [A_DROP] = att,
        [A_MASKATT] = att,
        [A_O] = N * hl,
        [A_LSE] = (size_t)d->micro_batch * L->H * d->seq,
        [A_ATTN] = N * hl,
        [A_PROJ] = N * h,
        [A_MASK1] = N * h,
        [A_X1] = N * h,
        [A_LN2] = N * h,
        [A_MEAN2] = N,
        [A_RSTD2] = N,
        [A_FC1] = N * fl,
        [A_G] = N * fl,
        [A_FC2] = N * h,
        [A_MASK2] = N * h,
        [A_OUT] = N * h,
        [D_OUT] = N * h,
        [D_FC2] = N * h,
        [D_G] = N * fl,
        [D_LN2] = N * h,
        [D_TMP] = N * h,
        [D_X1] = N * h,
        [D_PROJ] = N * h,
        [D_ATTN] = N * hl,
        [D_O] = N * hl,
        [D_ATT] = att,
        [D_Q] = N * hl,
        [D_K] = N * hl,
        [D_V] = N * hl,
        [D_QKV] = N * 3 * hl,
        [D_LN1] = N * h,
        [D_X] = N * h,
        [S_COLSUM] = cuk_colsum_scratch_bytes(L->N, (int)colmax),
        [S_FLASH] = cuk_flash_attn_scratch_bytes(d->micro_batch, L->H, d->seq),
    };
    for (int i = G_LN1; i <= GB_FC2; i++)
        n[i] = n[i - G_LN1];
    if (d->fused_attention)
        n[A_PROBS] = n[A_DROP] = n[A_MASKATT] = n[D_ATT] = 0;
    for (int i = 0; i < NBUF; i++) {
        size_t es = 2;
        if ((i >= G_LN1 && i <= GB_FC2) || i == A_MEAN1 || i == A_RSTD1 || i == A_MEAN2 || i == A_RSTD2 || i == A_LSE)
            es = 4;
        else if (i == A_MASKATT || i == A_MASK1 || i == A_MASK2 || i == S_COLSUM || i == S_FLASH)
            es = 1;
        L->bytes[i] = n[i] * es;
        L->total += L->bytes[i];
        if (!L->bytes[i])
            continue;
        cudaError_t st = cudaMalloc(&L->buf[i], L->bytes[i]);
        if (st != cudaSuccess) {
            size_t total = L->total;
            culayer_free(L);
            return err_set(err, TS_ENOMEM,
                           "culayer: %zu bytes of GPU memory (%.2f GiB so far) "
                           "for buffer %d: %s",
                           n[i] * es, total / 1073741824.0, i, cudaGetErrorString(st));
        }
    }
    /* weights ~ U(-init_scale, init_scale), LayerNorm gains, inputs and the output
     * gradient ~ U(-1, 1); main grads zero (values do not change the timing) */
    uint64_t seed = 1;
    int rc = TS_OK;
    float ws = d->init_scale > 0 ? d->init_scale : 0.02f;
    for (int i = W_LN1; i <= B_FC2 && rc == TS_OK; i++) {
        cudaError_t st = cuk_fill_uniform_bf16(P(L, i), n[i], seed++, ws, stream);
        if (st == cudaSuccess && (i == W_LN1 || i == W_LN2))
            st = cuk_fill_uniform_bf16(P(L, i), n[i], seed++, 1.0f, stream);
        if (st != cudaSuccess)
            rc = err_set(err, TS_ESTATE, "culayer: weight init: %s", cudaGetErrorString(st));
    }
    for (int i = G_LN1; i <= GB_FC2 && rc == TS_OK; i++)
        if (cudaMemsetAsync(L->buf[i], 0, L->bytes[i], stream) != cudaSuccess)
            rc = err_set(err, TS_ESTATE, "culayer: zeroing main grads failed");
    if (rc == TS_OK && (cuk_fill_uniform_bf16(P(L, A_X), n[A_X], 101, 1.0f, stream) ||
                        cuk_fill_uniform_bf16(P(L, D_OUT), n[D_OUT], 102, 1.0f, stream)))
        rc = err_set(err, TS_ESTATE, "culayer: input init failed");
    if (rc != TS_OK) {
        culayer_free(L);
        return rc;
    }
    *out = L;
    return TS_OK;
}

/* y[N,OC] = x[N,IC] W[OC,IC]^T */
static int lin_fwd(culayer *L, bf *y, const bf *x, const bf *W, int N, int OC, int IC, ts_err *err)
{
    cugemm_args a = {.kind = CUGEMM_BF16,
                     .trans_b = true,
                     .M = N,
                     .N = OC,
                     .K = IC,
                     .alpha = 1.0f,
                     .A = x,
                     .lda = IC,
                     .B = W,
                     .ldb = IC,
                     .C = y,
                     .ldc = OC,
                     .batch = 1};
    return cugemm_run(L->g, &a, L->s, err);
}

/* dx[N,IC] = dy[N,OC] W[OC,IC];  dW[OC,IC] += dy^T x (fp32 main grad) */
static int lin_bwd(culayer *L, bf *dx, float *dW, const bf *dy, const bf *x, const bf *W, int N, int OC, int IC,
                   ts_err *err)
{
    cugemm_args a = {.kind = CUGEMM_BF16,
                     .M = N,
                     .N = IC,
                     .K = OC,
                     .alpha = 1.0f,
                     .A = dy,
                     .lda = OC,
                     .B = W,
                     .ldb = IC,
                     .C = dx,
                     .ldc = IC,
                     .batch = 1};
    CKR(cugemm_run(L->g, &a, L->s, err));
    cugemm_args w = {.kind = CUGEMM_BF16_F32C,
                     .trans_a = true,
                     .M = OC,
                     .N = IC,
                     .K = N,
                     .alpha = 1.0f,
                     .beta = 1.0f,
                     .A = dy,
                     .lda = OC,
                     .B = x,
                     .ldb = IC,
                     .C = dW,
                     .ldc = IC,
                     .batch = 1};
    return cugemm_run(L->g, &w, L->s, err);
}

/* Strided-batched bf16 GEMM over the b * H heads (row-major, per head). */
static int bgemm(culayer *L, bool ta, bool tb, int M, int N, int K, const bf *A, int lda, const bf *B, int ldb, bf *C,
                 int ldc, ts_err *err)
{
    long long sa = (long long)(ta ? K : M) * lda, sb = (long long)(tb ? N : K) * ldb;
    long long sc = (long long)M * ldc;
    cugemm_args a = {.kind = CUGEMM_BF16,
                     .trans_a = ta,
                     .trans_b = tb,
                     .M = M,
                     .N = N,
                     .K = K,
                     .alpha = 1.0f,
                     .A = A,
                     .lda = lda,
                     .stride_a = sa,
                     .B = B,
                     .ldb = ldb,
                     .stride_b = sb,
                     .C = C,
                     .ldc = ldc,
                     .stride_c = sc,
                     .batch = L->d.micro_batch * L->H};
    return cugemm_run(L->g, &a, L->s, err);
}

static int attention_fwd(culayer *L, uint64_t seed, ts_err *err)
{
    int B = L->d.micro_batch, H = L->H, T = L->d.seq, D = L->hs;
    float scale = 1.0f / sqrtf((float)D);
    if (L->d.fused_attention) {
        CK(cuk_flash_attn_fwd(P(L, A_O), F(L, A_LSE), P(L, A_Q), P(L, A_K), P(L, A_V), B, H, T, D, scale, L->s),
           "flash attention forward");
        return TS_OK;
    }
    bf *scores = P(L, D_ATT); /* the backward's buffer is free during the forward */
    CKR(bgemm(L, false, true, T, T, D, P(L, A_Q), D, P(L, A_K), D, scores, T, err));
    CK(cuk_causal_softmax_fwd(P(L, A_PROBS), scores, scale, B * H, T, L->s), "softmax");
    float p = L->d.attention_dropout;
    const bf *att = P(L, A_PROBS);
    if (p > 0) {
        CK(cuk_bias_dropout_add_fwd(P(L, A_DROP), U8(L, A_MASKATT), att, NULL, NULL, p, seed, B * H * T, T, L->s),
           "attention dropout");
        att = P(L, A_DROP);
    }
    return bgemm(L, false, false, T, D, T, att, T, P(L, A_V), D, P(L, A_O), D, err);
}

static int attention_bwd(culayer *L, ts_err *err)
{
    int B = L->d.micro_batch, H = L->H, T = L->d.seq, D = L->hs;
    float scale = 1.0f / sqrtf((float)D);
    if (L->d.fused_attention) {
        CK(cuk_flash_attn_bwd(P(L, D_Q), P(L, D_K), P(L, D_V), P(L, D_O), P(L, A_O), F(L, A_LSE), P(L, A_Q), P(L, A_K),
                              P(L, A_V), B, H, T, D, scale, L->buf[S_FLASH], L->s),
           "flash attention backward");
        return TS_OK;
    }
    float p = L->d.attention_dropout;
    const bf *att = p > 0 ? P(L, A_DROP) : P(L, A_PROBS);
    bf *datt = P(L, D_ATT);
    CKR(bgemm(L, false, true, T, T, D, P(L, D_O), D, P(L, A_V), D, datt, T, err)); /* dO v^T */
    CKR(bgemm(L, true, false, T, D, T, att, T, P(L, D_O), D, P(L, D_V), D, err));  /* att^T dO */
    if (p > 0)
        CK(cuk_dropout_bwd(datt, datt, U8(L, A_MASKATT), p, (size_t)B * H * T * T, L->s), "attention dropout backward");
    CK(cuk_causal_softmax_bwd(datt, datt, P(L, A_PROBS), scale, B * H, T, L->s), "softmax backward");
    CKR(bgemm(L, false, false, T, D, T, datt, T, P(L, A_K), D, P(L, D_Q), D, err));  /* dS k */
    return bgemm(L, true, false, T, D, T, datt, T, P(L, A_Q), D, P(L, D_K), D, err); /* dS^T q */
}

int culayer_forward(culayer *L, uint64_t seed, ts_err *err)
{
    int N = L->N, h = L->d.hidden, hl = L->hl, fl = L->fl;
    int B = L->d.micro_batch, H = L->H, T = L->d.seq, D = L->hs;
    cudaStream_t s = L->s;
    float pd = L->d.hidden_dropout;
    CK(cuk_layernorm_fwd(P(L, A_LN1), F(L, A_MEAN1), F(L, A_RSTD1), P(L, A_X), P(L, W_LN1), P(L, B_LN1), N, h, 1e-5f,
                         s),
       "layernorm 1");
    CKR(lin_fwd(L, P(L, A_QKV), P(L, A_LN1), P(L, W_QKV), N, 3 * hl, h, err));
    CK(cuk_bias_dropout_add_fwd(P(L, A_QKV), NULL, P(L, A_QKV), P(L, B_QKV), NULL, 0.0f, 0, N, 3 * hl, s), "qkv bias");
    CK(cuk_qkv_split(P(L, A_Q), P(L, A_K), P(L, A_V), P(L, A_QKV), B, T, H, D, s), "qkv split");
    CKR(attention_fwd(L, seed, err));
    CK(cuk_bhtd_to_bthd(P(L, A_ATTN), P(L, A_O), B, H, T, D, s), "attention permute");
    CKR(lin_fwd(L, P(L, A_PROJ), P(L, A_ATTN), P(L, W_PROJ), N, h, hl, err));
    CK(cuk_bias_dropout_add_fwd(P(L, A_X1), U8(L, A_MASK1), P(L, A_PROJ), P(L, B_PROJ), P(L, A_X), pd, seed + 1, N, h,
                                s),
       "bias-dropout-add 1");
    CK(cuk_layernorm_fwd(P(L, A_LN2), F(L, A_MEAN2), F(L, A_RSTD2), P(L, A_X1), P(L, W_LN2), P(L, B_LN2), N, h, 1e-5f,
                         s),
       "layernorm 2");
    CKR(lin_fwd(L, P(L, A_FC1), P(L, A_LN2), P(L, W_FC1), N, fl, h, err));
    CK(cuk_bias_gelu_fwd(P(L, A_G), P(L, A_FC1), P(L, B_FC1), N, fl, s), "bias-gelu");
    CKR(lin_fwd(L, P(L, A_FC2), P(L, A_G), P(L, W_FC2), N, h, fl, err));
    CK(cuk_bias_dropout_add_fwd(P(L, A_OUT), U8(L, A_MASK2), P(L, A_FC2), P(L, B_FC2), P(L, A_X1), pd, seed + 2, N, h,
                                s),
       "bias-dropout-add 2");
    return TS_OK;
}

int culayer_backward(culayer *L, ts_err *err)
{
    int N = L->N, h = L->d.hidden, hl = L->hl, fl = L->fl;
    int B = L->d.micro_batch, H = L->H, T = L->d.seq, D = L->hs;
    cudaStream_t s = L->s;
    float pd = L->d.hidden_dropout;
    void *cs = L->buf[S_COLSUM];
    /* MLP */
    CK(cuk_dropout_bwd(P(L, D_FC2), P(L, D_OUT), pd > 0 ? U8(L, A_MASK2) : NULL, pd, (size_t)N * h, s),
       "dropout 2 backward");
    CK(cuk_bias_grad(F(L, GB_FC2), P(L, D_FC2), N, h, cs, s), "fc2 bias grad");
    CKR(lin_bwd(L, P(L, D_G), F(L, G_FC2), P(L, D_FC2), P(L, A_G), P(L, W_FC2), N, h, fl, err));
    CK(cuk_bias_gelu_bwd(P(L, D_G), P(L, D_G), P(L, A_FC1), P(L, B_FC1), N, fl, s), "gelu backward");
    CK(cuk_bias_grad(F(L, GB_FC1), P(L, D_G), N, fl, cs, s), "fc1 bias grad");
    CKR(lin_bwd(L, P(L, D_LN2), F(L, G_FC1), P(L, D_G), P(L, A_LN2), P(L, W_FC1), N, fl, h, err));
    CK(cuk_layernorm_bwd(P(L, D_TMP), F(L, G_LN2), F(L, GB_LN2), P(L, D_LN2), P(L, A_X1), P(L, W_LN2), F(L, A_MEAN2),
                         F(L, A_RSTD2), N, h, cs, s),
       "layernorm 2 backward");
    CK(cuk_bias_dropout_add_fwd(P(L, D_X1), NULL, P(L, D_TMP), NULL, P(L, D_OUT), 0.0f, 0, N, h, s),
       "residual 2 gradient");
    /* attention */
    CK(cuk_dropout_bwd(P(L, D_PROJ), P(L, D_X1), pd > 0 ? U8(L, A_MASK1) : NULL, pd, (size_t)N * h, s),
       "dropout 1 backward");
    CK(cuk_bias_grad(F(L, GB_PROJ), P(L, D_PROJ), N, h, cs, s), "proj bias grad");
    CKR(lin_bwd(L, P(L, D_ATTN), F(L, G_PROJ), P(L, D_PROJ), P(L, A_ATTN), P(L, W_PROJ), N, h, hl, err));
    CK(cuk_bthd_to_bhtd(P(L, D_O), P(L, D_ATTN), B, H, T, D, s), "attention grad permute");
    CKR(attention_bwd(L, err));
    CK(cuk_qkv_merge(P(L, D_QKV), P(L, D_Q), P(L, D_K), P(L, D_V), B, T, H, D, s), "qkv merge");
    CK(cuk_bias_grad(F(L, GB_QKV), P(L, D_QKV), N, 3 * hl, cs, s), "qkv bias grad");
    CKR(lin_bwd(L, P(L, D_LN1), F(L, G_QKV), P(L, D_QKV), P(L, A_LN1), P(L, W_QKV), N, 3 * hl, h, err));
    CK(cuk_layernorm_bwd(P(L, D_TMP), F(L, G_LN1), F(L, GB_LN1), P(L, D_LN1), P(L, A_X), P(L, W_LN1), F(L, A_MEAN1),
                         F(L, A_RSTD1), N, h, cs, s),
       "layernorm 1 backward");
    CK(cuk_bias_dropout_add_fwd(P(L, D_X), NULL, P(L, D_TMP), NULL, P(L, D_X1), 0.0f, 0, N, h, s),
       "residual 1 gradient");
    return TS_OK;
}
