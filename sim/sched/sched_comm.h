/* sched_comm — the explicit pipeline transfers of a schedule: SEND/RECV
 * actions inserted into a compute-only schedule in an order blocking
 * rendezvous execution cannot deadlock on.
 */
#ifndef TRAINSIM_SCHED_COMM_H
#define TRAINSIM_SCHED_COMM_H

#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Insert SEND/RECV actions into a compute-only schedule (no-op, TS_OK, when
 * s already has some), as torch's _add_send_recv does: each SEND right after
 * the op that produces its data, the RECV placed on the receiver at the same
 * step of one global order (before the op that consumes it), so that
 * blocking rendezvous execution cannot deadlock. TS_EINVAL if the compute
 * order itself cannot run (a dependency cycle), naming a blocked action. */
int sched_add_comm(sched *s, ts_err *err);

#endif
