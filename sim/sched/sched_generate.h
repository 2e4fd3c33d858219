/* sched_generate — a pipeline schedule from its options: the generator of
 * the schedule kind (sched_gen.h, sched_gen_zb.h) gives each rank's compute
 * order, then the pipeline transfers (sched_comm.h), the gradient
 * reductions and the optimizer steps are inserted. sched.h describes the
 * result.
 */
#ifndef TRAINSIM_SCHED_GENERATE_H
#define TRAINSIM_SCHED_GENERATE_H

#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Generate a schedule. On success *out owns a new sched (free with
 * sched_free). Invalid options give TS_EINVAL with a message naming the
 * option and what would be valid. */
int sched_generate(const sched_opts *o, sched **out, ts_err *err);

#endif
