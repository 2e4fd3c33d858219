/* fp8 — FP8 weight copies and parameter all-gather bytes (fp8.h). */
#include "sim/model/fp8.h"

int64_t fp8_weight_copy_bytes(const model_config *m, bool fsdp_full, int dt, int64_t layer_params, int64_t gathered)
{
    if (m->fp8_format == FP8_FORMAT_NONE)
        return 0;
    int64_t n = fsdp_full ? gathered : layer_params;
    int64_t copy = m->fp8_recipe == FP8_RECIPE_MXFP8 ? 2 * n + n / 16 : 2 * n;
    if (m->fp8_param_gather && !fsdp_full)
        copy -= n * dt;
    return copy;
}

int64_t fp8_gather_bytes(const model_config *m, int dt, int64_t params, int64_t extra)
{
    if (!m->fp8_param_gather || extra < 0 || extra > params)
        return params * dt;
    return (params - extra) + extra * dt;
}

int64_t fp8_amax_reduce_bytes(const model_config *m, int n_layers, bool backward)
{
    if (m->fp8_format == FP8_FORMAT_NONE || m->fp8_recipe != FP8_RECIPE_DELAYED || n_layers < 1)
        return 0;
    return (int64_t)n_layers * 4 * (backward ? 2 : 3) * 4;
}

int64_t fp8_mxfp8_bytes(int64_t rows, int64_t cols)
{
    return rows * (cols + (cols + 31) / 32);
}

int64_t fp8_mxfp8_quantize_bytes(int64_t rows, int64_t cols, int dt)
{
    return rows * cols * dt + fp8_mxfp8_bytes(rows, cols);
}
