/* The memory a run holds besides its tensors (sim/config/overheads.h): each
 * overhead's closed form, the defaults per GPU kind from the catalogue, the
 * flags that override them, the memory timeline's fragmentation following
 * the activations, and the run the brief was about: GPT-3 175B's default
 * layout on 40 GB A100s holds 38.9 GiB of tensors, which fit, but not once
 * the CUDA context, NCCL buffers, cuBLAS workspace and fragmentation are
 * counted. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <string.h>

#include "sim/config/flags.h"
#include "sim/config/overheads.h"
#include "sim/core/mem.h"
#include "sim/core/simulate.h"

#define MIB 1048576.0
#define GIB 1073741824.0

/* NCCL's per-channel per-peer buffers (NCCL defaults: Simple 4 MiB, LL128
 * 120 x 640 x 8 x 8 B, LL 8 x 512 x 8 x 16 B). */
#define NCCL_SET_BYTES (4194304 + 4915200 + 524288)

static const memory_overheads ON = {.cuda_context_gib = 0.75,
                                    .nccl_buffer_mib = OVERHEADS_NCCL_BUFFER_MIB,
                                    .nccl_channels = 16,
                                    .cublas_workspace_mib = 4,
                                    .allocator_fragmentation = 0.10};

static parallel_config layout(int t, int p, int d, sched_kind k)
{
    parallel_config par;
    memset(&par, 0, sizeof par);
    par.tp = t;
    par.pp = p;
    par.dp = d;
    par.vp = 1;
    par.schedule = k;
    return par;
}

/* The communicators of pipeline rank r of a dense layout p. */
static unsigned comms_of(const parallel_config *p, bool tied, int r)
{
    overheads_layout l = {.tp = p->tp, .pp = p->pp, .dp = p->dp, .cp = 1, .schedule = p->schedule, .tied = tied};
    return overheads_comms(&l, r);
}

Test(overheads, nccl_buffer_default_is_the_sum_of_nccls_three_protocols)
{
    cr_expect_float_eq(OVERHEADS_NCCL_BUFFER_MIB * MIB, (double)NCCL_SET_BYTES, 1e-6);
    cr_expect_float_eq(OVERHEADS_NCCL_BUFFER_MIB, 9.1875, 1e-12);
}

/* communicators x channels x 2 peers x buffer set, per pipeline rank */
Test(overheads, nccl_bytes_are_communicators_x_channels_x_peers_x_buffers)
{
    parallel_config p = layout(8, 16, 8, SCHED_INTERLEAVED); /* GPT-3 175B's preset layout */
    unsigned first = comms_of(&p, true, 0), middle = comms_of(&p, true, 5), last = comms_of(&p, true, 15);
    cr_expect_eq(first, 0xfu, "rank 0: TP, PP, DP, embedding");
    cr_expect_eq(middle, 0x7u, "a middle rank: TP, PP, DP");
    cr_expect_eq(last, 0xfu, "the last rank holds the embedding group too");
    cr_expect_eq(overheads_nccl_bytes(&ON, first), 4LL * 16 * 2 * NCCL_SET_BYTES);
    cr_expect_eq(overheads_nccl_bytes(&ON, middle), 3LL * 16 * 2 * NCCL_SET_BYTES);

    /* ZB-V puts the first and last stage on rank 0: no embedding group */
    parallel_config v = layout(1, 4, 1, SCHED_ZB_V);
    cr_expect_eq(comms_of(&v, true, 0), 1u << OVERHEADS_COMM_PP);
    cr_expect_eq(comms_of(&v, true, 3), 1u << OVERHEADS_COMM_PP);

    /* untied embedding and output weights: no embedding group */
    cr_expect_eq(comms_of(&p, false, 0), 0x7u);

    /* one GPU: no communicator, no buffer */
    parallel_config one = layout(1, 1, 1, SCHED_1F1B);
    cr_expect_eq(comms_of(&one, true, 0), 0u);
    cr_expect_eq(overheads_nccl_bytes(&ON, 0), 0);

    /* data parallel only, 32 channels */
    parallel_config dp = layout(1, 1, 64, SCHED_1F1B);
    memory_overheads h = ON;
    h.nccl_channels = 32;
    cr_expect_eq(overheads_nccl_bytes(&h, comms_of(&dp, true, 0)), 1LL * 32 * 2 * NCCL_SET_BYTES);
}

