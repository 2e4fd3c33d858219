/* cost — how long one compute op takes on one GPU kind, in integer ns.
 *
 *   GEMM (tile model, the default tables; cost_gemm_tiles.sms > 0):
 *     launch_ns + max(compute, memory), compute = the best over the
 *     architecture's tile shapes (tm x tn x tk) of
 *       waves * (ceil(ceil(k/tk) / split) + kloop_overhead_steps) * step_ns,
 *       tiles   = ceil(m/tm) * ceil(n/tn) * batch,
 *       split   = tiles < sms ? min(floor(sms/tiles), ceil(k/tk)) : 1   (split-K),
 *       waves   = ceil(tiles * split / sms)  (the last wave partial),
 *       step_ns = 2*tm'*tn'*tk / (peak_tflops*1e3/sms * peak_frac),
 *       tm' = min(tm, m rounded up to 16), tn' likewise,
 *     memory = dtype_bytes*(m*k + k*n + m*n)*batch / (hbm_gbps * eff_mem(bytes)).
 *   GEMM (table, a calibration's; sms = 0):
 *     launch_ns + flops / (peak_tflops * eff_gemm(intensity))
 *   memory:   launch_ns + bytes / (hbm_gbps * eff_mem(bytes))
 * where intensity = 2*m*n*k / (dtype_bytes * (m*k + k*n + m*n)) flops per
 * byte of one GEMM of the batch (the roofline key: it falls for thin GEMMs,
 * e.g. the attention GEMMs whose inner dimension is the head size, and for
 * small ones), and eff_* are efficiency tables (fraction of peak, in (0, 1])
 * interpolated with GSL (Steffen's monotone cubic in log10 of the key;
 * linear for 2 knots; clamped to the end values outside the table).
 *
 * FP8 GEMMs (layer_op.fp8, cost_gemm_fp8_ns): the tile model with the FP8
 * tiles (fp8_tiles) at the FP8 peak, 1-byte A and B and a 16-bit C for the
 * HBM floor. The flash kernel's GEMMs (ops named attn.flash*) have no HBM
 * floor: the s x s tiles stay on chip (cost_op_ns).
 *
 * Default params for A100, H100, H200, B200, GB200 (cost_params_default) cite their
 * sources in cost.c; a calibration CSV (calib.h) gives measured ones.
 * Collectives are not costed here: see commcost.h.
 *
 * Ownership: cost_model_new returns a model owned by the caller (free with
 * cost_model_free); it copies the params. Evaluating a model is read-only
 * apart from GSL's lookup accelerators: use one model per thread.
 */
#ifndef TRAINSIM_COST_H
#define TRAINSIM_COST_H

#include <stdint.h>

#include "sim/config/config.h"
#include "sim/model/commcost.h"
#include "sim/model/layer.h"
#include "sim/util/err.h"

#define COST_MAX_KNOTS 32

/* An efficiency table: strictly increasing keys > 0, efficiencies in (0, 1]. */
typedef struct {
    int n;                      /* knots, 2..COST_MAX_KNOTS */
    double key[COST_MAX_KNOTS]; /* GEMM: flops/byte; memory: bytes */
    double eff[COST_MAX_KNOTS]; /* fraction of peak */
} cost_table;

/* Element-wise kernel kinds with their own table (names as the
 * microbenchmark and the calibration CSV's kernel column write them). */
typedef enum {
    COST_MEM_COPY = 0,  /* "copy": embedding lookup/gradient, dropout */
    COST_MEM_LAYERNORM, /* "layernorm": ln1, ln2, final.ln (+ .bwd) */
    COST_MEM_SOFTMAX,   /* "softmax": attn.softmax, ce (+ .bwd) */
    COST_MEM_GELU,      /* "gelu": gelu, swiglu (+ .bwd) */
    COST_MEM_RESIDUAL,  /* "bias_residual": *.dropadd (+ .bwd) */
    COST_MEM_ADAM,      /* "adam": the optimizer step */
    COST_MEM_KINDS
} cost_mem_kind;

/* A thread-block tile of a tensor-core GEMM kernel: output tm x tn, tk of
 * the inner dimension per main-loop step. */
typedef struct {
    int tm, tn, tk;
} cost_tile;

#define COST_MAX_TILES 4

