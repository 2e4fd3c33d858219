/* sched_gen_dual — DeepSeek's DualPipeV and DualPipe generators behind
 * sched_generate():
 * the "cut-in-half" DualPipe of the DeepSeek-V3 report (arXiv 2412.19437,
 * section 3.2.1) as the deepseek-ai/DualPipe repository's dualpipev.py
 * orders it. Like sched_gen.h's generators it fills lists[0 .. p-1] with
 * the compute actions of every rank, in execution order, for options
 * already checked by sched_generate() (v = 2, m >= 2p). Internal to sched.
 */
#ifndef TRAINSIM_SCHED_GEN_DUAL_H
#define TRAINSIM_SCHED_GEN_DUAL_H

#include "sim/sched/sched_build.h"
#include "sim/util/err.h"

int sched_gen_dualpipev(const sched_opts *o, sched_list *lists, ts_err *err);
/* DualPipe (dualpipe.py): p even, m even >= 2p given as the total; fills the
 * lists with micro-batch numbers 0 .. m/2-1 of each copy (sched.h's
 * SCHED_PLACE_DUAL: m counts one copy's micro-batches). */
int sched_gen_dualpipe(const sched_opts *o, sched_list *lists, ts_err *err);

#endif
