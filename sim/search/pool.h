/* pool — run n independent work items on a few threads.
 *
 * Items are handed out in index order to up to `threads` threads (the
 * calling thread is one of them; if a thread cannot be started, fewer run).
 * work(ctx, i) runs outside any lock. done(ctx, i, work_status) then runs
 * under the pool's lock, one call at a time, in completion order; it may
 * update shared state (counters, progress, in-order commits) and returns a
 * status: anything but TS_OK stops the dispatch of further items (those
 * already running still finish and get their done call).
 *
 * Returns the first non-TS_OK status a done call returned, else TS_OK.
 * TS_EINVAL if threads < 1. The pool owns nothing after it returns. */
#ifndef TRAINSIM_POOL_H
#define TRAINSIM_POOL_H

#include <stddef.h>

typedef int (*pool_work_fn)(void *ctx, size_t i);
typedef int (*pool_done_fn)(void *ctx, size_t i, int work_status);

int pool_run(size_t n, int threads, pool_work_fn work, pool_done_fn done, void *ctx);

#endif