/* The tile model of a GEMM (see the top of this file). sms = 0: off (the
 * gemm table is used, as a calibration's measured curve). */
typedef struct {
    int sms;    /* streaming multiprocessors (datasheet) */
    int ntiles; /* 1..COST_MAX_TILES */
    cost_tile tile[COST_MAX_TILES];
    double peak_frac;            /* fraction of the SM's peak in the K loop, (0, 1] */
    double kloop_overhead_steps; /* prologue + epilogue of a tile, in K steps, >= 0 */
} cost_gemm_tiles;

typedef struct {
    char gpu[CONFIG_NAME_BYTES]; /* GPU kind the tables are for */
    double peak_tflops;          /* dense peak at the run's precision, TFLOP/s */
    double hbm_gbps;             /* memory bandwidth, GB/s */
    int dtype_bytes;             /* 2 or 4 */
    double launch_ns;            /* per-kernel launch overhead */
    double overlap_slowdown;     /* sigma >= 0: a compute op runs at rate 1/(1+sigma)
                                     while a collective runs on the same GPU (NCCL
                                     kernels take SMs and HBM bandwidth) */
    cost_gemm_tiles tiles;       /* GEMM tile model; sms 0: use the gemm table */
    /* FP8 GEMMs (layer_op.fp8): the GPU's dense FP8 peak (0: none) and their
     * own tile model (8-bit tiles: tk twice the 16-bit one for the same bytes
     * per step). Operands A and B are 1 byte, C 16-bit. fp8_tiles.sms 0 (a
     * calibration's model): the gemm table at the FP8 peak. */
    double fp8_peak_tflops;
    cost_gemm_tiles fp8_tiles;
    /* fp32 GEMMs of a 16-bit run (layer_op.fp32, cost_gemm_fp32_ns): the
     * GPU's TF32 peak (its FP32 peak where the catalog has no TF32); 0 (a
     * calibration's model): only the operands' doubled bytes count. */
    double fp32_peak_tflops;
    cost_table gemm; /* key: arithmetic intensity, flops/byte */
    cost_table mem;  /* key: bytes read + written */
    /* Optional per-kernel memory tables (n = 0: absent, the op uses mem).
     * Element-wise kernels differ a lot on a CPU (GELU's erf costs ~50x a
     * copy per byte), so a calibration that measured each kind fills these;
     * the GPU defaults leave them empty. Same key and peak (hbm_gbps) as mem. */
    cost_table mem_kind[COST_MEM_KINDS]; /* indexed by cost_mem_kind */
} cost_params;

/* Kind of a kernel name ("gelu", "layernorm", ...): -1 if none. */
int cost_mem_kind_from_name(const char *kernel);
const char *cost_mem_kind_name(cost_mem_kind k);
/* Kind of a layer.h MEM op by its name ("ln1.bwd" -> LAYERNORM): -1 if
 * none (the generic table). */
int cost_mem_kind_of_op(const char *op_name);

/* Default params for gpu (peaks from gpu_spec, i.e. the datasheet) at
 * precision prec. Tables exist for "A100*", "H100*", "H200*", "B200*",
 * "GB200*"; another kind gives TS_EINVAL naming those and suggesting
 * --calibration. The SM count is gpu->sms, or the architecture's (cost.c)
 * when that is 0. */
int cost_params_default(const gpu_spec *gpu, config_precision prec, cost_params *out, ts_err *err);

/* Check a table (n, increasing keys, efficiencies in (0,1]); what names the
 * table in the message. */
int cost_table_check(const cost_table *t, const char *what, ts_err *err);

typedef struct cost_model cost_model;

/* Build the interpolants. TS_EINVAL for bad params, TS_ENOMEM. */
int cost_model_new(const cost_params *p, cost_model **out, ts_err *err);
void cost_model_free(cost_model *cm); /* NULL allowed */

/* The params the model was built from (borrowed). */
const cost_params *cost_model_params(const cost_model *cm);

/* Arithmetic intensity of one GEMM, flops/byte (batch does not change it). */
double cost_gemm_intensity(int64_t m, int64_t n, int64_t k, int dtype_bytes);

