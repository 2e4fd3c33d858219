#include "exec/core/data.h"

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int token_at(uint64_t seed, uint64_t s, int k, int V)
{
    uint64_t h = mix(seed ^ mix(s + 0x632be59bd9b4e019ULL));
    uint64_t start = h % (uint64_t)V, stride = 1 + (h >> 32) % 7;
    uint64_t noise = mix(h + (uint64_t)k + 1);
    if ((noise & 7) == 0)
        return (int)((noise >> 8) % (uint64_t)V);
    return (int)((start + stride * (uint64_t)k) % (uint64_t)V);
}

void data_microbatch(uint64_t seed, int it, int mb_per_iter, int g, int B, int T, int V, int *tokens, int *targets)
{
    for (int b = 0; b < B; b++) {
        uint64_t s = ((uint64_t)it * (uint64_t)mb_per_iter + (uint64_t)g) * (uint64_t)B + (uint64_t)b;
        for (int k = 0; k < T; k++) {
            tokens[b * T + k] = token_at(seed, s, k, V);
            targets[b * T + k] = token_at(seed, s, k + 1, V);
        }
    }
}
