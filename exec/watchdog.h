/* watchdog — turns a rank that waits forever on a stuck peer into an error.
 *
 * The executor's blocking communication (pipeline waits, collectives,
 * trainexec's own barriers) is bracketed with wd_wait_begin / wd_wait_end,
 * and the runtime names the action it runs (wd_action). A helper thread
 * checks every 50 ms: while the rank is inside a wait that has lasted more
 * than the timeout, it prints "rank R: no progress for T s waiting in OP
 * (ACTION)" on standard error and calls MPI_Abort, so mpirun ends the whole
 * job. Time spent computing never counts: only the length of the current
 * wait does, so a legitimately long GEMM cannot fire it; a peer's long
 * compute can, which is why the timeout is a multiple of the iteration time
 * (trainexec --timeout).
 *
 * One watchdog per process (module state); the strings passed must be
 * static (they are read by the helper thread).
 */
#ifndef TRAINSIM_EXEC_WATCHDOG_H
#define TRAINSIM_EXEC_WATCHDOG_H

/* Start the helper thread for MPI_COMM_WORLD rank `rank` with a timeout of
 * timeout_s seconds (0 = never fires until wd_set_timeout gives one).
 * Returns 0, or -1 if the thread could not be created (no watchdog). */
int wd_start(int rank, double timeout_s);

/* Change the timeout (seconds; 0 = off). */
void wd_set_timeout(double timeout_s);

/* The schedule action being run, e.g. "F", and its iteration and
 * micro-batch (-1 where none): named in the timeout message. */
void wd_action(const char *action, int iter, int mb);

/* Enter / leave a blocking wait named `op` (a static string, e.g.
 * "pipeline receive/send wait"). Waits do not nest. */
void wd_wait_begin(const char *op);
void wd_wait_end(void);

/* Stop and join the helper thread (no-op if not started). */
void wd_stop(void);

#endif
