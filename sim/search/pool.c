#include "sim/search/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sim/util/err.h"

typedef struct {
    size_t n, next;
    int status; /* first non-OK status from done() */
    pool_work_fn work;
    pool_done_fn done;
    void *ctx;
    pthread_mutex_t lock;
} pool_state;

static void *pool_worker(void *arg)
{
    pool_state *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        size_t i = p->next;
        bool stop = p->status != TS_OK || i >= p->n;
        if (!stop)
            p->next++;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            return NULL;
        int ws = p->work(p->ctx, i);
        pthread_mutex_lock(&p->lock);
        int ds = p->done(p->ctx, i, ws);
        if (ds != TS_OK && p->status == TS_OK)
            p->status = ds;
        pthread_mutex_unlock(&p->lock);
    }
}

int pool_run(size_t n, int threads, pool_work_fn work, pool_done_fn done, void *ctx)
{
    if (threads < 1)
        return TS_EINVAL;
    pool_state p = {.n = n, .status = TS_OK, .work = work, .done = done, .ctx = ctx};
    pthread_mutex_init(&p.lock, NULL);
    size_t nt = (size_t)threads < n ? (size_t)threads : (n ? n : 1);
    pthread_t *tids = calloc(nt, sizeof *tids);
    size_t started = 0;
    if (tids)
        for (; started + 1 < nt; started++)
            if (pthread_create(&tids[started], NULL, pool_worker, &p))
                break;
    pool_worker(&p); /* the calling thread works too */
    for (size_t t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    free(tids);
    pthread_mutex_destroy(&p.lock);
    return p.status;
}
