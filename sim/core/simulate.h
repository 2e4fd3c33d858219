/* simulate — the simulator's top-level API: one training iteration of a
 * validated configuration, simulated event by event.
 *
 *   config -> schedule IR (sched_generate) -> plan (layer ops, costs)
 *          -> tasks (lower) -> engine run (+ memory timeline) -> result
 *
 * Default mode simulates one pipeline (p ranks): the t ranks of a tensor
 * group and the d data-parallel replicas are interchangeable, so their
 * collectives are costed (commcost.h), not simulated rank by rank.
 *
 * Ownership: simulate_run returns a result owned by the caller
 * (simulate_result_free). With opts.keep_trace the result also owns the
 * engine, plan and memory samples that trace_write() needs.
 */
#ifndef TRAINSIM_SIMULATE_H
#define TRAINSIM_SIMULATE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/core/engine.h"
#include "sim/core/mem.h"
#include "sim/core/plan.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* An optional network model (sim/net/net_simulate.h fills one): instead of
 * costing communication with commcost, it drives the communication tasks
 * with flows on the topology graph, and may simulate every rank. Engine
 * ranks 0..p-1 must be the pipeline ranks of one replica (what the report
 * describes). */
typedef struct simulate_net {
    void *ctx;
    int n_ranks; /* engine ranks: p, or t*d*p with --full */
    /* Hooks for engine_create; they call sim_hooks (the memory timeline) for
     * tasks of ranks < p. */
    engine_hooks (*hooks)(void *ctx, const engine_hooks *sim_hooks);
    /* Instead of lower_sched: add the tasks of every simulated rank. */
    int (*lower)(void *ctx, const plan *pl, const sched *s, engine *e, ts_err *err);
    /* After lowering, before engine_run. */
    int (*attach)(void *ctx, engine *e, const plan *pl, const sched *s, ts_err *err);
    /* After engine_run (run_rc its status): the network's own error first. */
    int (*finish)(void *ctx, int run_rc, ts_err *err);
} simulate_net;

typedef struct {
    const char *calibration_path; /* NULL: the default efficiency tables */
    double train_tokens;          /* > 0: time and GPU-hours to train this many tokens */
    bool keep_trace;              /* keep task times and memory samples for trace_write */
    const simulate_net *net;      /* NULL: communication costed by commcost (closed forms) */
    bool no_balanced_rerun;       /* MoE with routing skew: do not simulate the run again under forced
                                     balance; moe_balanced_ns is then 0 and moe_imbalance_ns 0 (not
                                     measured). For callers that read only the iteration and the peak
                                     (the search): halves a skewed MoE candidate's cost */
} simulate_opts;

/* The kinds of communication exposed time is split by: the index of
 * exposed_ns[] (and of search's exposed_s[]). */
typedef enum {
    SIMULATE_COMM_TP, /* tensor-parallel collectives */
    SIMULATE_COMM_PP, /* pipeline sends and receives */
    SIMULATE_COMM_DP, /* data-parallel gradient reductions, parameter gathers */
    SIMULATE_COMM_EP, /* the MoE dispatcher's all-to-alls over the expert-parallel group (0 for dense) */
    SIMULATE_COMM_KINDS
} simulate_comm;

/* Per pipeline rank (one GPU of each tensor-parallel group / replica). */
typedef struct {
    int64_t busy_ns;                         /* compute stream busy */
    int64_t idle_ns;                         /* no stream busy: the bubble on this rank */
    int64_t exposed_ns[SIMULATE_COMM_KINDS]; /* communication while compute is idle, per kind */
    int64_t cat_ns[PLAN_CAT_COUNT];          /* summed task time per category (comm overlapped or not) */
    double flops;                            /* GEMM flops this GPU executed */
    int64_t peak_bytes;                      /* memory peak */
    int64_t peak_t_ns;                       /* when */
    int64_t peak_cat_bytes[MEM_CATS];        /* breakdown at the peak */
    bool fits;                               /* peak <= GPU memory */
    unsigned nccl_comms;                     /* NCCL communicators held (1u << overheads_comm) */
} simulate_rank;

