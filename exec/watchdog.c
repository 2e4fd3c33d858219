/* watchdog — see watchdog.h. The main thread only stores into atomics; the
 * helper thread reads them, so no lock is taken on the hot path. */
#include "exec/watchdog.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* How often the helper thread looks, ns: fine against timeouts of seconds. */
#define WD_POLL_NS 50000000L

static struct {
    pthread_t thread;
    int started, rank;
    _Atomic int stop;
    _Atomic int64_t timeout_ns;   /* 0 = off */
    _Atomic int64_t wait_t0_ns;   /* start of the current wait; 0 = not waiting */
    _Atomic(const char *) op;     /* the current wait */
    _Atomic(const char *) action; /* the current schedule action */
    _Atomic int iter, mb;
} wd;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The helper thread: abort the job when the current wait outlives the
 * timeout. MPI_Abort from this thread is the only MPI call it makes. */
static void *wd_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&wd.stop)) {
        struct timespec ts = {0, WD_POLL_NS};
        nanosleep(&ts, NULL);
        int64_t t0 = atomic_load(&wd.wait_t0_ns), lim = atomic_load(&wd.timeout_ns);
        if (t0 == 0 || lim <= 0 || mono_ns() - t0 < lim)
            continue;
        const char *op = atomic_load(&wd.op), *act = atomic_load(&wd.action);
        int it = atomic_load(&wd.iter), mb = atomic_load(&wd.mb);
        fprintf(stderr,
                "trainexec: rank %d: no progress for %.1f s waiting in %s (action %s, iteration %d, "
                "micro-batch %d): a peer rank is stuck or dead (--timeout %.1f s); aborting the job\n",
                wd.rank, (double)(mono_ns() - t0) / 1e9, op ? op : "?", act ? act : "none", it, mb, (double)lim / 1e9);
        (void)fflush(stderr); /* before the abort */
        MPI_Abort(MPI_COMM_WORLD, 1);
        break;
    }
    return NULL;
}

int wd_start(int rank, double timeout_s)
{
    wd.rank = rank;
    atomic_store(&wd.stop, 0);
    atomic_store(&wd.action, "setup");
    atomic_store(&wd.iter, -1);
    atomic_store(&wd.mb, -1);
    wd_set_timeout(timeout_s);
    if (pthread_create(&wd.thread, NULL, wd_main, NULL) != 0)
        return -1;
    wd.started = 1;
    return 0;
}

void wd_set_timeout(double timeout_s)
{
    atomic_store(&wd.timeout_ns, timeout_s > 0 ? (int64_t)(timeout_s * 1e9) : 0);
}

void wd_action(const char *action, int iter, int mb)
{
    atomic_store(&wd.action, action);
    atomic_store(&wd.iter, iter);
    atomic_store(&wd.mb, mb);
}

void wd_wait_begin(const char *op)
{
    atomic_store(&wd.op, op);
    atomic_store(&wd.wait_t0_ns, mono_ns());
}

void wd_wait_end(void)
{
    atomic_store(&wd.wait_t0_ns, 0);
}

void wd_stop(void)
{
    if (!wd.started)
        return;
    atomic_store(&wd.stop, 1);
    pthread_join(wd.thread, NULL);
    wd.started = 0;
}
