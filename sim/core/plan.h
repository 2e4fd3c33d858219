/* plan — task templates of one training iteration, per pipeline stage.
 *
 * Lowering is two-step. plan_build() turns the model into "steps": for each
 * pipeline stage and each pass (F, B, I, W) the ops of the stage's layers
 * (layer.h) — embedding on stage 0, output layer and loss on the last stage,
 * recomputation folded into B and I per the recompute mode — costed on the GPU
 * (cost.h, commcost.h) and merged: consecutive compute ops that wait for
 * nothing new become one step on the compute stream, each collective is one
 * step on its communication stream, with the dependencies layer.h gives
 * (forward all-reduces on the critical path, backward ones overlapped with
 * the weight-gradient GEMM). It also plans the pipeline transfers between
 * stages, the data-parallel gradient reduction (whole, or in buckets during
 * the last backward with --overlap-grad-reduce), the optimizer step and the
 * static memory of each rank. lower.h then instantiates the steps once per
 * IR action. A step is the unit the engine runs: its index is the engine
 * task's tag, so reports and traces find every task's description here.
 *
 * Ownership: plan_build/plan_uniform return a plan the caller frees with
 * plan_free(); names point to static strings.
 */
#ifndef TRAINSIM_PLAN_H
#define TRAINSIM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/commcost.h"
#include "sim/model/cost.h"
#include "sim/model/dataload.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Streams of every simulated GPU. Each collective group has its own NCCL
 * communicator and stream in Megatron-LM, so TP, PP and DP traffic can
 * overlap each other as well as compute. Receives from the previous and from
 * the next stage are independent (posted together, as batched isend/irecv),
 * each in micro-batch order. */
typedef enum {
    PLAN_STREAM_COMPUTE = 0,
    PLAN_STREAM_TP,        /* tensor-parallel collectives */
    PLAN_STREAM_PP_SEND,   /* pipeline sends */
    PLAN_STREAM_PP_RECV_F, /* pipeline receives of activations (from the previous stage) */
    PLAN_STREAM_PP_RECV_B, /* pipeline receives of gradients (from the next stage) */
    PLAN_STREAM_DP,        /* data-parallel gradient reduction, parameter all-gather */
    PLAN_STREAM_EP,        /* an overlapped pair's MoE all-to-alls in the flow modes (Megatron-core's combined
                              layer's communication stream, lower.h); no plan step is on it: lowering moves
                              them there from the TP stream */
    PLAN_STREAMS
} plan_stream;

/* What a step's time counts as in the report. */
typedef enum {
    PLAN_CAT_FWD = 0, /* forward compute */
    PLAN_CAT_BWD,     /* backward compute (B, I and W) */
    PLAN_CAT_RECOMP,  /* recomputed forward */
    PLAN_CAT_OPTIM,   /* optimizer step */
    PLAN_CAT_TP,      /* tensor-parallel communication */
    PLAN_CAT_PP,      /* pipeline communication */
    PLAN_CAT_DP,      /* data-parallel communication */
    PLAN_CAT_EP,      /* expert-parallel communication: the MoE dispatcher's all-to-alls (on the TP stream) */
    PLAN_CAT_DATA,    /* the data loader's step (dataload.h) at the start of a loading stage's forward */
    PLAN_CAT_COUNT
} plan_cat;

#define PLAN_NO_STEP UINT32_MAX

/* The parts of a rank's optimizer step: Megatron-LM's per-iteration fixed
 * costs, run one after the other on the compute stream (plan_build.c has
 * the byte counts). */
