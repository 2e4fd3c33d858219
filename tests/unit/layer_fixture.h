/* layer_fixture — the layer shapes the cost-model tests share. Header-only:
 * each Criterion test is its own program. */
#ifndef TRAINSIM_TESTS_LAYER_FIXTURE_H
#define TRAINSIM_TESTS_LAYER_FIXTURE_H

#include <string.h>

#include "sim/model/layer.h"

/* Mixtral 8x7B's layer (Llama-3-8B's attention and dense FFN: h 4096, 32
 * heads in 8 query groups, SwiGLU FFN 14336), one micro-batch of 4096
 * tokens, vocabulary 32000, t 1, 16-bit; every other field 0 (the default
 * attention backend, dropout on, no FP8): the caller sets what it varies. */
static inline layer_shape layer_fixture_mixtral(void)
{
    layer_shape L;
    memset(&L, 0, sizeof L);
    L.h = 4096;
    L.a = 32;
    L.g = 8;
    L.ffn = 14336;
    L.swiglu = true;
    L.s = 4096;
    L.b = 1;
    L.V = 32000;
    L.t = 1;
    L.dtype_bytes = 2;
    return L;
}

#endif
