/* report — text and CSV of a simulation result (see report.h). */
#include "sim/core/report.h"

#include <inttypes.h>

#include "sim/config/overheads.h"

#include "sim/util/afile.h"
#include "sim/util/csvio.h"

#define GIB 1073741824.0

static const char *recompute_name(config_recompute r)
{
    return r == RECOMPUTE_FULL ? "full" : r == RECOMPUTE_SELECTIVE ? "selective" : "none";
}

static const char *onoff(bool b)
{
    return b ? "on" : "off";
}

/* A duration in the unit that reads best. */
static void put_time(FILE *f, double ns)
{
    if (ns >= 1e9)
        fprintf(f, "%.3f s", ns * 1e-9);
    else if (ns >= 1e6)
        fprintf(f, "%.3f ms", ns * 1e-6);
    else
        fprintf(f, "%.3f us", ns * 1e-3);
}

static double pct(double a, double b)
{
    return b > 0 ? 100.0 * a / b : 0;
}

/* What one memory category is and where its figure comes from, for the
 * text report's breakdown (docs/simulator.md#memory). */
static void memory_source(const simulate_result *r, const simulate_rank *x, int cat, char *buf, size_t cap)
{
    const memory_overheads *o = &r->overheads;
    switch (cat) {
    case MEM_WEIGHTS:
        snprintf(buf, cap, "model weights of the rank's layers");
        break;
    case MEM_GRADS:
        snprintf(buf, cap, "gradient buffer (fp32 with bf16, as Megatron-LM)");
        break;
    case MEM_OPTIM:
        snprintf(buf, cap, "fp32 master weights + Adam moments%s", r->distributed_optimizer ? ", 1/d each" : "");
        break;
    case MEM_ACTIV:
        snprintf(buf, cap, "saved for the backward (Korthikanti et al. 2022), recomputed ones");
        break;
    case MEM_P2P:
        snprintf(buf, cap, "pipeline send/receive buffers");
        break;
    case MEM_BATCH:
        snprintf(buf, cap, "data loader's batch: tokens, labels, loss_mask, position_ids%s",
                 r->data_mem[0].mask_bytes > 0 ? ", attention mask (b s^2 / cp; "
                                                 "--no-create-attention-mask-in-dataloader drops it)"
                                               : "");
        break;
    case MEM_CUDA_CONTEXT:
        snprintf(buf, cap, "CUDA context + kernel modules, %.2f GiB per GPU (estimate; --cuda-context-gib)",
                 o->cuda_context_gib);
        break;
    case MEM_NCCL: {
        char names[64] = "";
        int n = 0;
        size_t off = 0;
        for (int k = 0; k < OVERHEADS_COMMS; k++)
            if (x->nccl_comms >> k & 1u) {
                off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", n ? ", " : "",
                                        overheads_comm_name((overheads_comm)k));
                n++;
            }
        char p2p[64] = "";
        int np = 0;
        off = 0;
        for (int k = OVERHEADS_COMMS; k < OVERHEADS_COMM_KINDS; k++)
            if (x->nccl_comms >> k & 1u) {
                off += (size_t)snprintf(p2p + off, sizeof p2p - off, "%s%s", np ? ", " : "",
                                        overheads_comm_name((overheads_comm)k));
                np++;
            }
        snprintf(buf, cap,
                 "%d communicator%s%s%s%s x %d channels x %d peers x %.4g MiB (NCCL defaults; --nccl-channels, "
                 "--nccl-buffer-mib)%s%s%s",
                 n, n == 1 ? "" : "s", n ? " (" : "", names, n ? ")" : "", o->nccl_channels, OVERHEADS_NCCL_PEERS,
                 o->nccl_buffer_mib, np ? "; not counted: the peer-to-peer buffers of the " : "", p2p,
                 np ? " (not modelled)" : "");
        break;
    }
    case MEM_CUBLAS:
        snprintf(buf, cap, "%d GEMM stream x %.4g MiB (cuBLAS default; --cublas-workspace-mib)", OVERHEADS_GEMM_STREAMS,
                 o->cublas_workspace_mib);
        break;
    case MEM_FRAG:
        snprintf(buf, cap,
                 "%.3g%% of activations + p2p buffers (caching allocator, estimate; --allocator-fragmentation)",
                 100.0 * o->allocator_fragmentation);
        break;
    default:
        snprintf(buf, cap, "?");
        break;
    }
}

