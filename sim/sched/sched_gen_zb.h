/* sched_gen_zb — the zero-bubble generators behind sched_generate(): ZB-H1,
 * ZB-H2 and ZB-V from Qi et al., ICLR 2024, which split each backward into
 * its input-gradient (I) and weight-gradient (W) parts. Like sched_gen.h's
 * generators, each fills lists[0 .. p-1] with the F/I/W actions of every
 * rank, in execution order, for options already checked by
 * sched_generate(). Internal to sched.
 */
#ifndef TRAINSIM_SCHED_GEN_ZB_H
#define TRAINSIM_SCHED_GEN_ZB_H

#include "sim/sched/sched_build.h"
#include "sim/util/err.h"

int sched_gen_zb_h1(const sched_opts *o, sched_list *lists, ts_err *err);
int sched_gen_zb_h2(const sched_opts *o, sched_list *lists, ts_err *err);
int sched_gen_zb_v(const sched_opts *o, sched_list *lists, ts_err *err);

#endif
