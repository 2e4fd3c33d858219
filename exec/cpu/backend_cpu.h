/* backend_cpu — the executor's CPU backend (backend.h's table): host
 * memory, CBLAS (OpenBLAS) GEMMs and the kern.h loops, in fp32.
 */
#ifndef TRAINSIM_BACKEND_CPU_H
#define TRAINSIM_BACKEND_CPU_H

#include "exec/core/backend.h"
#include "sim/util/err.h"

/* CPU backend: CBLAS GEMMs (OpenBLAS with `threads` threads; 0 keeps
 * OpenBLAS's default) and the kern_* loops. On success *out is a new backend
 * the caller releases with (*out)->destroy(*out). */
int backend_cpu_create(int threads, backend **out, ts_err *err);

#endif