/* The memory peak, then one line per category at the peak rank's peak. */
static void report_memory(const simulate_result *r, FILE *f)
{
    const simulate_rank *pk = &r->ranks[r->peak_rank];
    fprintf(f, "memory peak             %.2f GiB of %.2f GiB on rank %d (%s), at the peak:\n",
            (double)r->peak_bytes / GIB, (double)r->hbm_bytes / GIB, r->peak_rank, r->fits ? "fits" : "DOES NOT FIT");
    for (int k = 0; k < MEM_CATS; k++) {
        char src[512];
        memory_source(r, pk, k, src, sizeof src);
        fprintf(f, "  %-23s %7.2f GiB  %s\n", mem_cat_name(k), (double)pk->peak_cat_bytes[k] / GIB, src);
    }
}

/* The share of the memory peak the data loader's batch must reach at the
 * peak for the fit line to name --no-create-attention-mask-in-dataloader:
 * 5%, a judgement (below it the flag would not move the verdict much). */
#define REPORT_MASK_HINT_FRAC 0.05

void report_fit_line(const simulate_result *r, FILE *f)
{
    if (r->fits)
        return;
    const simulate_rank *pk = &r->ranks[r->peak_rank];
    double act = (double)(pk->peak_cat_bytes[MEM_ACTIV] + pk->peak_cat_bytes[MEM_P2P] + pk->peak_cat_bytes[MEM_FRAG] +
                          pk->peak_cat_bytes[MEM_BATCH]);
    double state =
        (double)(pk->peak_cat_bytes[MEM_WEIGHTS] + pk->peak_cat_bytes[MEM_GRADS] + pk->peak_cat_bytes[MEM_OPTIM]);
    double other = (double)pk->peak_bytes - act - state;
    fprintf(f,
            "DOES NOT FIT: rank %d needs %.2f GiB of %.2f GiB (activations and buffers %.2f GiB, weights + gradients + "
            "optimizer %.2f GiB, CUDA/NCCL/cuBLAS %.2f GiB: try ",
            r->peak_rank, (double)r->peak_bytes / GIB, (double)r->hbm_bytes / GIB, act / GIB, state / GIB, other / GIB);
    /* the batch's attention mask (b s^2 / cp bytes against 28 b s / cp for
     * the rest of the batch, so nearly all of data-batch) is a significant
     * part of the peak: Megatron's causal attention builds none from it */
    if (r->data_mem[0].mask_bytes > 0 &&
        (double)pk->peak_cat_bytes[MEM_BATCH] >= REPORT_MASK_HINT_FRAC * (double)r->peak_bytes)
        fprintf(f, "--no-create-attention-mask-in-dataloader (the batch holds %.2f GiB), ",
                (double)pk->peak_cat_bytes[MEM_BATCH] / GIB);
    bool moe_rc = r->moe_experts > 0 && r->recompute != RECOMPUTE_FULL && !(r->recompute_modules & CONFIG_RC_MOE);
    if (r->recompute == RECOMPUTE_NONE)
        fprintf(f, "--recompute-granularity selective|full, ");
    if (moe_rc) /* the MoE layers recomputed in the backward (selective, module moe) */
        fprintf(f, "--moe-layer-recompute, ");
    if (r->recompute == RECOMPUTE_SELECTIVE)
        fprintf(f, "--recompute-granularity full, ");
    if (!r->sequence_parallel && r->t > 1)
        fprintf(f, "--sequence-parallel, ");
    if (!r->distributed_optimizer && r->d > 1)
        fprintf(f, "--use-distributed-optimizer, ");
    if (r->b > 1)
        fprintf(f, "a smaller --micro-batch-size, ");
    fprintf(f, "more pipeline stages or tensor parallelism, or trainsim search)\n");
}

