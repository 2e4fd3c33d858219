/* backend_cuda — the executor's backend (exec/core/backend.h) on one NVIDIA GPU.
 *
 * Tensors are fp32 in GPU memory (the backend interface is float*): the
 * parameters are the fp32 master weights. GEMMs run through cuBLASLt with
 * bf16 tensor-core math and fp32 accumulation (cugemm.h, CUGEMM_F32), plans
 * cached per shape; the other ops are the fp32 instantiations of kernels/
 * (cuk.h), with exactly the semantics of exec/cpu/kern.h. Attention is
 * Megatron's 2021 path: two strided-batched GEMMs around the scaled causal
 * softmax (the T x T probabilities are saved, as kern_attention_fwd does);
 * grouped-query attention is the same path with each key/value head copied
 * per query head of its group. The Llama kernels (RMSNorm, SwiGLU, RoPE) are
 * kernels/llama.cu's, the flash-style attention kernels/flash.cu's
 * (cp_attn.h's recurrence, one launch per ring step). With a context-
 * parallel ring of more than one rank, each hop is staged through host
 * memory: the ring's sendrecv gets HOST pointers (cp_mpi's and comm_nccl's
 * MPI_Sendrecv), after a stream synchronisation. The MoE routing and
 * dispatch ops are kernels/moe.cu's (backend_cuda_moe.c); capacity and
 * send order sort the assignments in the backend's grow-only scratch (2 N k
 * ints). These Llama, flash and MoE paths compile but have not
 * yet run on a GPU (docs/cuda.md, Limitations).
 *
 * Everything is enqueued on one compute stream; sync() waits for it. The
 * table's functions return nothing, so the first CUDA or cuBLAS failure is
 * kept ("sticky") and reported by backend_cuda_status(); later ops still
 * run, the results are then meaningless. alloc() returns NULL on failure.
 *
 * Per-op timing: backend_cuda_prof() has the gpt_prof_fn signature (pass the
 * backend as user data to gpt_stage_set_prof); it records a CUDA event at
 * each op's begin and end on the compute stream, so timing adds no host
 * synchronisation. backend_cuda_prof_collect() waits for the stream and
 * reports each op's GPU start (relative to the first event) and duration.
 *
 * Ownership: created by backend_cuda_create, released by be->destroy(be),
 * which frees the plans, streams, events and scratch (not the tensors).
 */
#ifndef TRAINSIM_BACKEND_CUDA_H
#define TRAINSIM_BACKEND_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "exec/core/backend.h"
#include "sim/util/err.h"

#define BACKEND_CUDA_MAX_PROF   65536 /* op events kept between collects */
#define BACKEND_CUDA_PROF_DEPTH 32    /* ops open at once (nested) */

/* Select `device` (cudaSetDevice) and build the backend. TS_ENOTSUP when no
 * CUDA device answers (message says so), TS_EINVAL for a device index out of
 * range. autotune: see cugemm.h. */
int backend_cuda_create(int device, bool autotune, backend **out, ts_err *err);

/* TS_OK, or the first failure since creation (copied into err). */
int backend_cuda_status(backend *be, ts_err *err);

/* The compute stream (for the NCCL comm's stream dependencies). */
cudaStream_t backend_cuda_stream(backend *be);

/* gpt_prof_fn: ud is the backend. Begin/end pairs may nest (up to
 * BACKEND_CUDA_PROF_DEPTH); ops past BACKEND_CUDA_MAX_PROF are dropped
 * (counted in the collect's *dropped). The first begin synchronises the
 * stream once to anchor the clock (start_mono_ns). */
void backend_cuda_prof(void *ud, const char *op, int layer, bool end);

/* One timed op. `op` points at the string given to backend_cuda_prof (the
 * model's static op names). */
typedef struct {
    const char *op;
    int layer;
    int64_t start_ns; /* since the first recorded event */
    int64_t dur_ns;
    int64_t start_mono_ns; /* the GPU start on the host's CLOCK_MONOTONIC (the
                            * first event is recorded on an idle stream right
                            * after reading the clock: within a launch latency,
                            * a few us), to merge with host-timed spans such as
                            * the executor's rt_span */
} backend_cuda_op;

/* Wait for the stream, then call fn for each op completed since the last
 * collect, in issue order, and forget them. *dropped gets the ops not
 * recorded for lack of room (may be NULL). TS_ESTATE on a CUDA error. */
int backend_cuda_prof_collect(backend *be, void (*fn)(void *ud, const backend_cuda_op *op), void *ud, size_t *dropped,
                              ts_err *err);

#endif
