/* backend_cuda_impl — what backend_cuda.c shares with the files that fill
 * the rest of its table (backend_cuda_moe.c). Not a contract: include only
 * from those files. */
#ifndef TRAINSIM_BACKEND_CUDA_IMPL_H
#define TRAINSIM_BACKEND_CUDA_IMPL_H

#include <cuda_runtime_api.h>

#include "exec/cuda/backend_cuda.h"

/* Keep st as the backend's failure if it is the first (backend_cuda_status
 * reports it); `what` names the op. */
void backend_cuda_note(backend *be, cudaError_t st, const char *what);

/* The backend's grow-only device scratch of at least `bytes`, valid until
 * the next call (a larger one frees it after the stream drains); NULL when
 * the allocation failed (kept as the backend's failure). Owned by the
 * backend. */
void *backend_cuda_scratch(backend *be, size_t bytes);

/* Fill the MoE routing and dispatch entries of be's table (backend.h's
 * moe_* ops, kernels/moe.cu on the compute stream). */
void backend_cuda_moe_fill(backend *be);

#endif
