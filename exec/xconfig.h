/* xconfig — what trainexec runs of a resolved trainsim configuration: the
 * flags it implements (the others refused with a message naming the flag),
 * the model it builds from them (gpt_dims) and how the run's header and
 * configuration hash describe that model. No allocation; pure functions of
 * their arguments. */
#ifndef TRAINSIM_EXEC_XCONFIG_H
#define TRAINSIM_EXEC_XCONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "exec/core/gpt.h"
#include "sim/config/config.h"
#include "sim/util/err.h"

/* TS_OK if the executor runs config c (a validated one), for training or
 * (inference) the KV-cache decode; TS_ENOTSUP naming the flag otherwise.
 * The answer is the same for both backends: what one backend lacks (a
 * NULL op in its table) is refused where the model is built
 * (gpt_stage_create, moe_layer_create). */
int xconfig_supports(const config *c, bool inference, ts_err *err);
/* The executor's model for the resolved model, layout and MoE flags
 * (micro-batch as the batch; e NULL or without experts: dense; flash or
 * fused attention, as config_resolve picked it, run as flash, unfused and
 * local as unfused). */
gpt_dims xconfig_dims(const model_config *mc, const parallel_config *pc, const moe_config *e);
/* The architecture options of d as text: "" for the GPT layers with the
 * tied output layer, " [untied]", or " [groups=G RMSNorm SwiGLU no-bias rope
 * untied]" with the parts in use. */
void xconfig_arch_text(const gpt_dims *d, char *buf, size_t size);
/* The recomputation, optimizer and attention of d as text: ", recompute
 * full uniform 2" (--recompute-num-layers as given), ", recompute selective
 * core_attn", ", distributed optimizer" where used, then ", flash
 * attention" or ", unfused attention". */
void xconfig_mode_text(const gpt_dims *d, char *buf, size_t size);

#endif
