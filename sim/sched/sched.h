/* sched — the pipeline schedule IR shared by the simulator and the executor.
 *
 * A schedule is, for each pipeline rank r in [0, p), an ordered array of
 * actions {kind, micro-batch, chunk, peer}. Ranks execute their arrays in
 * order; send/recv actions are explicit and matched across ranks, so the same
 * array drives the simulator (sim/) and the reference executor (exec/).
 *
 * Stages: the model's layers are split into p*v stages (virtual stages). The
 * stage a rank runs for a local chunk c is sched_stage_of(): loop placement
 * (GPipe, 1F1B, interleaved, ZB-H1/H2) puts stage c*p + r on rank r; the V
 * placement of ZB-V and DualPipeV puts stage r (c = 0) and stage 2p-1-r
 * (c = 1) on rank r.
 * Stage 0 holds the embedding, stage p*v-1 the output layer and the loss.
 *
 * Communication: a SEND/RECV pair moves the activations (SEND_F/RECV_F) or
 * the gradient (SEND_B/RECV_B) of (mb, stage) between ranks that run adjacent
 * stages. The action names the stage on its own rank: SEND_F of stage s pairs
 * with RECV_F of stage s+1 on the peer, SEND_B of stage s with RECV_B of stage
 * s-1. Adjacent stages on the same rank (ZB-V's bottom of the V, p = 1) pass
 * data locally and have no SEND/RECV (sched_dep.h: where each F / B / I's
 * input comes from and its output goes). SEND and RECV post the transfer (like
 * isend/irecv); the op that consumes received data waits for it. Generated
 * schedules put each SEND right after the op producing its data, and their
 * lists follow one global order in which every SEND meets its RECV, so even
 * executing each SEND and RECV as a blocking rendezvous (MPI_Ssend/MPI_Recv,
 * one at a time) cannot deadlock; sched_validate() proves this for any
 * schedule. Executors get the best overlap by posting a RECV without
 * waiting and waiting just before the consumer, as torch does.
 *
 * A schedule with no SEND/RECV action at all is "compute only" (PyTorch's
 * compute_only CSV format): cross-rank dependencies are then implicit;
 * sched_add_comm() inserts the explicit actions.
 *
 * Ownership: a sched is created by a generator or the CSV importer and freed
 * with sched_free(); every array it points to belongs to it.
 */
#ifndef TRAINSIM_SCHED_H
#define TRAINSIM_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/util/err.h"

typedef enum {
    SCHED_GPIPE = 0,
    SCHED_1F1B,
    SCHED_INTERLEAVED,
    SCHED_ZB_H1,
    SCHED_ZB_H2,
    SCHED_ZB_V,
    SCHED_DUALPIPEV, /* DeepSeek's DualPipeV: V placement, overlapped F&B pairs */
    SCHED_DUALPIPE,  /* DeepSeek's DualPipe: two model copies, dual placement (schedule only) */
    SCHED_CUSTOM,    /* imported from CSV; not produced by a generator */
    SCHED_KIND_COUNT
} sched_kind;

typedef enum {
    SCHED_PLACE_LOOP = 0, /* stage = chunk*p + rank */
    SCHED_PLACE_V,        /* chunk 0: stage = rank; chunk 1: stage = 2p-1-rank */
    SCHED_PLACE_DUAL      /* DualPipe: stages as V, but two model copies: stages 0..p-1
                             (copy 0, ranks 0 -> p-1) and p..2p-1 (copy 1, ranks p-1 -> 0)
                             are two pipelines, each stage a whole stage of a p-stage
                             split, and m counts the micro-batches of one copy */
} sched_placement;

/* Action kinds. Token letters are those of torch.distributed.pipelining. */
typedef enum {
    ACT_F = 0,       /* "F": forward of (mb, chunk) */
    ACT_B,           /* "B": whole backward (input + weight gradients) */
    ACT_I,           /* "I": backward, input-gradient part only (zero bubble "B") */
    ACT_W,           /* "W": backward, weight-gradient part only */
    ACT_SEND_F,      /* "SEND_F": send activations of (mb, chunk) to peer */
    ACT_RECV_F,      /* "RECV_F": receive activations of (mb, chunk) from peer */
    ACT_SEND_B,      /* "SEND_B": send input gradient of (mb, chunk) to peer */
    ACT_RECV_B,      /* "RECV_B": receive output gradient of (mb, chunk) from peer */
    ACT_REDUCE_GRAD, /* "REDUCE_GRAD": data-parallel gradient reduction of chunk */
    ACT_OPTIM,       /* "OPTIM": optimizer step (trainsim extension token) */
    ACT_KIND_COUNT
} sched_act_kind;