typedef enum {
    PLAN_FIXED_ZERO_GRAD = 0, /* the gradient buffer zeroed for the next iteration (written once) */
    PLAN_FIXED_NAN_CHECK,     /* the NaN / large-gradient check: the gradient buffer read once (bucket norms) */
    PLAN_FIXED_UNSCALE,       /* fp16 or --loss-scale: gradients [copied to fp32], unscaled, checked for inf */
    PLAN_FIXED_INF_AR,        /* the found-inf flag all-reduced (one fp32) */
    PLAN_FIXED_GRAD_NORM,     /* --clip-grad > 0: every gradient of the optimizer's shard read for the norm */
    PLAN_FIXED_NORM_AR,       /* the norm all-reduced (one fp32) */
    PLAN_FIXED_ZEROS,         /* --log-num-zeros-in-grad: every gradient of the shard read, zeros counted */
    PLAN_FIXED_ZEROS_AR,      /* the count all-reduced (one fp32) */
    PLAN_FIXED_ADAM,          /* the Adam step, 16-bit weights written */
    PLAN_FIXED_FP8_CAST,      /* FP8: the layers' weights cast once */
    PLAN_FIXED_BIAS_AR,       /* --moe-router-enable-expert-bias: the token counts all-reduced (moe.h) */
    PLAN_FIXED_KINDS
} plan_fixed;

/* "zero-grad", "nan check", "unscale", "found-inf all-reduce", "grad norm", "norm all-reduce", "zero count",
 * "zero-count all-reduce", "adam", "fp8 weight cast", "expert-bias all-reduce" */
extern const char *const PLAN_FIXED_NAMES[PLAN_FIXED_KINDS];

/* A piece of a collapsed step (see plan_opts.inline_tp): one merged run of
 * compute ops or one collective, at a fixed offset from the step's start. */
typedef struct {
    const char *name;  /* static */
    uint8_t stream;    /* PLAN_STREAM_COMPUTE or PLAN_STREAM_TP: the trace track */
    uint8_t cat;       /* plan_cat */
    int64_t offset_ns; /* from the step's start */
    int64_t dur_ns;
    double flops;
    int64_t comm_bytes;
} plan_seg;

/* A memory change at a fixed offset from a step's start. */
typedef struct {
    int64_t offset_ns;
    int64_t delta_bytes; /* > 0 allocation, < 0 free (activations) */
    bool batch;          /* the data loader's batch (mem.h MEM_BATCH), not activations */
} plan_mem_ev;

typedef struct {
    const char *name;   /* static, e.g. "F", "tp.all-reduce", "send.F" */
    uint8_t stream;     /* plan_stream */
    uint8_t cat;        /* plan_cat */
    uint8_t comm_coll;  /* communication steps: commcost_coll (COMM_ALL_REDUCE where unset) */
    bool root;          /* first step of its stream in its pass: waits for the pass's inputs */
    bool comm_cp;       /* a collective of the context-parallel group (cp.h: the all-to-all level for
                           COMM_ALL_TO_ALL, the ring level otherwise; COMM_P2P: one ring step; for
                           these two comm_lat_ns is the default mode's alphas, its time of one byte) */
    int32_t comm_ranks; /* an all-reduce over this many consecutive ranks of Megatron's order beyond the
                           tensor-parallel group: t x cp or t x cp x d (the MoE aux loss's, FP8 amax's;
                           layer ops of stride 1 and span comm_ranks); 0: the stream's own group */
    int16_t dp_bucket;  /* >= 0: bucket of gradients complete when this step ends (overlap) */
    int32_t stage;      /* pipeline stage (global id) */
    int32_t dep[2];     /* earlier steps of the same pass (relative index) it waits for; -1 none */
    int64_t dur_ns;     /* duration on the engine */
    double flops;       /* GEMM flops one TP rank executes */
    int64_t comm_bytes; /* collective size, commcost convention (communication steps) */
    /* NCCL's terms for the flow modes (commcost_flow_terms; 1 and 0 where unset):
     * the per-byte slowdown of this size's protocol, by which they scale
     * comm_bytes, and the latency of NCCL's choice, ns */
    double comm_bw_factor;
    int64_t comm_lat_ns;
    /* MoE, data-parallel steps: of comm_bytes, the routed experts' part,
     * reduced or gathered over the expert-data-parallel group after the rest
     * (not at all with edp 1; 0: none), and NCCL's terms for it there (the
     * two above are then the rest's, over the data-parallel group) */
    int64_t comm_bytes_edp;
    double edp_bw_factor;
    int64_t edp_lat_ns;
    int64_t alloc_bytes; /* activation bytes allocated when the step starts */
    int64_t free_bytes;  /* activation bytes freed when the step ends (< 0: allocated then) */
    /* the data loader's batch (dataload_mem), likewise: allocated at the
     * start of the loader's step, freed at its end and at the ends of the
     * forward and the backward passes that drop its tensors */
    int64_t batch_alloc_bytes, batch_free_bytes;
    /* collapsed steps (seg_n > 0): the segments that make them up, the time
     * within them when only tensor-parallel communication runs, and their
     * memory changes (replacing alloc_bytes / free_bytes) */
    uint32_t seg_first, seg_n;
    int64_t tp_exposed_ns;
    int64_t ep_exposed_ns; /* of tp_exposed_ns, the MoE all-to-alls' part while no compute runs (report:
                              exposed EP) */
    uint32_t mem_first, mem_n;
} plan_step;