/* Experts and context parallelism: the expert-data-parallel group and the
 * gradients' d x cp group run collectives (counted); the all-to-all and the
 * CP ring only peer-to-peer (listed, not counted); CP by all-gather is a
 * collective group. */
Test(overheads, moe_and_cp_groups)
{
    overheads_layout l = {.tp = 2, .pp = 1, .dp = 1, .cp = 2, .ep = 4, .edp = 1, .schedule = SCHED_1F1B};
    unsigned m = overheads_comms(&l, 0);
    cr_expect_eq(
        m, (1u << OVERHEADS_COMM_TP) | (1u << OVERHEADS_COMM_DP) | (1u << OVERHEADS_P2P_CP) | (1u << OVERHEADS_P2P_EP),
        "d 1 x cp 2 reduces gradients over 2 ranks; edp 1 has no group; mask %#x", m);
    cr_expect_eq(overheads_nccl_bytes(&ON, m), 2LL * 16 * 2 * NCCL_SET_BYTES, "TP and DP counted, not the p2p ones");
    l.edp = 4;
    l.cp_all_gather = true;
    m = overheads_comms(&l, 0);
    cr_expect(m >> OVERHEADS_COMM_EDP & 1u);
    cr_expect(m >> OVERHEADS_COMM_CP & 1u);
    cr_expect_not(m >> OVERHEADS_P2P_CP & 1u);
    cr_expect_eq(overheads_nccl_bytes(&ON, m), 4LL * 16 * 2 * NCCL_SET_BYTES, "TP, DP, EDP, CP");
    cr_expect_str_eq(overheads_comm_name(OVERHEADS_P2P_EP), "EP all-to-all");
    /* no experts: ep and edp 0 add nothing */
    overheads_layout d = {.tp = 1, .pp = 1, .dp = 8, .cp = 1, .schedule = SCHED_1F1B};
    cr_expect_eq(overheads_comms(&d, 0), 1u << OVERHEADS_COMM_DP);
}

Test(overheads, context_cublas_and_fragmentation_closed_forms)
{
    cr_expect_eq(overheads_cuda_context_bytes(&ON), 805306368, "0.75 GiB");
    cr_expect_eq(overheads_cublas_bytes(&ON), OVERHEADS_GEMM_STREAMS * 4 * 1048576LL, "4 MiB per GEMM stream");
    cr_expect_eq(overheads_fragmentation_bytes(&ON, 1000), 100);
    cr_expect_eq(overheads_fragmentation_bytes(&ON, 1009), 100, "floored");
    cr_expect_eq(overheads_fragmentation_bytes(&ON, 0), 0);
    cr_expect_eq(overheads_fragmentation_bytes(&ON, -5), 0, "never negative");
    memory_overheads off = {0};
    cr_expect_eq(overheads_cuda_context_bytes(&off) + overheads_cublas_bytes(&off) + overheads_nccl_bytes(&off, 0xfu) +
                     overheads_fragmentation_bytes(&off, 1 << 30),
                 0, "all off");
}

/* The defaults come from the catalogue per GPU kind and the NCCL and
 * allocator constants; a calibrated-only device (--gpu cpu) has none. */
