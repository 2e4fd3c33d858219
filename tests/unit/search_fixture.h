/* search_fixture — the small mixture-of-experts search space the search
 * tests share: 8 layers (the first dense), hidden 512, 8 heads, SwiGLU,
 * RMSNorm, rope, FFN 1536, 8 experts top-2 of FFN 512, untied embeddings,
 * bf16, flash attention; `gpus` GPUs of kind g in 8-GPU nodes (the default
 * topology, returned in *t: the caller frees it with topo_free) with the
 * A100 overheads of overheads.h, which the bound and the peak both count;
 * B = 32, b in {1, 2}, t and v up to 2. The caller sets the rest of its
 * bounds (max_pp, max_cp). Header-only: each Criterion test is its own
 * program. */
#ifndef TRAINSIM_TESTS_SEARCH_FIXTURE_H
#define TRAINSIM_TESTS_SEARCH_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sim/config/overheads.h"
#include "sim/config/topo.h"
#include "sim/search/search.h"

static inline void search_fixture_small_moe(search_space *s, int gpus, const gpu_spec *g, topo **t)
{
    model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "small-moe");
    m.num_layers = 8;
    m.hidden_size = 512;
    m.num_attention_heads = 8;
    m.num_query_groups = 8;
    m.ffn_hidden_size = 1536;
    m.swiglu = true;
    m.normalization = NORM_RMSNORM;
    m.position_embedding = POS_ROPE;
    m.seq_length = 512;
    m.padded_vocab_size = 1024;
    m.untie_embeddings = true;
    m.precision = PREC_BF16;
    m.attention_backend = ATTN_BACKEND_FLASH;
    cluster_config cl;
    memset(&cl, 0, sizeof cl);
    cl.gpus = gpus;
    cl.gpus_per_node = 8;
    cl.gpu = *g;
    cl.overheads = (memory_overheads){.cuda_context_gib = 0.75,
                                      .nccl_buffer_mib = OVERHEADS_NCCL_BUFFER_MIB,
                                      .nccl_channels = 16,
                                      .cublas_workspace_mib = 4,
                                      .allocator_fragmentation = 0.10};
    ts_err e;
    err_clear(&e);
    cr_assert_eq(topo_default(gpus, t, &e), TS_OK, "%s", e.msg);
    cl.topology = *t;
    search_space_default(s, &m, &cl, 32);
    s->moe.num_experts = 8;
    s->moe.topk = 2;
    s->moe.ffn_hidden_size = 512;
    s->moe.first_dense_layers = 1;
    s->micro_batch_sizes[1] = 2;
    s->n_micro_batch_sizes = 2;
    s->max_vp = 2;
    s->max_tp = 2;
}

#endif