/* Efficiencies (fraction of peak). cost_gemm_eff: flops / (busy time x
 * peak) of one GEMM (batch 1), from the tile model when it is on, else the
 * gemm table at the GEMM's intensity. cost_gemm_eff_batch: the same for a
 * batch of GEMMs (the tile model packs the batch's tiles into waves). */
double cost_gemm_eff_batch(const cost_model *cm, int64_t m, int64_t n, int64_t k, int64_t batch);
double cost_gemm_eff(const cost_model *cm, int64_t m, int64_t n, int64_t k);
double cost_mem_eff(const cost_model *cm, int64_t bytes);

/* An FP8 GEMM's time (ns, with launch) by the FP8 tile model; its
 * efficiency (flops / (busy time x FP8 peak)). TS-free: a model without an
 * FP8 peak costs it as cost_gemm_ns (callers refuse FP8 there, config.c). */
int64_t cost_gemm_fp8_ns(const cost_model *cm, int64_t m, int64_t n, int64_t k, int64_t batch);
/* An fp32 GEMM in a 16-bit run: launch + the 16-bit GEMM's busy time
 * (cost_gemm_ns - launch) x max(4 / dtype_bytes, peak_tflops /
 * fp32_peak_tflops): the operands' bytes double and the tensor cores run
 * TF32 (NGC's PyTorch containers, where Megatron-LM runs, set
 * TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, so fp32 matmuls use TF32; A100/H100:
 * half the BF16 peak). A run already in fp32 (dtype_bytes 4): cost_gemm_ns. */
int64_t cost_gemm_fp32_ns(const cost_model *cm, int64_t m, int64_t n, int64_t k, int64_t batch);
double cost_gemm_fp8_eff(const cost_model *cm, int64_t m, int64_t n, int64_t k, int64_t batch);

/* Times in ns (>= launch_ns; rounded to nearest). Dims/bytes >= 0. */
int64_t cost_gemm_ns(const cost_model *cm, int64_t m, int64_t n, int64_t k, int64_t batch);
int64_t cost_mem_ns(const cost_model *cm, int64_t bytes);
/* cost_gemm_ns without the tile model's memory floor (for a caller that
 * takes the max with its own memory time); the table model: the same. */
int64_t cost_gemm_compute_ns(const cost_model *cm, int64_t m, int64_t n, int64_t k, int64_t batch);
/* Like cost_mem_ns with the table of kind when the params have one
 * (kind < 0 or an empty table: the generic one). */
int64_t cost_mem_kind_ns(const cost_model *cm, int kind, int64_t bytes);

/* Time of a compute op of layer.h (GEMM: cost_gemm_fp8_ns when op->fp8,
 * else cost_gemm_ns; MEM: cost_mem_kind_ns with cost_mem_kind_of_op(name));
 * 0 for a COMM op, whose time is commcost_ns(). */
int64_t cost_op_ns(const cost_model *cm, const layer_op *op);

/* Duration of a compute op of isolated duration compute_ns that starts
 * together with a collective of comm_ns (layer_op.overlap), running at rate
 * 1/(1+sigma) while the collective runs (sigma = params.overlap_slowdown):
 * compute_ns*(1+sigma) if the collective outlasts it, else
 * compute_ns + comm_ns*sigma/(1+sigma). */
int64_t cost_overlap_ns(const cost_model *cm, int64_t compute_ns, int64_t comm_ns);

/* Run an op list alone on one rank: compute ops in order on the compute
 * stream, COMM ops in order on the communication stream, each op starting
 * when its stream is free and its deps (layer.h) have finished. COMM ops are
 * costed with commcost_ns over group with ranks = op->group (ranks_per_node
 * clipped to a divisor of it). Returns the makespan in ns; fills out (may be
 * NULL). Compute ops overlapping an earlier-listed collective are slowed
 * by params.overlap_slowdown. A reference for the engine's per-layer times and for the per-layer
 * accuracy checks; the engine itself runs ops across ranks and passes. */
typedef struct {
    int64_t makespan_ns;
    int64_t compute_ns;      /* sum of compute-op times */
    int64_t comm_ns;         /* sum of collective times */
    int64_t exposed_comm_ns; /* makespan - compute_ns (>= 0) */
} cost_ops_times;

int64_t cost_ops_run_ns(const cost_model *cm, const commcost_params *cp, const commcost_group *group,
                        const layer_ops *ops, cost_ops_times *out);

#endif