Test(overheads, defaults_per_gpu_kind)
{
    gpu_spec a100, h100;
    ts_err e;
    cr_assert_eq(catalog_gpu("A100-SXM4-40GB", &a100, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(catalog_gpu("h100", &h100, &e), TS_OK, "%s", e.msg);
    memory_overheads o;
    overheads_default(&a100, &o);
    cr_expect_float_eq(o.cuda_context_gib, 0.75, 1e-12);
    cr_expect_float_eq(o.cublas_workspace_mib, 4, 1e-12, "cuBLAS default on Ampere");
    cr_expect_eq(o.nccl_channels, 16);
    cr_expect_float_eq(o.nccl_buffer_mib, 9.1875, 1e-12);
    cr_expect_float_eq(o.allocator_fragmentation, 0.10, 1e-12);
    overheads_default(&h100, &o);
    cr_expect_float_eq(o.cuda_context_gib, 1.0, 1e-12);
    cr_expect_float_eq(o.cublas_workspace_mib, 32, 1e-12, "cuBLAS default on Hopper");
    cr_expect_eq(o.nccl_channels, 32);
    gpu_spec cpu = {.name = "CPU", .calibrated_only = true, .hbm_gib = 64};
    overheads_default(&cpu, &o);
    cr_expect(o.cuda_context_gib == 0 && o.nccl_channels == 0 && o.nccl_buffer_mib == 0 &&
              o.cublas_workspace_mib == 0 && o.allocator_fragmentation == 0);
}

/* Fields at OVERHEADS_DEFAULT take the GPU's figure; given ones stay;
 * out of range is an error naming the flag. */
Test(overheads, resolve_fills_defaults_and_keeps_given_values)
{
    gpu_spec h100;
    ts_err e;
    cr_assert_eq(catalog_gpu("H100-SXM5-80GB", &h100, &e), TS_OK, "%s", e.msg);
    memory_overheads o = {.cuda_context_gib = 0,
                          .nccl_buffer_mib = OVERHEADS_DEFAULT,
                          .nccl_channels = (int)OVERHEADS_DEFAULT,
                          .cublas_workspace_mib = 8,
                          .allocator_fragmentation = OVERHEADS_DEFAULT};
    cr_assert_eq(overheads_resolve(&o, &h100, &e), TS_OK, "%s", e.msg);
    cr_expect_float_eq(o.cuda_context_gib, 0, 1e-12, "given 0 stays 0");
    cr_expect_float_eq(o.nccl_buffer_mib, 9.1875, 1e-12);
    cr_expect_eq(o.nccl_channels, 32);
    cr_expect_float_eq(o.cublas_workspace_mib, 8, 1e-12);
    cr_expect_float_eq(o.allocator_fragmentation, 0.10, 1e-12);
    o.nccl_channels = 65;
    cr_expect_eq(overheads_resolve(&o, &h100, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "--nccl-channels 65") && strstr(e.msg, "valid: 0..64"), "%s", e.msg);
}

/* The memory timeline: MEM_FRAG follows activations + p2p buffers, at the
 * peak and after frees, and cannot be added directly. */
Test(overheads, fragmentation_follows_the_activations_on_the_timeline)
{
    mem_tracker *m = NULL;
    ts_err e;
    cr_assert_eq(mem_create(1, false, &m, &e), TS_OK);
    mem_set_overheads(m, &ON);
    mem_add(m, 0, MEM_WEIGHTS, 5000, 0, 0);
    mem_add(m, 0, MEM_CUDA_CONTEXT, 700, 0, 0);
    mem_add(m, 0, MEM_FRAG, 1 << 20, 0, 0); /* ignored */
    mem_add(m, 0, MEM_ACTIV, 10000, 10, 0);
    mem_add(m, 0, MEM_P2P, 2005, 20, 0);
    mem_add(m, 0, MEM_ACTIV, -10000, 30, 0);
    mem_add(m, 0, MEM_P2P, -2005, 40, 0);
    cr_assert_eq(mem_check(m, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(mem_peak_bytes(m, 0), 5000 + 700 + 10000 + 2005 + 1200, "frag floor(0.1 x 12005) = 1200 at the peak");
    cr_expect_eq(mem_peak_cat_bytes(m, 0, MEM_FRAG), 1200);
    cr_expect_eq(mem_peak_time_ns(m, 0), 20);
    cr_expect_eq(mem_live_bytes(m, 0, MEM_FRAG), 0, "gone with the activations");
    cr_expect_eq(mem_cat_peak_bytes(m, 0, MEM_FRAG), 1200);
    cr_expect_str_eq(mem_cat_name(MEM_FRAG), "allocator-fragmentation");
    cr_expect_str_eq(mem_cat_name(MEM_NCCL), "nccl-buffers");
    mem_free(m);
}

/* Resolve a configuration from command-line flags, as trainsim does. */
static int from_flags(config *c, ts_err *e, ...)
{
    const char *argv[32] = {"test"};
    int argc = 1;
    va_list ap;
    va_start(ap, e);
    for (const char *a = va_arg(ap, const char *); a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    flags_state s;
    opt_table t;
    opt_table_init(&t, "test", NULL);
    int rc = flags_register(&s, &t, c, e);
    if (!rc)
        rc = flags_parse(&s, &t, argc, (char **)argv, e);
    if (!rc)
        rc = flags_finish(&s, &t, e);
    flags_release(&s);
    opt_table_free(&t);
    return rc;
}

static int64_t tensor_bytes(const simulate_rank *x)
{
    return x->peak_cat_bytes[MEM_WEIGHTS] + x->peak_cat_bytes[MEM_GRADS] + x->peak_cat_bytes[MEM_OPTIM] +
           x->peak_cat_bytes[MEM_ACTIV] + x->peak_cat_bytes[MEM_P2P] + x->peak_cat_bytes[MEM_BATCH];
}

/* GPT-3 175B's default layout on 40 GB A100s: 38.9 GiB of tensors fitted
 * before; with what CUDA, NCCL, cuBLAS and the allocator take it does not. */
Test(overheads, gpt3_on_a100_40gb_no_longer_fits)
{
    config c;
    ts_err e;
    cr_assert_eq(from_flags(&c, &e, "--model", "gpt3-175b", "--gpu", "A100-SXM4-40GB", NULL), TS_OK, "%s", e.msg);
    simulate_result *r = NULL;
    cr_assert_eq(simulate_run(&c, NULL, &r, &e), TS_OK, "%s", e.msg);
    const simulate_rank *x = &r->ranks[r->peak_rank];
    double tensors_gib = (double)tensor_bytes(x) / GIB;
    /* 38.68 GiB with flash attention (Megatron's default for bf16 on A100; 38.91 unfused) */
    cr_expect(tensors_gib > 38.6 && tensors_gib < 38.8, "tensors %.2f GiB (38.68 before the overheads)", tensors_gib);
    cr_expect_not(r->fits, "peak %.2f GiB of %.2f", (double)r->peak_bytes / GIB, (double)r->hbm_bytes / GIB);
    cr_expect_gt(r->peak_bytes, r->hbm_bytes);

    /* the breakdown adds up, and each overhead is its closed form */
    int64_t sum = 0;
    for (int k = 0; k < MEM_CATS; k++)
        sum += x->peak_cat_bytes[k];
    cr_expect_eq(sum, x->peak_bytes);
    const memory_overheads *o = &c.cluster.overheads;
    cr_expect_eq(x->peak_cat_bytes[MEM_CUDA_CONTEXT], overheads_cuda_context_bytes(o));
    cr_expect_eq(x->peak_cat_bytes[MEM_NCCL], 4LL * 16 * 2 * NCCL_SET_BYTES, "rank 0: TP, PP, DP, embedding");
    cr_expect_eq(x->peak_cat_bytes[MEM_CUBLAS], 4 * 1048576LL);
    cr_expect_eq(x->peak_cat_bytes[MEM_FRAG],
                 overheads_fragmentation_bytes(o, x->peak_cat_bytes[MEM_ACTIV] + x->peak_cat_bytes[MEM_P2P]));
    simulate_result_free(r);
    config_free(&c);

    /* every overhead off by flag: the tensors alone, which fit */
    cr_assert_eq(from_flags(&c, &e, "--model", "gpt3-175b", "--gpu", "A100-SXM4-40GB", "--cuda-context-gib", "0",
                            "--nccl-buffer-mib", "0", "--cublas-workspace-mib", "0", "--allocator-fragmentation", "0",
                            NULL),
                 TS_OK, "%s", e.msg);
    cr_assert_eq(simulate_run(&c, NULL, &r, &e), TS_OK, "%s", e.msg);
    cr_expect(r->fits);
    cr_expect_eq(r->peak_bytes, tensor_bytes(&r->ranks[r->peak_rank]));
    simulate_result_free(r);
    config_free(&c);
}
