/* xargs — trainexec's own flags: the executor (iterations, seed, Adam,
 * backend, threads), its outputs (--trace, --ops-csv, --report-csv), the
 * watchdog (--timeout, --divergence-factor), --microbench and --inference
 * (exec/infer.h). The model, layout and schedule flags are the simulator's
 * (sim/config/flags.h) and are registered beside these by trainexec.
 */
#ifndef TRAINSIM_EXEC_XARGS_H
#define TRAINSIM_EXEC_XARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/infer.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

enum { XARGS_BACKEND_CPU = 0, XARGS_BACKEND_CUDA };

/* --backend's names, by the enum above; NULL-terminated. */
extern const char *const XARGS_BACKEND_NAMES[];

typedef struct {
    int iterations, warmup, threads, backend; /* backend: XARGS_BACKEND_* */
    int64_t seed;
    double lr, beta1, beta2, eps, wd;
    double timeout_s;         /* watchdog, seconds; < 0: the automatic rule (docs/executor.md) */
    double divergence_factor; /* stop when the loss exceeds this times its first value; 0 = off */
    const char *trace, *ops_csv, *report_csv, *microbench, *schedule_csv, *pid_file; /* borrowed from argv */
    const char *moe_load_out; /* --moe-load-out FILE (sim/config/moe_load.h), borrowed from argv */
    bool op_trace;
    infer_args inf; /* --inference and its flags (exec/infer.h) */
} xargs;

/* Set every field to its documented default. */
void xargs_defaults(xargs *a);

/* Register the flags in t, writing into a (which must outlive t's parse). */
int xargs_add_flags(opt_table *t, xargs *a, ts_err *err);

/* The flag combinations --inference (exec/infer.h) allows with the
 * training flags; TS_EINVAL naming the flag otherwise. */
int xargs_check_inference(const xargs *a, ts_err *err);

/* The backend flags this build and mode can honour; TS_ENOTSUP naming the
 * flag otherwise. */
int xargs_check_backend(const xargs *a, ts_err *err);

#endif
