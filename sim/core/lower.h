/* lower — turns a schedule's actions into engine tasks, rank by rank.
 *
 * For each pipeline rank r and each action of sched->actions[r], in order:
 *   F/B/I/W (mb, chunk)  the steps of the chunk's stage pass (plan.h), one task
 *                        each on its stream; the pass's first step per stream
 *                        waits for the receive of its input (RECV_F for F,
 *                        RECV_B for B and I, except on the last stage), or,
 *                        when the neighbour stage is on the same rank (ZB-V's
 *                        V placement), for that stage's pass directly; with
 *                        FSDP's sharded parameters F, B and I first run their
 *                        exposed parameter gather (plan_stage.fsdp_gather) on
 *                        the DP stream after the rank's previous compute;
 *   SEND_F/SEND_B        one transfer task on the pipeline-send stream after
 *                        the pass that produced the data;
 *   RECV_F/RECV_B        a task on the pipeline-receive stream joined to the
 *                        matching send (engine_task_join): it ends when the
 *                        transfer ends;
 *   REDUCE_GRAD (chunk)  the data-parallel reduction of the chunk's gradients
 *                        after its last backward; with --overlap-grad-reduce
 *                        its buckets were already issued during that backward,
 *                        each as soon as the bucket's weight gradients exist;
 *   OPTIM                the optimizer step once every reduction of the rank
 *                        is done, then (distributed optimizer) the parameter
 *                        all-gather.
 * --overlap-moe-expert-parallel-comm (ep_pair.h, plan.ep_pair_combined):
 * an F and a B or I the schedule pairs (ep_pair_mark) are lowered together
 * at the first one, as Megatron-core's combined step: the receives between
 * them first, then the two passes, whose first steps wait for both passes'
 * inputs; both outputs leave at the pair's end (the sends wait for its last
 * task). The default mode runs the pair's variants of their steps
 * (plan.ep_pairs, when it has some) in action order; the flow modes
 * (plan.ep_pair_steps) the two passes' steps interleaved in ep_pair_run's
 * order (compute: the backward's span j, the forward's span j, ...;
 * communication stream: the backward's transfer j+1, the forward's): the
 * all-to-alls on PLAN_STREAM_EP, the TP and CP collectives on the TP stream
 * (where a pass's collective follows one on the other stream, it waits
 * for it: the plan ordered them by their one stream).
 * REDUCE_GRAD and OPTIM are added at the end of a rank's actions if the
 * schedule has none. Sends and receives are matched by (direction,
 * micro-batch, receiving stage); an unmatched one, or a pass whose input was
 * not received before it, is TS_EINVAL naming the rank, action index and
 * what is missing.
 *
 * Every task's tag is its plan step index and its mb the micro-batch (-1 for
 * reductions and the optimizer).
 */
#ifndef TRAINSIM_LOWER_H
#define TRAINSIM_LOWER_H

#include "sim/core/engine.h"
#include "sim/core/plan.h"
#include "sim/sched/sched.h"
#include "sim/util/err.h"

/* Add the tasks of schedule s, with the steps of plan pl, to engine e, which
 * must have s->p ranks of PLAN_STREAMS streams and no tasks yet. */
int lower_sched(const plan *pl, const sched *s, engine *e, ts_err *err);

/* The same for one replica of the pipeline inside a larger engine (the
 * network model's --full mode, net_simulate.h): pipeline rank r becomes
 * engine rank engine_rank[r]; e may have any number of ranks (of
 * PLAN_STREAMS streams) and may already hold the tasks of other replicas. */
int lower_sched_ranks(const plan *pl, const sched *s, engine *e, const int *engine_rank, ts_err *err);

#endif