/* A contiguous range of steps: [first, first + n). */
typedef struct {
    uint32_t first, n;
} plan_range;

/* Pass indices of plan_stage.pass[]. */
enum { PLAN_PASS_F = 0, PLAN_PASS_B, PLAN_PASS_I, PLAN_PASS_W, PLAN_PASSES };

typedef struct {
    plan_range pass[PLAN_PASSES];       /* F, B (whole backward), I, W */
    plan_range pass_final[PLAN_PASSES]; /* B and W split where gradient buckets close,
                                      for the chunk's last backward (n = 0: use pass) */
    uint32_t send_f, send_b;            /* transfer to the next / previous stage (PLAN_NO_STEP at the ends) */
    uint32_t recv_f, recv_b;            /* the matching receives on this stage */
    uint32_t dp_whole;                  /* gradient reduction of the whole stage (no overlap) */
    uint32_t dp_bucket0;                /* first of n_buckets bucket reductions (overlap) */
    int n_buckets;
    uint32_t fsdp_gather[PLAN_PASSES]; /* FSDP with sharded parameters: the exposed part of the pass's
                                          per-layer parameter all-gathers (PLAN_NO_STEP: none) */
    int64_t params;                    /* parameters one TP rank holds for this stage (experts included) */
    int64_t expert_params;             /* of params, the routed experts' (reduced over the expert-data-parallel
                                          group, sharded over it by the distributed optimizer) */
    int64_t p2p_bytes;                 /* message per micro-batch to a neighbour stage */
} plan_stage;

/* --overlap-moe-expert-parallel-comm (ep_pair.h): copies of the forward
 * of stage sf and of the backward (pass kb, PLAN_PASS_B or PLAN_PASS_I) of
 * stage sb with the all-to-all time each hides behind the other's compute
 * taken out of their collapsed steps (dur_ns, tp_exposed_ns and
 * ep_exposed_ns less it, in step order); lower.h runs them for an F and a
 * backward the schedule pairs (ep_pair_mark). The copies keep the
 * originals' segments (the trace shows each pass's ops as if alone); their
 * memory events are copied at offsets scaled to the shorter steps. */
typedef struct {
    int32_t sf, sb;
    int kb;
    plan_range f, b, b_final; /* b_final.n = 0: the stage's backward has no bucket-split variant */
} plan_ep_pair;

