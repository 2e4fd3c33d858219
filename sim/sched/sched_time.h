/* sched_time — schedule-only timing: run a schedule with fixed per-stage op
 * times and a fixed point-to-point latency, no model, no network.
 *
 * Model. Ranks run their actions in order. F takes T_F, I takes T_B (the
 * input-gradient part, Qi et al.'s B), W takes T_W, a whole B takes
 * T_B + T_W; with v chunks per rank each op of a chunk takes 1/v of these
 * (the times are per stage of the non-interleaved pipeline). REDUCE_GRAD
 * and OPTIM take no time here. SEND and RECV take no rank time: they post
 * the transfer (isend/irecv, the receive posted ahead as torch does); the
 * data arrives comm_ns after its SEND was posted, and the op consuming it
 * starts once it has arrived (and, in program order, after the RECV). A
 * compute-only schedule waits for the remote producer's end + comm_ns.
 *
 * Overlapped pairs (DualPipe's F&B, an F marked `overlap` and the next
 * compute action of its rank): both start together once both inputs have
 * arrived, and both end after max(compute of the two, exposed
 * communication of the two) (DeepSeek-V3 report, section 3.2.1: one
 * micro-batch's computation hides the other's all-to-all and PP
 * communication). Sends between the two are posted at the pair's end.
 * With sched_time_ep() each unpaired F / B / I op also carries its own
 * exposed communication (expert-parallel all-to-all) after its compute;
 * sched_time() has none, so a pair then takes T_F + T_B + T_W.
 *
 * DualPipe (SCHED_PLACE_DUAL): each chunk is a whole stage of its model
 * copy's p-stage split, so its ops take T_F, T_B, T_W in full; "ideal" is
 * then 2m(T_F+T_B+T_W) with m the micro-batches of one copy.
 *
 * Time is integer: 1 tick = 1/v ns (tick_den = v), so that a chunk's share
 * of an op is exact; same inputs, same numbers.
 *
 * Outputs follow Qi et al. (ICLR 2024): a rank's span runs from the start
 * of its first op to the end of its last; "cost" is the largest span, and
 * bubble rate = (cost - m(T_F+T_B+T_W)) / cost. With uniform times this
 * gives the closed forms of ../shared/reference/formulas.md exactly.
 */
#ifndef TRAINSIM_SCHED_TIME_H
#define TRAINSIM_SCHED_TIME_H

#include <stdint.h>

#include "sim/sched/sched.h"

typedef struct {
    int64_t f_ns;    /* forward of one stage (of a rank's layers when v = 1) */
    int64_t b_ns;    /* backward, input-gradient part (T_B) */
    int64_t w_ns;    /* backward, weight-gradient part (T_W) */
    int64_t comm_ns; /* latency of one point-to-point transfer */
} sched_op_times;

typedef struct {
    int p;
    int64_t tick_den;   /* ticks per ns (= v) */
    int64_t makespan;   /* ticks: earliest op start to latest op end */
    int64_t cost;       /* ticks: the largest per-rank span (Qi et al.) */
    int64_t ideal;      /* ticks: m*(T_F+T_B+T_W), one rank's work */
    double bubble_rate; /* (cost - ideal) / cost; 0 when cost = 0 */
    int64_t *busy;      /* p, ticks of compute */
    int64_t *idle;      /* p, ticks: makespan - busy */
    int64_t *first;     /* p, ticks: start of the rank's first compute op */
    int64_t *last;      /* p, ticks: end of the rank's last compute op */
    int *peak_inflight; /* p, chunk activations (sched_peak_inflight) */
    int64_t **start;    /* p arrays of n_actions[r]: action start, ticks
                             (a SEND/RECV: when it was posted) */
    int64_t **end;      /* same: action end */
} sched_timing;

/* Time s with t. On success out owns its arrays (sched_timing_free).
 * TS_EINVAL if a time is negative, or if s cannot run (validate it first:
 * the message then names a blocked action). */
int sched_time(const sched *s, const sched_op_times *t, sched_timing *out, ts_err *err);

/* Exposed communication of one chunk op, in ns of the non-interleaved stage
 * (scaled by 1/v like the op times): the expert-parallel all-to-all of a
 * forward (dispatch + combine) and of a backward's input-gradient part.
 * W has none. */
typedef struct {
    int64_t a2a_f_ns;
    int64_t a2a_b_ns;
} sched_ep_times;

/* As sched_time(), with ep's communication after every unpaired F, B and I
 * and hidden in overlapped pairs as described above. ep NULL = none. */
int sched_time_ep(const sched *s, const sched_op_times *t, const sched_ep_times *ep, sched_timing *out, ts_err *err);

/* Free out's arrays and zero it. NULL allowed. */
void sched_timing_free(sched_timing *out);

/* Ticks to milliseconds. */
double sched_ticks_ms(const sched_timing *tm, int64_t ticks);

#endif