typedef struct {
    uint8_t kind;    /* sched_act_kind */
    uint8_t overlap; /* 1 on an F that runs together with the next compute
                        action of its rank (a B of another micro-batch):
                        DualPipe's overlapped "F&B" chunk; 0 otherwise */
    int16_t chunk;   /* local chunk on this rank, 0..v-1; -1 for OPTIM */
    int32_t mb;      /* micro-batch 0..m-1; -1 for REDUCE_GRAD and OPTIM */
    int32_t peer;    /* SEND/RECV: the other pipeline rank; -1 otherwise */
} sched_action;

typedef struct {
    int first_layer; /* first transformer layer of this stage (0-based) */
    int num_layers;  /* may differ between stages (uneven split); may be 0 (a layout string's
                        stage with the embedding or the loss only) */
} sched_stage;

typedef struct {
    sched_kind kind;
    sched_placement placement;
    int p;                  /* pipeline ranks */
    int m;                  /* micro-batches per iteration */
    int v;                  /* chunks (virtual stages) per rank */
    int num_layers;         /* transformer layers in the whole model */
    sched_stage *stages;    /* p*v entries, indexed by global stage id */
    size_t *n_actions;      /* p entries: actions on rank r */
    sched_action **actions; /* p arrays: actions[r][0 .. n_actions[r]-1] */
} sched;

/* Options for the generators. */
typedef struct {
    sched_kind kind;
    int p, m, v;             /* v must be 1 except INTERLEAVED (>=1), ZB_V and DUALPIPEV (2) */
    int num_layers;          /* >= p*v; 0 means one layer per stage */
    int first_stage_layers;  /* 0 = even split; else layers of stage 0 */
    int last_stage_layers;   /* 0 = even split; else layers of the last stage */
    const int *stage_layers; /* NULL: the split above; else p*v layer counts, one per
                                global stage (sched_layout.h), which override
                                num_layers / first / last; borrowed, read during
                                sched_generate only. A stage may hold 0 layers. */
    bool with_comm;          /* emit SEND/RECV actions (default true) */
    bool with_reduce_optim;  /* emit REDUCE_GRAD per chunk + OPTIM at the end */
    int mb_group_size;       /* INTERLEAVED only: Megatron-core's
                                  microbatch_group_size_per_vp_stage, in
                                  [p, m]; 0 = p (Megatron's default) */
    bool combined_1f1b;      /* INTERLEAVED with p > 1 only: Megatron-core's combined
                                1F1B (--overlap-moe-expert-parallel-comm, ep_pair.h):
                                one more warm-up forward on every rank
                                (get_pp_rank_microbatches), so that each steady-state
                                F pairs with a B of another micro-batch; each
                                steady-state F is marked (sched_action.overlap) with
                                the B after it, Megatron's combined steps (none on a
                                rank whose warm-up takes every micro-batch) */
} sched_opts;

/* Limits on generator options (and on imported schedules). */
#define SCHED_MAX_P 1024
#define SCHED_MAX_M 65536
#define SCHED_MAX_V 64

/* Fill o with defaults for kind (p = m = v = 1, even split, comm on). */
void sched_opts_default(sched_opts *o, sched_kind kind);

/* Free s and everything it owns. NULL is allowed. */
void sched_free(sched *s);

/* Global stage id of (rank, chunk) under s's placement. */
int sched_stage_of(const sched *s, int rank, int chunk);
/* Rank and local chunk that run global stage id. */
void sched_rank_chunk_of(const sched *s, int stage, int *rank, int *chunk);

/* Names: "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev",
 * "dualpipe". */
const char *sched_kind_name(sched_kind k);
/* Parse a name; TS_EINVAL with the list of valid names if unknown. */
int sched_kind_parse(const char *name, sched_kind *out, ts_err *err);
/* Token letters of an action kind: "F", "B", "I", "W", "SEND_F", ... */
const char *sched_act_name(sched_act_kind k);

/* True for the kinds with the V placement (zb-v, dualpipev). */
bool sched_kind_is_v(sched_kind k);

/* Number of global stages, p*v. */
int sched_num_stages(const sched *s);

/* Write the torch.distributed.pipelining token of action a on rank into buf
 * ("0F1", "3SEND_B2", "1REDUCE_GRAD", "OPTIM"); the first number is the
 * global stage, the last the micro-batch. Returns the token length;
 * SCHED_TOKEN_BYTES always suffices. */
#define SCHED_TOKEN_BYTES 48
size_t sched_action_token(const sched *s, int rank, const sched_action *a, char *buf, size_t size);

/* True if s has at least one SEND/RECV action (else it is compute only). */
bool sched_has_comm(const sched *s);

/* Peak activations in flight on each rank, in chunk activations: (mb, chunk)
 * pairs whose F has run and whose last backward part (B, or W when split)
 * has not. Fills peak[0 .. p-1]. */
void sched_peak_inflight(const sched *s, int *peak);

#endif