typedef struct {
    /* what was simulated */
    char model[CONFIG_NAME_BYTES];
    char gpu[CONFIG_NAME_BYTES];
    sched_kind schedule;
    /* the layout, with the letters of the Megatron-LM papers */
    int gpus; /* GPUs in the run (--gpus) */
    int t;    /* tensor-parallel size (--tensor-model-parallel-size) */
    int p;    /* pipeline stages (--pipeline-model-parallel-size); ranks[] has p */
    int d;    /* data-parallel size (--data-parallel-size, else gpus / (t x p)) */
    int v;    /* model chunks per pipeline rank: num_layers / (p x
                                      --num-layers-per-virtual-pipeline-stage), else 1 */
    int m;    /* micro-batches per pipeline per iteration: B / (b x d) */
    int b;    /* micro-batch, sequences (--micro-batch-size) */
    int B;    /* global batch, sequences (--global-batch-size) */
    int seq;  /* sequence length, tokens (--seq-length) */
    config_recompute recompute;
    bool sequence_parallel, distributed_optimizer, overlap_grad_reduce;
    /* timeline */
    int64_t iteration_ns;
    double bubble_ns;                       /* idle time averaged over ranks */
    double bubble_fraction;                 /* bubble_ns / iteration_ns */
    double bubble_over_ideal;               /* bubble_ns / (iteration_ns - bubble_ns): (p-1)/m for 1F1B */
    double exposed_ns[SIMULATE_COMM_KINDS]; /* per kind, averaged over ranks */
    double cat_ns[PLAN_CAT_COUNT];          /* averaged over ranks */
    int64_t fixed_ns[PLAN_FIXED_KINDS];     /* the parts of the longest optimizer step (plan.h plan_fixed) */
    dataload_cost data[2]; /* the data loader's step per micro-batch, first / last stage (plan.h plan.data) */
    bool data_measured;    /* --data-loader-ns: data[].total_ns is the measured figure */
    int64_t data_rank_ns;  /* the data loader's time per iteration on the rank with the most */
    simulate_rank *ranks;  /* p entries */
    /* throughput */
    double tokens_per_s;
    double model_flops;    /* per iteration, formulas.md model FLOPs (flops.h) */
    double hw_flops;       /* per iteration, what the simulated GPUs executed */
    double megatron_flops; /* 96Bslh^2(1 + s/6h + V/16lh): Megatron Table 1's count */
    double model_tflops_per_gpu, hw_tflops_per_gpu, megatron_tflops_per_gpu;
    double peak_tflops; /* per GPU, datasheet */
    double mfu, hfu;
    double model_flops_causal; /* per iteration, the attention scores' causal half counted (flops.h) */
    double mfu_causal;         /* model_flops_causal's MFU (NeMo's convention); mfu counts the full s x s */
    /* memory */
    int64_t hbm_bytes;  /* per GPU */
    int64_t peak_bytes; /* max over ranks */
    int peak_rank;
    bool fits;                  /* every rank fits */
    memory_overheads overheads; /* the figures behind the memory besides tensors (overheads.h) */
    /* training time */
    double train_tokens, train_s, train_gpu_hours;
    /* simulator */
    uint64_t events, tasks;
    /* kept with keep_trace (owned) */
    engine *eng;
    plan *pl;
    mem_tracker *mem;
    int cp; /* context-parallel size (1: none); the world is t x cp x d x p */
    /* mixture of experts (moe_experts 0: dense, the rest unset) */
    int moe_experts, moe_topk, moe_ep, moe_edp, moe_layers, num_layers;
    int moe_etp;                    /* expert-tensor-parallel size */
    bool moe_forced_balance;        /* --moe-router-force-load-balancing */
    const char *moe_dispatcher;     /* static: "allgather", "alltoall" or "flex with DeepEP" */
    const char *moe_mxfp8;          /* static: what the dispatcher sends in MXFP8 (moe_disp.h), NULL: nothing */
    double moe_skew;                /* --moe-routing-skew (unused under forced balance) */
    double moe_dropped;             /* fraction of the routed tokens dropped at capacity (0: dropless) */
    double moe_load_factor;         /* the busiest EP rank's routed tokens over the mean (per-layer loads: the
                                       busiest layer's) */
    bool moe_load_per_layer;        /* --moe-expert-load per layer: each MoE layer its own factor */
    double moe_load_factor_min;     /* per-layer loads: the least loaded layer's factor */
    int moe_busiest_layer;          /* per-layer loads: the first layer (0-based) with moe_load_factor */
    int64_t moe_balanced_ns;        /* the same run's iteration under forced balance (= iteration_ns when
                                     balance is forced or the skew is 0) */
    int64_t moe_imbalance_ns;       /* iteration_ns - moe_balanced_ns: what the routing skew costs */
    int moe_groups, moe_group_topk; /* group-limited routing (0: none) */
    double moe_remote_nodes;        /* DeepEP: remote nodes a token goes to (moe.h), 0 otherwise */
    double moe_remote_nodes_free;   /* the same without group limits */
    const char *moe_load_path;      /* --moe-expert-load FILE: the routing's measured loads, borrowed (NULL: none) */
    /* router options (moe_config's: fp32 GEMM, sigmoid scores, expert bias, pre-softmax, the
       load-balancing type and its coefficient, z-loss, top-k scaling; 0 / false: unset) */
    bool moe_router_fp32, moe_sigmoid, moe_expert_bias, moe_pre_softmax;
    int moe_lb_type;
    double moe_aux_coeff, moe_z_coeff, moe_topk_scale;
    /* multi-latent attention and multi-token prediction (mla.h, mtp.h) */
    bool mla;
    int mla_q_lora, mla_kv_lora;
    int mtp_depths; /* --mtp-num-layers (0: none) */
} simulate_result;

/* Simulate one iteration of c (already resolved: config_resolve). *out is
 * owned by the caller. Errors: TS_EINVAL (shapes the model cannot split,
 * a calibration file without rows for the GPU), TS_EIO (calibration file),
 * TS_ENOMEM, TS_ESTATE (an internal inconsistency, reported). */
int simulate_run(const config *c, const simulate_opts *opts, simulate_result **out, ts_err *err);

void simulate_result_free(simulate_result *r); /* NULL allowed */

/* "TP", "PP", "DP", "EP" for SIMULATE_COMM_TP, _PP, _DP, _EP; "?" for anything else. */
const char *simulate_comm_name(simulate_comm k);

#endif
