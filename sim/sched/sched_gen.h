/* sched_gen — the compute-only generators behind sched_generate(). Each fills
 * lists[0 .. p-1] with the F/B/I/W actions of every rank, in execution order,
 * for options already checked by sched_generate(). Internal to sched.
 */
#ifndef TRAINSIM_SCHED_GEN_H
#define TRAINSIM_SCHED_GEN_H

#include "sim/sched/sched_build.h"

/* GPipe (Huang et al. 2019), as torch's ScheduleGPipe: all m forwards, then
 * all m backwards in micro-batch order. */
int sched_gen_gpipe(const sched_opts *o, sched_list *lists, ts_err *err);
/* 1F1B / PipeDream-Flush (Narayanan et al. 2021): min(p-r-1, m) warm-up
 * forwards on rank r, then one forward one backward, then the cool-down. */
int sched_gen_1f1b(const sched_opts *o, sched_list *lists, ts_err *err);
/* Interleaved 1F1B as Megatron-core runs it (schedules.py:
 * get_schedule_table, get_pp_rank_microbatches). */
int sched_gen_interleaved(const sched_opts *o, sched_list *lists, ts_err *err);

#endif