/* The MoE lines of the text report (dense: none). */
static void report_moe(const simulate_result *r, FILE *f)
{
    if (!r->moe_experts)
        return;
    fprintf(f, "mixture of experts      %d experts, top-%d, %d of %d layers MoE; ep %d, ", r->moe_experts, r->moe_topk,
            r->moe_layers, r->num_layers, r->moe_ep);
    if (r->moe_etp > 1)
        fprintf(f, "etp %d, ", r->moe_etp);
    fprintf(f, "edp %d (%s dispatcher", r->moe_edp, r->moe_dispatcher);
    if (r->moe_mxfp8)
        fprintf(f, "; MXFP8: %s", r->moe_mxfp8);
    fprintf(f, ")\n");
    if (r->moe_forced_balance)
        fprintf(f, "routing                 forced balance (busiest EP rank %.3fx the mean tokens)\n",
                r->moe_load_factor);
    else if (r->moe_load_per_layer)
        fprintf(f,
                "routing                 measured per-layer loads (--moe-expert-load %s): busiest EP rank %.3fx the "
                "mean tokens (layer %d) to %.3fx%s\n",
                r->moe_load_path, r->moe_load_factor, r->moe_busiest_layer, r->moe_load_factor_min,
                r->moe_dropped > 0 ? "," : "");
    else if (r->moe_load_path)
        fprintf(f,
                "routing                 measured per-expert loads (--moe-expert-load %s): busiest EP rank %.3fx the "
                "mean tokens%s\n",
                r->moe_load_path, r->moe_load_factor, r->moe_dropped > 0 ? "," : "");
    else
        fprintf(f,
                "routing                 Zipf skew %g (--moe-routing-skew): busiest EP rank %.3fx the mean tokens%s\n",
                r->moe_skew, r->moe_load_factor, r->moe_dropped > 0 ? "," : "");
    if (r->moe_dropped > 0)
        fprintf(f, "                        %.2f%% of the routed tokens dropped at --moe-expert-capacity-factor\n",
                100.0 * r->moe_dropped);
    if (r->moe_router_fp32 || r->moe_sigmoid || r->moe_expert_bias || r->moe_pre_softmax || r->moe_aux_coeff > 0 ||
        r->moe_z_coeff > 0 || r->moe_topk_scale > 0) {
        static const char *const LB[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"};
        fprintf(f, "router                  %s scores%s, %s GEMM", r->moe_sigmoid ? "sigmoid" : "softmax",
                r->moe_pre_softmax ? " (pre-softmax)" : "", r->moe_router_fp32 ? "fp32" : "run-dtype");
        if (r->moe_aux_coeff > 0 && r->moe_lb_type >= 0 && r->moe_lb_type < 5)
            fprintf(f, ", %s %g", LB[r->moe_lb_type], r->moe_aux_coeff);
        if (r->moe_z_coeff > 0)
            fprintf(f, ", z-loss %g", r->moe_z_coeff);
        if (r->moe_expert_bias)
            fprintf(f, ", expert bias");
        if (r->moe_topk_scale > 0)
            fprintf(f, ", top-k scaled x%g", r->moe_topk_scale);
        fprintf(f, "\n");
    }
    if (r->moe_groups > 0) {
        fprintf(f, "group-limited routing   %d of %d expert groups per token", r->moe_group_topk, r->moe_groups);
        if (r->moe_remote_nodes > 0)
            fprintf(f, ": %.3f remote nodes per token (%.3f without the limit)", r->moe_remote_nodes,
                    r->moe_remote_nodes_free);
        fprintf(f, "\n");
    }
    fprintf(f, "imbalance cost          ");
    put_time(f, (double)r->moe_imbalance_ns);
    fprintf(f, " per iteration (%.2f%%) against forced balance (",
            pct((double)r->moe_imbalance_ns, (double)r->moe_balanced_ns));
    put_time(f, (double)r->moe_balanced_ns);
    fprintf(f, ")\n");
}

/* The data loader's line (dataload.h): its step per micro-batch on the
 * first and the last stage, what it moves, its time per iteration. */
static void report_data_loader(const simulate_result *r, double it, FILE *f)
{
    const dataload_cost *d0 = &r->data[0], *d1 = &r->data[1];
    fprintf(f, "\ndata loader             ");
    put_time(f, (double)d0->total_ns);
    if (r->p > 1 || r->v > 1) {
        fprintf(f, " per micro-batch on the first stage, ");
        put_time(f, (double)d1->total_ns);
        fprintf(f, " on the last");
    } else
        fprintf(f, " per micro-batch");
    if (r->data_measured)
        fprintf(f, " (--data-loader-ns, measured)");
    else {
        fprintf(f, " (%s%.3f MB to the GPU in %d copies", r->p > 1 || r->v > 1 ? "first stage: " : "",
                (double)d0->h2d_bytes * 1e-6, d0->n_h2d);
        if (d0->n_bcast)
            fprintf(f, ", %.3f MB in %d TP broadcasts", (double)d0->bcast_bytes * 1e-6, d0->n_bcast);
        fprintf(f, "%s)", d0->n_slice ? ", CP slices" : "");
    }
    fprintf(f, "; ");
    put_time(f, (double)r->data_rank_ns);
    fprintf(f, " per iteration on the rank with the most (%.2f%%)", pct((double)r->data_rank_ns, it));
    if (d0->mask_bytes > 0 && !r->data_measured)
        fprintf(f,
                "\n                        of it the [b, 1, s, s] attention mask, %.3f MB per micro-batch "
                "(--no-create-attention-mask-in-dataloader drops it)",
                (double)d0->mask_bytes * 1e-6);
}

void report_text(const simulate_result *r, FILE *f)
{
    double it = (double)r->iteration_ns;
    report_fit_line(r, f);
    fprintf(f, "trainsim simulate: %s on %d x %s\n", r->model, r->gpus, r->gpu);
    fprintf(
        f,
        "  layout: t=%d p=%d d=%d v=%d, micro-batch %d, global batch %d (%d micro-batches per pipeline), schedule %s\n",
        r->t, r->p, r->d, r->v, r->b, r->B, r->m, sched_kind_name(r->schedule));
    if (r->cp > 1) /* the exchange's exposed time is counted with TP's below */
        fprintf(f, "  context parallel: cp=%d (world t x cp x d x p; its K,V exchange counts as TP communication)\n",
                r->cp);
    fprintf(f, "  options: recompute %s, sequence parallel %s, distributed optimizer %s, overlap grad reduce %s\n\n",
            recompute_name(r->recompute), onoff(r->sequence_parallel), onoff(r->distributed_optimizer),
            onoff(r->overlap_grad_reduce));
    fprintf(f, "iteration time          ");
    put_time(f, it);
    fprintf(f, "\npipeline bubble         ");
    put_time(f, r->bubble_ns);
    fprintf(f, " per GPU (%.2f%% of the iteration; %.2f%% of the rest)\n", 100.0 * r->bubble_fraction,
            100.0 * r->bubble_over_ideal);
    fprintf(f, "compute per GPU         forward ");
    put_time(f, r->cat_ns[PLAN_CAT_FWD]);
    fprintf(f, ", backward ");
    put_time(f, r->cat_ns[PLAN_CAT_BWD]);
    fprintf(f, ", recompute ");
    put_time(f, r->cat_ns[PLAN_CAT_RECOMP]);
    fprintf(f, ", optimizer ");
    put_time(f, r->cat_ns[PLAN_CAT_OPTIM]);
    fprintf(f, "\noptimizer step          ");
    for (int k = 0, first = 1; k < PLAN_FIXED_KINDS; k++) {
        if (!r->fixed_ns[k])
            continue;
        fprintf(f, "%s%s ", first ? "" : ", ", PLAN_FIXED_NAMES[k]);
        put_time(f, (double)r->fixed_ns[k]);
        first = 0;
    }
    fprintf(f, " (the slowest rank's per-iteration fixed costs)");
    report_data_loader(r, it, f);
    fprintf(f, "\nexposed communication   ");
    for (int k = 0; k < SIMULATE_COMM_KINDS; k++) {
        if (k == SIMULATE_COMM_EP && !r->moe_experts)
            continue;
        fprintf(f, "%s%s ", k ? ", " : "", simulate_comm_name((simulate_comm)k));
        put_time(f, r->exposed_ns[k]);
        fprintf(f, " (%.2f%%)", pct(r->exposed_ns[k], it));
    }
    fprintf(f, "\ncommunication per GPU   TP ");
    put_time(f, r->cat_ns[PLAN_CAT_TP]);
    fprintf(f, ", PP ");
    put_time(f, r->cat_ns[PLAN_CAT_PP]);
    fprintf(f, ", DP ");
    put_time(f, r->cat_ns[PLAN_CAT_DP]);
    if (r->moe_experts) {
        fprintf(f, ", EP ");
        put_time(f, r->cat_ns[PLAN_CAT_EP]);
    }
    fprintf(f, " (busy time, overlapped or not)\n");
    report_moe(r, f);
    if (r->mla)
        fprintf(f, "attention               multi-latent (q_lora %d, kv_lora %d)\n", r->mla_q_lora, r->mla_kv_lora);
    if (r->mtp_depths > 0)
        fprintf(f, "multi-token prediction  %d depth%s on the last stage\n", r->mtp_depths,
                r->mtp_depths > 1 ? "s" : "");
    fprintf(f, "throughput              %.0f tokens/s\n", r->tokens_per_s);
    if (r->moe_experts) /* the Megatron closed form (96Bslh^2 ...) is a dense GPT's: not shown */
        fprintf(f, "TFLOP/s per GPU         %.1f model (MFU %.1f%%), %.1f hardware (HFU %.1f%%); peak %.1f\n",
                r->model_tflops_per_gpu, 100.0 * r->mfu, r->hw_tflops_per_gpu, 100.0 * r->hfu, r->peak_tflops);
    else
        fprintf(f,
                "TFLOP/s per GPU         %.1f model (MFU %.1f%%), %.1f hardware (HFU %.1f%%), "
                "%.1f in Narayanan et al.'s count (a recomputed forward counted, run or not); peak %.1f\n",
                r->model_tflops_per_gpu, 100.0 * r->mfu, r->hw_tflops_per_gpu, 100.0 * r->hfu,
                r->megatron_tflops_per_gpu, r->peak_tflops);
    fprintf(f,
            "MFU conventions         %.1f%% counting the full s x s attention scores (Megatron's, above), %.1f%% "
            "counting their causal half (NeMo's)\n",
            100.0 * r->mfu, 100.0 * r->mfu_causal);
    report_memory(r, f);
    if (r->train_tokens > 0)
        fprintf(f, "to train %.4g tokens    %.2f days on %d GPUs, %.0f GPU-hours\n", r->train_tokens,
                r->train_s / 86400.0, r->gpus, r->train_gpu_hours);
    fprintf(f, "\nper rank (ms; memory GiB)\n");
    bool ep = r->moe_experts > 0; /* MoE: the exposed all-to-all time too */
    fprintf(f, "%5s %12s %12s %10s %10s %10s%s %10s %9s %5s\n", "rank", "compute", "idle", "exp.TP", "exp.PP", "exp.DP",
            ep ? "     exp.EP" : "", "recompute", "peak", "fits");
    for (int i = 0; i < r->p; i++) {
        const simulate_rank *x = &r->ranks[i];
        char epc[16] = "";
        if (ep)
            snprintf(epc, sizeof epc, " %10.3f", x->exposed_ns[SIMULATE_COMM_EP] * 1e-6);
        fprintf(f, "%5d %12.3f %12.3f %10.3f %10.3f %10.3f%s %10.3f %9.2f %5s\n", i, x->busy_ns * 1e-6,
                x->idle_ns * 1e-6, x->exposed_ns[SIMULATE_COMM_TP] * 1e-6, x->exposed_ns[SIMULATE_COMM_PP] * 1e-6,
                x->exposed_ns[SIMULATE_COMM_DP] * 1e-6, epc, x->cat_ns[PLAN_CAT_RECOMP] * 1e-6,
                (double)x->peak_bytes / GIB, x->fits ? "yes" : "NO");
    }
    fprintf(f, "\nsimulated %" PRIu64 " tasks, %" PRIu64 " events\n", r->tasks, r->events);
}

/* A number that need not be integral: as csvio_fmt_double writes it, so it
 * reads back exactly. */
static void row(FILE *f, const char *scope, const char *metric, double v, const char *unit)
{
    char num[CSVIO_NUM_BYTES];
    fprintf(f, "%s,%s,%s,%s\n", scope, metric, csvio_fmt_double(num, sizeof num, v), unit);
}

static void irow(FILE *f, const char *scope, const char *metric, int64_t v, const char *unit)
{
    fprintf(f, "%s,%s,%" PRId64 ",%s\n", scope, metric, v, unit);
}

void report_csv(const simulate_result *r, FILE *f)
{
    const char *it = "iteration";
    fprintf(f, "scope,metric,value,unit\n");
    fprintf(f, "%s,model,%s,\n%s,gpu,%s,\n%s,schedule,%s,\n", it, r->model, it, r->gpu, it,
            sched_kind_name(r->schedule));
    fprintf(f, "%s,recompute,%s,\n", it, recompute_name(r->recompute));
    irow(f, it, "gpus", r->gpus, "GPUs");
    irow(f, it, "tp", r->t, "ranks");
    irow(f, it, "pp", r->p, "ranks");
    irow(f, it, "dp", r->d, "ranks");
    irow(f, it, "vp", r->v, "chunks");
    if (r->cp > 1)
        irow(f, it, "cp", r->cp, "ranks");
    irow(f, it, "micro_batch", r->b, "sequences");
    irow(f, it, "global_batch", r->B, "sequences");
    irow(f, it, "micro_batches", r->m, "micro-batches");
    irow(f, it, "iteration_time", r->iteration_ns, "ns");
    row(f, it, "bubble_time", r->bubble_ns, "ns");
    row(f, it, "bubble_fraction", r->bubble_fraction, "fraction");
    row(f, it, "bubble_over_ideal", r->bubble_over_ideal, "fraction");
    for (int k = 0; k < PLAN_CAT_COUNT; k++) {
        char m[64];
        if (k == PLAN_CAT_EP && !r->moe_experts)
            continue;
        snprintf(m, sizeof m, "time_%s", plan_cat_name(k));
        row(f, it, m, r->cat_ns[k], "ns");
    }
    static const char *const FIXED[PLAN_FIXED_KINDS] = {"zero_grad",
                                                        "nan_check",
                                                        "unscale",
                                                        "found_inf_allreduce",
                                                        "grad_norm",
                                                        "norm_allreduce",
                                                        "zero_count",
                                                        "zero_count_allreduce",
                                                        "adam",
                                                        "fp8_weight_cast",
                                                        "expert_bias_allreduce"};
    for (int k = 0; k < PLAN_FIXED_KINDS; k++) {
        char m[64];
        if (k == PLAN_FIXED_BIAS_AR && !r->fixed_ns[k]) /* only with --moe-router-enable-expert-bias */
            continue;
        snprintf(m, sizeof m, "optimizer_%s", FIXED[k]);
        irow(f, it, m, r->fixed_ns[k], "ns");
    }
    static const char *const STAGE[2] = {"first", "last"};
    for (int k = 0; k < 2; k++) { /* the data loader's step per micro-batch (dataload.h) */
        char m[64];
        snprintf(m, sizeof m, "data_loader_%s_stage", STAGE[k]);
        irow(f, it, m, r->data[k].total_ns, "ns");
        snprintf(m, sizeof m, "data_loader_%s_h2d_bytes", STAGE[k]);
        irow(f, it, m, r->data[k].h2d_bytes, "bytes");
        snprintf(m, sizeof m, "data_loader_%s_broadcast_bytes", STAGE[k]);
        irow(f, it, m, r->data[k].bcast_bytes, "bytes");
    }
    irow(f, it, "data_loader_rank_max", r->data_rank_ns, "ns");
    row(f, it, "exposed_tp", r->exposed_ns[SIMULATE_COMM_TP], "ns");
    row(f, it, "exposed_pp", r->exposed_ns[SIMULATE_COMM_PP], "ns");
    row(f, it, "exposed_dp", r->exposed_ns[SIMULATE_COMM_DP], "ns");
    if (r->moe_experts) {
        row(f, it, "exposed_ep", r->exposed_ns[SIMULATE_COMM_EP], "ns");
        irow(f, it, "moe_experts", r->moe_experts, "experts");
        irow(f, it, "moe_topk", r->moe_topk, "experts");
        irow(f, it, "moe_layers", r->moe_layers, "layers");
        irow(f, it, "ep", r->moe_ep, "ranks");
        irow(f, it, "etp", r->moe_etp, "ranks");
        irow(f, it, "edp", r->moe_edp, "ranks");
        irow(f, it, "moe_forced_balance", r->moe_forced_balance, "bool");
        row(f, it, "moe_routing_skew", r->moe_forced_balance || r->moe_load_path ? 0 : r->moe_skew, "Zipf exponent");
        if (r->moe_load_path)
            irow(f, it, "moe_measured_loads", 1, "bool");
        row(f, it, "moe_load_factor", r->moe_load_factor, "x mean");
        if (r->moe_load_per_layer) {
            row(f, it, "moe_load_factor_min", r->moe_load_factor_min, "x mean");
            irow(f, it, "moe_busiest_layer", r->moe_busiest_layer, "layer");
        }
        row(f, it, "moe_dropped", r->moe_dropped, "fraction");
        irow(f, it, "moe_balanced_iteration_time", r->moe_balanced_ns, "ns");
        irow(f, it, "moe_imbalance_time", r->moe_imbalance_ns, "ns");
        if (r->moe_router_fp32 || r->moe_sigmoid || r->moe_expert_bias || r->moe_pre_softmax || r->moe_aux_coeff > 0 ||
            r->moe_z_coeff > 0 || r->moe_topk_scale > 0) {
            irow(f, it, "moe_router_fp32", r->moe_router_fp32, "bool");
            irow(f, it, "moe_router_sigmoid", r->moe_sigmoid, "bool");
            irow(f, it, "moe_router_pre_softmax", r->moe_pre_softmax, "bool");
            irow(f, it, "moe_router_expert_bias", r->moe_expert_bias, "bool");
            irow(f, it, "moe_load_balancing_type", r->moe_aux_coeff > 0 ? r->moe_lb_type : -1,
                 "index (aux_loss seq_aux_loss global_aux_loss; -1 none)");
            row(f, it, "moe_aux_loss_coeff", r->moe_aux_coeff, "coefficient");
            row(f, it, "moe_z_loss_coeff", r->moe_z_coeff, "coefficient");
            row(f, it, "moe_topk_scaling_factor", r->moe_topk_scale, "x");
        }
        if (r->moe_groups > 0) {
            irow(f, it, "moe_router_num_groups", r->moe_groups, "groups");
            irow(f, it, "moe_router_group_topk", r->moe_group_topk, "groups");
        }
        if (r->moe_remote_nodes > 0)
            row(f, it, "moe_remote_nodes", r->moe_remote_nodes, "nodes per token");
    }
    if (r->mla)
        irow(f, it, "multi_latent_attention", 1, "bool");
    if (r->mtp_depths > 0)
        irow(f, it, "mtp_num_layers", r->mtp_depths, "layers");
    row(f, it, "tokens_per_s", r->tokens_per_s, "tokens/s");
    row(f, it, "model_flops", r->model_flops, "FLOP");
    row(f, it, "hardware_flops", r->hw_flops, "FLOP");
    row(f, it, "model_tflops_per_gpu", r->model_tflops_per_gpu, "TFLOP/s");
    row(f, it, "hardware_tflops_per_gpu", r->hw_tflops_per_gpu, "TFLOP/s");
    row(f, it, "megatron_tflops_per_gpu", r->megatron_tflops_per_gpu, "TFLOP/s");
    row(f, it, "mfu", r->mfu, "fraction");
    row(f, it, "hfu", r->hfu, "fraction");
    row(f, it, "model_flops_causal", r->model_flops_causal, "FLOP");
    row(f, it, "mfu_causal", r->mfu_causal, "fraction");
    irow(f, it, "memory_peak", r->peak_bytes, "bytes");
    irow(f, it, "memory_peak_rank", r->peak_rank, "rank");
    irow(f, it, "gpu_memory", r->hbm_bytes, "bytes");
    irow(f, it, "fits", r->fits, "bool");
    if (r->train_tokens > 0) {
        row(f, it, "train_tokens", r->train_tokens, "tokens");
        row(f, it, "train_time", r->train_s, "s");
        row(f, it, "train_gpu_hours", r->train_gpu_hours, "GPU-hours");
    }
    irow(f, it, "tasks", (int64_t)r->tasks, "tasks");
    irow(f, it, "events", (int64_t)r->events, "events");
    for (int i = 0; i < r->p; i++) {
        const simulate_rank *x = &r->ranks[i];
        char sc[32];
        snprintf(sc, sizeof sc, "rank %d", i);
        irow(f, sc, "compute_busy", x->busy_ns, "ns");
        irow(f, sc, "idle", x->idle_ns, "ns");
        irow(f, sc, "exposed_tp", x->exposed_ns[SIMULATE_COMM_TP], "ns");
        irow(f, sc, "exposed_pp", x->exposed_ns[SIMULATE_COMM_PP], "ns");
        irow(f, sc, "exposed_dp", x->exposed_ns[SIMULATE_COMM_DP], "ns");
        if (r->moe_experts)
            irow(f, sc, "exposed_ep", x->exposed_ns[SIMULATE_COMM_EP], "ns");
        for (int k = 0; k < PLAN_CAT_COUNT; k++) {
            char m[64];
            if (k == PLAN_CAT_EP && !r->moe_experts)
                continue;
            snprintf(m, sizeof m, "time_%s", plan_cat_name(k));
            irow(f, sc, m, x->cat_ns[k], "ns");
        }
        row(f, sc, "flops", x->flops, "FLOP");
        irow(f, sc, "memory_peak", x->peak_bytes, "bytes");
        irow(f, sc, "memory_peak_time", x->peak_t_ns, "ns");
        for (int k = 0; k < MEM_CATS; k++) {
            char m[64];
            snprintf(m, sizeof m, "memory_at_peak_%s", mem_cat_name(k));
            irow(f, sc, m, x->peak_cat_bytes[k], "bytes");
        }
        irow(f, sc, "fits", x->fits, "bool");
    }
}

int report_csv_write(const simulate_result *r, const char *path, ts_err *err)
{
    afile a;
    int rc = afile_open(&a, path, err);
    if (rc)
        return rc;
    report_csv(r, a.f);
    if (ferror(a.f)) {
        afile_abort(&a);
        return err_set(err, TS_EIO, "%s: write error", path);
    }
    return afile_commit(&a, err);
}
