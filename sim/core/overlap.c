/* overlap — closed forms of overlapped communication (see overlap.h). */
#include "sim/core/overlap.h"

#include <string.h>

int64_t overlap_chunked_exposed_ns(int64_t comm_ns, int64_t gemm_ns, int n)
{
    if (comm_ns <= 0)
        return 0;
    if (n < 1)
        n = 1;
    int64_t extra = comm_ns > gemm_ns ? comm_ns - gemm_ns : 0;
    /* comm_ns and gemm_ns are task times (< 2^62 / n in practice); n <= 65536 */
    return (comm_ns + (int64_t)(n - 1) * extra + n - 1) / n;
}

int64_t overlap_sm_slowed_ns(int64_t gemm_ns, int sms, int comm_sms)
{
    if (sms <= 0 || comm_sms <= 0 || comm_sms >= sms || gemm_ns <= 0)
        return gemm_ns;
    double slowed = (double)gemm_ns * (double)sms / (double)(sms - comm_sms);
    return (int64_t)(slowed + 0.5);
}

int64_t overlap_shared_phase_ns(int64_t comm_ns, int64_t comp_ns, int sms, int comm_sms)
{
    if (comm_ns < 0)
        comm_ns = 0;
    if (comp_ns < 0)
        comp_ns = 0;
    int64_t slowed = overlap_sm_slowed_ns(comp_ns, sms, comm_sms);
    if (comm_ns >= slowed)
        return comm_ns;
    if (slowed == comp_ns) /* no SM share */
        return comp_ns;
    double t = (double)comp_ns + (double)comm_ns * (double)comm_sms / (double)sms;
    return (int64_t)(t + 0.5);
}

int64_t overlap_beside_chain_ns(int64_t comp_ns, int64_t *comm_left_ns, int sms, int comm_sms)
{
    int64_t left = *comm_left_ns > 0 ? *comm_left_ns : 0;
    int64_t slowed = overlap_sm_slowed_ns(comp_ns, sms, comm_sms);
    int64_t t = left >= slowed ? slowed : (left > 0 ? overlap_shared_phase_ns(left, comp_ns, sms, comm_sms) : comp_ns);
    *comm_left_ns = left > t ? left - t : 0;
    return t;
}

int overlap_gpu_sms(const char *gpu_name)
{
    if (!gpu_name)
        return 0;
    if (!strncmp(gpu_name, "A100", 4))
        return 108;
    if (!strncmp(gpu_name, "H100-SXM", 8) || !strncmp(gpu_name, "H200", 4))
        return 132;
    return 0;
}