typedef struct {
    int n_stages; /* p * v */
    int p, v;
    plan_stage *stages; /* n_stages */
    plan_step *steps;   /* every step; a task's tag indexes this */
    uint32_t n_steps;
    size_t cap_steps; /* steps allocated (grow_to) */
    plan_seg *segs;   /* segments of collapsed steps */
    uint32_t n_segs;
    size_t cap_segs;
    plan_mem_ev *mem_evs; /* memory changes of collapsed steps */
    uint32_t n_mem_evs;
    size_t cap_mem_evs;
    uint32_t *optim;        /* p: optimizer step per rank (PLAN_NO_STEP if none) */
    uint32_t *param_gather; /* p: parameter all-gather after it (distributed optimizer) */
    uint32_t emb_allreduce; /* all-reduce of the tied word-embedding gradient between the
                                      first and the last stage's ranks, before their optimizer
                                      step (Megatron-LM's embedding group); PLAN_NO_STEP if one
                                      rank holds both */
    int64_t *weights_bytes; /* p: static memory per rank */
    int64_t *grads_bytes;
    int64_t *optim_bytes;
    int64_t p2p_buffer_bytes;   /* receive buffer held from a receive until its pass starts */
    int d;                      /* data-parallel size (1: no reduction steps) */
    int edp;                    /* expert-data-parallel size: ranks the expert gradients are reduced over */
    double moe_load_factor;     /* MoE: the busiest EP rank's routed tokens over the mean (1: balance; 0: dense);
                                 per-layer loads: the largest of the layers' */
    double moe_load_factor_min; /* MoE: the smallest layer's (= moe_load_factor unless loads are per layer) */
    int moe_busiest_layer;      /* MoE: the first layer (0-based) with moe_load_factor; -1 dense */
    double moe_dropped;         /* MoE: fraction of the routed tokens over an expert's capacity (dropped) */
    int64_t fixed_ns[PLAN_FIXED_KINDS]; /* the parts of the longest optimizer step (its rank's), ns */
    /* The data loader's step of one micro-batch, the first compute step of
     * the forward of the stages that load data (dataload.h): [0] the first
     * stage's, [1] the last stage's (with one stage both are its step).
     * With --data-loader-ns (data_measured) total_ns is the measured figure
     * and the parts are the model's, for the report. */
    dataload_cost data[2];
    dataload_mem data_mem[2]; /* the batch's memory per micro-batch, [0] first / [1] last stage, likewise */
    bool data_measured;
    bool overlap_grad_reduce;
    bool distributed_optimizer;
    uint32_t max_pass_steps; /* longest pass range (scratch size for lowering) */
    plan_ep_pair *ep_pairs;  /* --overlap-moe-expert-parallel-comm: the pairs' variants (NULL: none) */
    uint32_t n_ep_pairs;
    bool ep_pair_steps;    /* --overlap-moe-expert-parallel-comm in the flow modes (passes not collapsed):
                           lower.h interleaves the paired passes' own steps on the two streams */
    bool ep_pair_combined; /* --overlap-moe-expert-parallel-comm in any mode: lower.h runs each pair as
                              Megatron-core's combined step (both inputs first, both outputs at its end) */
} plan;

/* A plan for tests of the closed forms: every stage's F, B, I, W is one
 * compute step of f_ns, b_ns (= i_ns + w_ns), i_ns, w_ns, transfers take
 * p2p_ns, no data parallelism, no optimizer; activation alloc at F of
 * act_bytes, freed by B or W. */
int plan_uniform(const sched *s, int64_t f_ns, int64_t i_ns, int64_t w_ns, int64_t p2p_ns, int64_t act_bytes,
                 plan **out, ts_err *err);

void plan_free(plan *pl); /* NULL allowed */

/* Builder helpers (plan.c), used by plan_build (plan_build.c) and tests:
 * plan_alloc: an empty plan for p ranks of v chunks (every step index
 * PLAN_NO_STEP, d = 1); plan_step_init: a step with no deps, bucket or
 * memory; plan_push_step: append a copy, *out = its index; plan_add_transfers:
 * the send/receive steps of every stage boundary (dur_ns each, bytes the
 * message). TS_ENOMEM on allocation failure. */
int plan_alloc(int p, int v, plan **out);
plan_step plan_step_init(const char *name, int stream, int cat, int stage, int64_t dur_ns);
int plan_push_step(plan *pl, const plan_step *s, uint32_t *out);
int plan_add_transfers(plan *pl, int64_t dur_ns, int64_t bytes);

/* Names for reports: "compute", "tp", "pp-send", "pp-recv-fwd", "pp-recv-bwd", "dp"; "forward",
 * "backward", "recompute", "optimizer", "tp", "pp", "dp", "ep", "data". */
const char *plan_stream_name(int s);
const char *plan_cat_name(int c);

#endif
