/* cp_split — chunk assignment and block masks of causal ring attention. */
#include "exec/core/cp_split.h"

int cp_split_check(int seq, int cp, ts_err *err)
{
    if (cp < 1)
        return err_set(err, TS_EINVAL, "--context-parallel-size %d: must be >= 1", cp);
    if (seq < 1 || seq % (2 * cp))
        return err_set(err, TS_EINVAL,
                       "--seq-length %d: must be divisible by 2 * --context-parallel-size = %d (the causal split "
                       "cuts the sequence into 2*cp chunks)",
                       seq, 2 * cp);
    return TS_OK;
}

int cp_chunk(int cp, int r, int h)
{
    return h == 0 ? r : 2 * cp - 1 - r;
}

int cp_global_pos(int seq, int cp, int r, int i)
{
    int cs = seq / (2 * cp);
    return cp_chunk(cp, r, i / cs) * cs + i % cs;
}

cp_mask cp_block(int qc, int kc)
{
    if (kc > qc)
        return CP_SKIP;
    return kc == qc ? CP_CAUSAL : CP_FULL;
}

int cp_ring_src(int cp, int r, int i)
{
    return ((r - i) % cp + cp) % cp;
}

double cp_step_work(int cp, int r, int i)
{
    int src = cp_ring_src(cp, r, i);
    double w = 0.0;
    for (int qh = 0; qh < 2; qh++)
        for (int kh = 0; kh < 2; kh++) {
            cp_mask m = cp_block(cp_chunk(cp, r, qh), cp_chunk(cp, src, kh));
            w += m == CP_FULL ? 1.0 : m == CP_CAUSAL ? 0.5 : 0.0;
        }
    return w;
}
