/* config + flags: the default run, presets and overrides in any order,
 * Megatron-LM's derived defaults, and every cross-field error message.
 * Run from the repository root (catalogues in topologies/). */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/flags.h"
#include "sim/config/topo.h"
#include "tests/unit/flags_run.h"

static void fini(void)
{
    flags_run_free();
}

TestSuite(config, .fini = fini);

#define EXPECT_MSG(s) cr_expect(strstr(E.msg, s), "want '%s'\n got '%s'", s, E.msg)

Test(config, default_is_gpt3_on_1024_a100)
{
    cr_assert_eq(flags_run(NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(C.model.name, "gpt3-175b (built-in default)");
    cr_expect_eq(C.model.num_layers, 96);
    cr_expect_eq(C.par.tp, 8);
    cr_expect_eq(C.par.pp, 16);
    cr_expect_eq(C.par.dp, 8);
    cr_expect_eq(C.par.vp, 2);
    cr_expect_eq(C.par.schedule, SCHED_INTERLEAVED);
    cr_expect_eq(C.par.global_batch_size, 1536);
    cr_expect_eq(C.par.micro_batch_size, 1);
    cr_expect_eq(config_num_microbatches(&C), 192);
    cr_expect_eq(config_dtype_bytes(&C), 2);
    cr_expect_eq(C.cluster.gpus, 1024);
    cr_expect_eq(C.cluster.gpus_per_node, 8);
    cr_expect_str_eq(C.cluster.gpu.name, "A100-SXM4-80GB");
    cr_assert_not_null(C.cluster.topology);
    cr_expect_eq(C.cluster.topology->params.nodes, 128);
    cr_expect_eq(C.cluster.topology->params.levels, 3);
}

Test(config, every_preset_validates)
{
    catalog_models *c = NULL;
    cr_assert_eq(catalog_models_load(NULL, &c, &E), TS_OK, "%s", E.msg);
    for (size_t i = 0; i < c->n; i++) {
        const catalog_model *m = &c->models[i];
        cr_expect_eq(flags_run("--model", m->model.name, NULL), TS_OK, "%s: %s", m->model.name, E.msg);
        cr_expect_eq(C.cluster.gpus, m->gpus);
        cr_expect_eq(C.par.tp * C.par.pp * C.par.dp * config_cp(&C), m->gpus, "%s", m->model.name);
    }
    catalog_models_free(c);
}

Test(config, explicit_flags_override_preset_in_any_order)
{
    cr_assert_eq(flags_run("--micro-batch-size", "2", "--seq-length", "4096", "--model", "megatron-1.7b", NULL), TS_OK,
                 "%s", E.msg);
    cr_expect_eq(C.par.micro_batch_size, 2);
    cr_expect_eq(C.model.seq_length, 4096);
    cr_expect_eq(C.model.num_layers, 24);
    cr_expect_eq(C.cluster.gpus, 32);
    cr_expect_str_eq(C.model.name, "megatron-1.7b (modified)");
    cr_assert_eq(flags_run("--model", "megatron-1.7b", "--micro-batch-size", "2", "--seq-length", "4096", NULL), TS_OK,
                 "%s", E.msg);
    cr_expect_eq(C.par.micro_batch_size, 2);
    cr_expect_eq(C.model.seq_length, 4096);
    /* a preset's switch turned off explicitly */
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--sequence-parallel=false", NULL), TS_OK, "%s", E.msg);
    cr_expect(!C.par.sequence_parallel);
    cr_expect_str_eq(C.model.name, "gpt3-175b");
}

Test(config, megatron_derived_defaults)
{
    cr_assert_eq(flags_run("--model", "megatron-1.7b", "--hidden-size", "4096", "--num-attention-heads", "32", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.ffn_hidden_size, 16384);
    cr_expect_eq(C.model.num_query_groups, 32);
    cr_assert_eq(
        flags_run("--model", "megatron-1.7b", "--hidden-size", "4096", "--num-attention-heads", "32", "--swiglu", NULL),
        TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.ffn_hidden_size, 10880); /* int(4*4096*2/3 / 64) * 64 */
    cr_expect(C.model.swiglu);
    /* the preset's GQA stays when heads are not changed */
    cr_assert_eq(flags_run("--model", "llama2-70b", "--num-layers", "160", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.num_query_groups, 8);
    cr_expect_eq(C.model.ffn_hidden_size, 28672);
    /* --schedule 1f1b drops the preset's virtual stages; -p drops its uneven split */
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--schedule", "1f1b", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 1);
    cr_expect_eq(C.par.layers_per_virtual_stage, 0);
    cr_assert_eq(flags_run("--model", "llama3-405b", "-p", "18", "--gpus", "9216", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.first_stage_layers, 0);
    cr_expect_eq(C.par.dp, 64);
    /* sequence parallelism is a no-op with t = 1 (as Megatron-LM) */
    cr_assert_eq(flags_run("--model", "gpt3-175b", "-t", "1", "--gpus", "128", "--global-batch-size", "64", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect(!C.par.sequence_parallel);
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--fp16", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.precision, PREC_FP16);
}

Test(config, hidden_not_divisible_by_heads)
{
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--hidden-size", "1000", NULL), TS_EINVAL);
    EXPECT_MSG("--hidden-size 1000 is not divisible by --num-attention-heads 96");
    EXPECT_MSG("960 or 1056");
}

/* The parameter count is bounded by 2^56 (config.h), counted with checked
 * arithmetic: h = 2^20, one head, FFN 4h, vocabulary 50304, s = 1 has
 * (h+1)*12h + 4h parameters a layer (biases counted) and (2V + s)*h + 2h
 * outside the layers: 5461 layers are 72053393110073344 <= 2^56, 5462 are
 * 72066587266383872 > 2^56; 100000 layers of h = 2^24 pass int64. */
Test(config, parameter_count_bounded)
{
    cr_assert_eq(flags_run("--num-layers", "5461", "--hidden-size", "1048576", "--num-attention-heads", "1",
                           "--seq-length", "1", "--micro-batch-size", "1", "--gpus", "1", NULL),
                 TS_OK, "%s", E.msg);
    cr_assert_eq(flags_run("--num-layers", "5462", "--hidden-size", "1048576", "--num-attention-heads", "1",
                           "--seq-length", "1", "--micro-batch-size", "1", "--gpus", "1", NULL),
                 TS_EINVAL);
    EXPECT_MSG("the model has 72066587266383872 parameters (--num-layers 5462, --hidden-size 1048576");
    EXPECT_MSG("at most 2^56 = 72057594037927936");
    cr_assert_eq(flags_run("--num-layers", "100000", "--hidden-size", "16777216", "--num-attention-heads", "1",
                           "--ffn-hidden-size", "67108864", "--seq-length", "1", "--micro-batch-size", "1", "--gpus",
                           "1", NULL),
                 TS_EINVAL);
    EXPECT_MSG("more than 9.2e18 (past int64) parameters");
    /* heads x head size past 2^40: the attention width alone overflows h x (a x d) */
    cr_assert_eq(flags_run("--num-layers", "1", "--hidden-size", "16777216", "--num-attention-heads", "1048576",
                           "--kv-channels", "1048576", "--seq-length", "1", "--micro-batch-size", "1", "--gpus", "1",
                           NULL),
                 TS_EINVAL);
    EXPECT_MSG("past int64");
}

Test(config, heads_and_groups_not_divisible_by_tp)
{
    cr_expect_eq(flags_run("--model", "llama2-13b", "-t", "16", "--gpus", "128", NULL), TS_EINVAL);
    EXPECT_MSG("--num-attention-heads 40 is not divisible by --tensor-model-parallel-size 16");
    EXPECT_MSG("valid tensor-parallel sizes: 1, 2, 4, 5, 8, 10, 20, 40");
    cr_expect_eq(flags_run("--model", "llama2-70b", "-t", "16", "-p", "2", NULL), TS_EINVAL);
    EXPECT_MSG("--num-query-groups 8 is not divisible by --tensor-model-parallel-size 16");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--group-query-attention", "--num-query-groups", "7", NULL),
                 TS_EINVAL);
    EXPECT_MSG("--num-query-groups 7 does not divide --num-attention-heads 96");
}

Test(config, layers_not_divisible_by_stages)
{
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--num-layers", "90", "--schedule", "1f1b", NULL), TS_EINVAL);
    EXPECT_MSG("--num-layers 90 is not divisible by --pipeline-model-parallel-size 16 (use 80 or 96 layers, or an "
               "uneven split");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--num-layers-per-virtual-pipeline-stage", "5", NULL), TS_EINVAL);
    EXPECT_MSG("--num-layers 96 is not divisible by --pipeline-model-parallel-size x "
               "--num-layers-per-virtual-pipeline-stage = 16 x 5 = 80 (valid "
               "--num-layers-per-virtual-pipeline-stage: 1, 2, 3, 6)");
    /* an uneven split makes 94 layers on 16 stages valid: 4 + 14 x 6 + 6 */
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--num-layers", "94", "--schedule", "1f1b",
                           "--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "6", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--num-layers", "95", "--schedule", "1f1b",
                           "--decoder-first-pipeline-num-layers", "4", NULL),
                 TS_EINVAL);
    EXPECT_MSG("leaves 91 layers, not divisible over the other 15 pipeline stages");
    /* with interleaving Megatron-core wants the chunks per rank, not layers per chunk */
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--decoder-first-pipeline-num-layers", "4", NULL), TS_EINVAL);
    EXPECT_MSG("give the chunks per rank with --num-virtual-stages-per-pipeline-rank, not "
               "--num-layers-per-virtual-pipeline-stage");
}

/* --decoder-first/last-pipeline-num-layers with interleaving, as
 * Megatron-core: whole ranks, each rank's layers even over its chunks. */
Test(config, first_last_with_interleaving)
{
    /* 94 layers, p 16, v 2: rank 0 holds 4 (2 per chunk), rank 15 holds 6
     * (3 per chunk), the 14 others 6 (3 per chunk). */
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--num-layers", "94", "--num-virtual-stages-per-pipeline-rank", "2",
                           "--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "6", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 2);
    cr_assert_eq(C.par.layout.n_stages, 32);
    cr_expect_eq(C.par.layout.layers[0], 2);
    cr_expect_eq(C.par.layout.layers[16], 2);
    cr_expect_eq(C.par.layout.layers[1], 3);
    cr_expect_eq(C.par.layout.layers[31], 3);
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--num-layers", "94", "--num-virtual-stages-per-pipeline-rank", "2",
                           "--decoder-first-pipeline-num-layers", "3", "--decoder-last-pipeline-num-layers", "7", NULL),
                 TS_EINVAL);
    EXPECT_MSG("must be multiples of the 2 chunks per pipeline rank");
    cr_expect_eq(flags_run("--model", "llama3-405b", "--schedule", "interleaved", NULL), TS_EINVAL);
    EXPECT_MSG("--schedule interleaved with --decoder-first/last-pipeline-num-layers needs the chunks per rank");
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--schedule", "zb-v", "--decoder-first-pipeline-num-layers", "4", NULL),
        TS_EINVAL);
    EXPECT_MSG("cannot be combined with --schedule zb-v");
    /* the even split by chunk count */
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--num-virtual-stages-per-pipeline-rank", "3", NULL), TS_OK, "%s",
                 E.msg);
    cr_expect_eq(C.par.vp, 3);
    cr_expect_eq(C.par.layout.layers[47], 2);
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--num-virtual-stages-per-pipeline-rank", "1", NULL), TS_EINVAL);
    EXPECT_MSG("gives 1 chunk per pipeline rank");
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--schedule", "1f1b", "--num-virtual-stages-per-pipeline-rank", "2", NULL),
        TS_EINVAL);
    EXPECT_MSG("applies to --schedule interleaved or zb-v only");
}

/* --account-for-embedding/loss-in-pipeline-split: the embedding / loss
 * count as a layer, the first / last stage holds one layer fewer. */
Test(config, account_for_embedding_and_loss)
{
    cr_assert_eq(flags_run("--model", "llama3-405b", "-p", "16", "--schedule", "interleaved",
                           "--num-virtual-stages-per-pipeline-rank", "2", "--account-for-embedding-in-pipeline-split",
                           "--account-for-loss-in-pipeline-split", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 2);
    cr_expect_eq(C.par.layout.layers[0], 3);
    cr_expect_eq(C.par.layout.layers[1], 4);
    cr_expect_eq(C.par.layout.layers[31], 3);
    /* Megatron-LM's arguments.py: layers per chunk counts the embedding and loss */
    cr_assert_eq(flags_run("--model", "llama3-405b", "-p", "16", "--schedule", "interleaved",
                           "--num-layers-per-virtual-pipeline-stage", "4", "--account-for-embedding-in-pipeline-split",
                           "--account-for-loss-in-pipeline-split", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 2);
    cr_assert_eq(flags_run("--model", "llama3-405b", "-p", "16", "--schedule", "1f1b",
                           "--account-for-embedding-in-pipeline-split", "--num-layers", "127", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.layout.layers[0], 7);
    cr_expect_eq(C.par.layout.layers[15], 8);
    cr_expect_eq(flags_run("--model", "llama3-405b", "-p", "16", "--schedule", "1f1b",
                           "--account-for-embedding-in-pipeline-split", NULL),
                 TS_EINVAL);
    EXPECT_MSG("--num-layers 126 plus the embedding (127) is not divisible by the 16 virtual pipeline stages");
    cr_expect_eq(flags_run("--model", "llama3-405b", "--account-for-loss-in-pipeline-split",
                           "--decoder-first-pipeline-num-layers", "7", NULL),
                 TS_EINVAL);
    EXPECT_MSG("exclude each other");
}

/* --pipeline-model-parallel-layout: Llama 3 405B's published layout. */
Test(config, layout_string)
{
    const char *lay = "Et*3|(t*4|)*30t*3L";
    /* the preset's first/last split (7/7) is dropped by the layout */
    cr_assert_eq(
        flags_run("--model", "llama3-405b", "--schedule", "interleaved", "--pipeline-model-parallel-layout", lay, NULL),
        TS_OK, "%s", E.msg);
    cr_expect(C.par.layout_given);
    cr_expect_eq(C.par.vp, 2);
    cr_expect_eq(C.par.first_stage_layers, 0);
    cr_expect_eq(C.par.layout.n_stages, 32);
    cr_expect_eq(C.par.layout.layers[0], 3);
    cr_expect_eq(C.par.layout.layers[17], 4);
    cr_expect_eq(
        flags_run("--model", "llama3-405b", "--schedule", "1f1b", "--pipeline-model-parallel-layout", lay, NULL),
        TS_EINVAL);
    EXPECT_MSG("--schedule 1f1b runs one chunk per pipeline rank; the layout's 32 stages over p = 16 gives 2");
    cr_expect_eq(flags_run("--model", "llama3-405b", "--schedule", "interleaved", "-p", "8",
                           "--pipeline-model-parallel-layout", "Et*3|(t*4|)*30t*3L", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 4);
    cr_expect_eq(flags_run("--model", "llama3-405b", "--schedule", "interleaved", "--num-layers", "128",
                           "--pipeline-model-parallel-layout", lay, NULL),
                 TS_EINVAL);
    EXPECT_MSG("its stages hold 126 transformer layers (t) but --num-layers is 128");
    cr_expect_eq(flags_run("--model", "llama3-405b", "--schedule", "interleaved", "--pipeline-model-parallel-layout",
                           "Et*3|(t*4|*30t*3L", NULL),
                 TS_EINVAL);
    EXPECT_MSG("--pipeline-model-parallel-layout: pipeline layout 'Et*3|(t*4|*30t*3L', position 6 ('('): this '(' "
               "is never closed");
    cr_expect_eq(flags_run("--model", "llama3-405b", "--schedule", "interleaved", "--pipeline-model-parallel-layout",
                           lay, "--decoder-first-pipeline-num-layers", "6", NULL),
                 TS_EINVAL);
    EXPECT_MSG("gives the whole split");
    cr_expect_eq(flags_run("--model", "llama3-405b", "--schedule", "interleaved", "-p", "2", "--gpus", "16",
                           "--global-batch-size", "16", "--pipeline-model-parallel-layout", "Et*62||t*63|tL", NULL),
                 TS_EINVAL);
    EXPECT_MSG("stage 1 is empty");
}

Test(config, schedule_chunk_rules)
{
    cr_expect_eq(flags_run("--model", "megatron-18.4b", "-p", "2", "--gpus", "512", "--schedule", "interleaved", NULL),
                 TS_EINVAL);
    EXPECT_MSG("--schedule interleaved needs --num-layers-per-virtual-pipeline-stage");
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--schedule", "zb-v", "--num-layers-per-virtual-pipeline-stage", "2", NULL),
        TS_EINVAL);
    EXPECT_MSG("--schedule zb-v runs exactly 2 chunks per pipeline rank; --num-layers-per-virtual-pipeline-stage 2 "
               "gives 3");
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--schedule", "zb-v", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 2);
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--schedule", "zb-v", "--num-layers", "88", NULL), TS_EINVAL);
    EXPECT_MSG("--schedule zb-v runs exactly 2 chunks per pipeline rank: --num-layers 88 is not divisible by 2 x "
               "--pipeline-model-parallel-size = 32");
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--schedule", "1f1b", "--num-layers-per-virtual-pipeline-stage", "3", NULL),
        TS_EINVAL);
    EXPECT_MSG("applies to --schedule interleaved or zb-v only");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--num-layers-per-virtual-pipeline-stage", "6", NULL), TS_EINVAL);
    EXPECT_MSG("gives 1 chunk per pipeline rank");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--schedule", "zb-x", NULL), TS_EINVAL);
    EXPECT_MSG("--schedule: 'zb-x' is not valid (valid: gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v|dualpipev|dualpipe)");
}

Test(config, batch_and_gpu_count)
{
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--global-batch-size", "1540", NULL), TS_EINVAL);
    EXPECT_MSG("--global-batch-size 1540 is not divisible by --micro-batch-size x data-parallel size = 1 x 8 = 8 "
               "(use a global batch of 1536 or 1544 sequences)");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--micro-batch-size", "4", "--global-batch-size", "1552", NULL),
                 TS_EINVAL);
    EXPECT_MSG("4 x 8 = 32");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--gpus", "1000", NULL), TS_EINVAL);
    EXPECT_MSG("--gpus 1000 is not a multiple of --tensor-model-parallel-size x --pipeline-model-parallel-size = "
               "8 x 16 = 128");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--data-parallel-size", "4", NULL), TS_EINVAL);
    EXPECT_MSG("--gpus 1024 != t x p x d = 8 x 16 x 4 = 512");
    cr_assert_eq(flags_run("--model", "gpt3-175b", "-d", "4", "--gpus", "512", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.dp, 4);
    cr_expect_eq(config_num_microbatches(&C), 384);
}

Test(config, cluster_inputs)
{
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--gpu", "V100", NULL), TS_EINVAL);
    EXPECT_MSG("--gpu: unknown GPU kind 'V100' (valid: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, "
               "H200-SXM-141GB");
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--gpu", "h200", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(C.cluster.gpu.name, "H200-SXM-141GB");
    cr_expect_float_eq(C.cluster.topology->params.nic_gbps, 50.0, 1e-12);
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--topology", "topologies/dgx-h100-cluster.csv", NULL), TS_OK, "%s",
                 E.msg);
    cr_expect_str_eq(C.cluster.gpu.name, "H100-SXM5-80GB");
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--topology", "topologies/dgx-h100-cluster.csv", "--gpu", "a100", NULL),
        TS_EINVAL);
    EXPECT_MSG("--gpu A100-SXM4-80GB conflicts with the topology topologies/dgx-h100-cluster.csv");
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--topology", "topologies/selene-dgx-a100.csv", "--gpus", "8192", NULL),
        TS_EINVAL);
    EXPECT_MSG("--gpus 8192 does not fit the 4480 GPUs of topologies/selene-dgx-a100.csv");
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--topology", "topologies/two-dgx-a100-links.csv", "--gpus", "16",
                           "-p", "2", "--schedule", "1f1b", "--global-batch-size", "8", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.cluster.gpus_per_node, 8);
    cr_expect_str_eq(C.cluster.gpu.name, "A100-SXM4-80GB");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--topology", "tests/data/topo-bad-nic.csv", NULL), TS_EINVAL);
    EXPECT_MSG("tests/data/topo-bad-nic.csv:4: column 'nic_gbps': '25 GB/s' is not a number");
    cr_expect_eq(flags_run("--model", "gpt-3", NULL), TS_EINVAL);
    EXPECT_MSG("--model: unknown model 'gpt-3'; nearest: gpt3-175b");
}

Test(config, flag_level_errors)
{
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--bf16", "--fp16", NULL), TS_EINVAL);
    EXPECT_MSG("--bf16 and --fp16 exclude each other");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--recompute-num-layers", "1", NULL), TS_EINVAL);
    EXPECT_MSG("--recompute-num-layers applies to --recompute-granularity full only (got selective)");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--recompute-method", "block", NULL), TS_EINVAL);
    EXPECT_MSG("--recompute-method applies to --recompute-granularity full only (got selective)");
    cr_assert_eq(flags_run("--model", "gpt3-175b", "--recompute-granularity", "full", "--recompute-method", "block",
                           "--recompute-num-layers", "2", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.recompute_method, RECOMPUTE_METHOD_BLOCK);
    cr_expect_eq(C.par.recompute_num_layers, 2);
    cr_expect_eq(
        flags_run("--model", "gpt3-175b", "--recompute-granularity", "full", "--recompute-num-layers", "7", NULL),
        TS_EINVAL);
    EXPECT_MSG("--recompute-num-layers 7 exceeds the 3 layers of a pipeline stage");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--tensor-model-parallel-sizes", "8", NULL), TS_EINVAL);
    EXPECT_MSG("did you mean --tensor-model-parallel-size?");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--seq-length", "2k", NULL), TS_EINVAL);
    EXPECT_MSG("flag --seq-length: '2k' is not an integer");
    cr_expect_eq(flags_run("--model", "gpt3-175b", "--gpus", "0", NULL), TS_EINVAL);
    EXPECT_MSG("flag --gpus: 0 is out of range (valid: 1 to 16777216 GPUs)");
}

Test(config, resolve_directly)
{
    cr_assert_eq(flags_run(NULL), TS_OK, "%s", E.msg);
    config c = C;
    c.cluster.topology = NULL; /* C keeps ownership */
    c.par.dp = 0;
    c.model.num_attention_heads = 0;
    cr_expect_eq(config_resolve(&c, &E), TS_EINVAL);
    EXPECT_MSG("--num-attention-heads is 0; it must be at least 1");
    c = C;
    c.cluster.topology = NULL;
    c.par.dp = 0;
    c.par.tp = 4;
    cr_assert_eq(config_resolve(&c, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(c.par.dp, 16);
    c.model.precision = PREC_FP32;
    cr_expect_eq(config_dtype_bytes(&c), 4);
}

/* Megatron-LM's GPT-3 example flags (examples/gpt3/train_gpt3_175b_distributed.sh's model and layout, without
 * its data and logging flags) resolve as Megatron-LM resolves them. */
#define GPT3_FLAGS                                                                                                     \
    "--num-layers", "96", "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",             \
        "--micro-batch-size", "1", "--global-batch-size", "1536", "--fp16", "-t", "8", "-p", "16"

Test(config, megatron_defaults_field_by_field)
{
    cr_assert_eq(flags_run(GPT3_FLAGS, "--gpus", "1024", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(C.model.name, "custom");
    cr_expect_eq(C.par.schedule, SCHED_1F1B); /* no virtual-pipeline flag */
    cr_expect_eq(C.par.vp, 1);
    cr_expect(!C.par.sequence_parallel);
    cr_expect_eq(C.par.recompute, RECOMPUTE_NONE);
    cr_expect(!C.par.distributed_optimizer);
    cr_expect(!C.par.overlap_grad_reduce);
    cr_expect_eq(C.model.precision, PREC_FP16);
    cr_expect(!C.model.untie_embeddings);
    cr_expect(C.model.add_bias_linear);
    cr_expect_eq(C.model.normalization, NORM_LAYERNORM);
    cr_expect_eq(C.model.position_embedding, POS_LEARNED_ABSOLUTE);
    cr_expect_eq(C.model.vocab_size, 50257);
    cr_expect_eq(C.model.padded_vocab_size, 51200); /* 50257 up to a multiple of 128 x 8 */
    cr_expect_eq(C.model.ffn_hidden_size, 4 * 12288);
    cr_expect_eq(C.model.kv_channels, 128);
    cr_expect_eq(C.model.num_query_groups, 96);
    cr_expect_eq(C.model.max_position_embeddings, 2048);
    cr_expect_eq(C.par.dp, 8);
    cr_expect_eq(S.src[FLAGS_F_SCHEDULE], FLAGS_SRC_MEGATRON);
    cr_expect_eq(S.src[FLAGS_F_LAYERS], FLAGS_SRC_FLAG);
    cr_expect_eq(S.src[FLAGS_F_PADDED], FLAGS_SRC_DERIVED);
    cr_expect(!S.builtin_default);
    /* without --bf16/--fp16 Megatron-LM trains in fp32; without --gpus the world is t x p; B = b x d */
    cr_assert_eq(flags_run("--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length",
                           "128", "--micro-batch-size", "2", "-t", "2", "-d", "3", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.precision, PREC_FP32);
    cr_expect_eq(C.cluster.gpus, 6);
    cr_expect_eq(C.par.global_batch_size, 6);
    cr_expect_eq(C.model.padded_vocab_size, 50432); /* a multiple of 256 */
}

Test(config, no_model_names_the_required_flags)
{
    cr_expect_eq(flags_run("--num-layers", "4", "--gpus", "8", NULL), TS_EINVAL);
    EXPECT_MSG("missing: --hidden-size, --num-attention-heads, --seq-length, --micro-batch-size");
    EXPECT_MSG("--model NAME");
    cr_assert_eq(flags_run(NULL), TS_OK, "%s", E.msg);
    cr_expect(S.builtin_default);
    cr_expect_eq(S.src[FLAGS_F_LAYERS], FLAGS_SRC_BUILTIN);
}

Test(config, shape_flags_megatron_semantics)
{
    /* --num-query-groups without --group-query-attention is ignored by Megatron-LM: refused here */
    cr_expect_eq(flags_run(GPT3_FLAGS, "--num-query-groups", "8", NULL), TS_EINVAL);
    EXPECT_MSG("takes effect only with --group-query-attention");
    cr_assert_eq(flags_run(GPT3_FLAGS, "--group-query-attention", "--num-query-groups", "8", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.num_query_groups, 8);
    /* Megatron-LM's default --num-query-groups is 1, which t = 8 cannot split (Megatron-core asserts it too) */
    cr_expect_eq(flags_run(GPT3_FLAGS, "--group-query-attention", NULL), TS_EINVAL);
    EXPECT_MSG("--num-query-groups 1 is not divisible by --tensor-model-parallel-size 8");
    /* vocabulary: --vocab-size padded, --padded-vocab-size as given, not both */
    cr_assert_eq(flags_run(GPT3_FLAGS, "--vocab-size", "128256", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.padded_vocab_size, 129024);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--vocab-size", "32000", "--make-vocab-size-divisible-by", "1", NULL), TS_OK,
                 "%s", E.msg);
    cr_expect_eq(C.model.padded_vocab_size, 32000);
    cr_expect_eq(flags_run(GPT3_FLAGS, "--vocab-size", "32000", "--padded-vocab-size", "32000", NULL), TS_EINVAL);
    EXPECT_MSG("--vocab-size and --padded-vocab-size exclude each other");
    /* --recompute-activations is selective; the two virtual-pipeline spellings */
    cr_assert_eq(flags_run(GPT3_FLAGS, "--recompute-activations", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.recompute, RECOMPUTE_SELECTIVE);
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-granularity", "full", NULL), TS_EINVAL);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--num-virtual-stages-per-pipeline-rank", "2", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.schedule, SCHED_INTERLEAVED);
    cr_expect_eq(C.par.vp, 2);
    cr_expect_eq(C.par.layers_per_virtual_stage, 3);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--num-layers-per-virtual-pipeline-stage", "2", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.vp, 3);
    cr_expect_eq(flags_run(GPT3_FLAGS, "--num-layers-per-virtual-pipeline-stage", "2",
                           "--num-virtual-stages-per-pipeline-rank", "3", NULL),
                 TS_EINVAL);
    /* --kv-channels need not be h / a; --max-position-embeddings must cover the sequence */
    cr_assert_eq(flags_run(GPT3_FLAGS, "--kv-channels", "64", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(config_head_size(&C.model), 64);
    cr_expect_eq(flags_run(GPT3_FLAGS, "--max-position-embeddings", "1024", NULL), TS_EINVAL);
    EXPECT_MSG("--max-position-embeddings 1024 is less than --seq-length 2048");
    cr_assert_eq(flags_run(GPT3_FLAGS, "--normalization", "RMSNorm", "--disable-bias-linear",
                           "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.normalization, NORM_RMSNORM);
    cr_expect(!C.model.add_bias_linear);
    cr_expect_eq(C.model.position_embedding, POS_ROPE);
    cr_expect(C.model.untie_embeddings);
}

Test(config, preset_layout_dropped_by_explicit_pipeline_size)
{
    /* a preset's interleaving follows its p; another -p drops it (it is never carried to a layout it was not
     * chosen for) */
    cr_assert_eq(flags_run("--model", "llama2-70b", "-p", "8", "--gpus", "1024", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.schedule, SCHED_1F1B);
    cr_expect_eq(C.par.vp, 1);
    cr_assert_eq(flags_run("--model", "llama2-70b", "-p", "4", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.schedule, SCHED_INTERLEAVED);
}

/* --attention-backend: auto is Transformer Engine's pick for the GPU and
 * precision; --use-flash-attn is flash; --recompute-modules takes a list. */
Test(config, attention_backend_and_recompute_modules)
{
    cr_assert_eq(flags_run(GPT3_FLAGS, NULL), TS_OK, "%s", E.msg); /* fp16 on the default A100 */
    cr_expect_eq(C.model.attention_backend, ATTN_BACKEND_FLASH);
    cr_expect_eq(S.src[FLAGS_F_ATTN], FLAGS_SRC_DERIVED);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--fp32", NULL), TS_EINVAL); /* --fp16 and --fp32 */
    cr_assert_eq(flags_run("--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                           "32", "--micro-batch-size", "1", NULL),
                 TS_OK, "%s", E.msg); /* Megatron's default precision, fp32: TE runs unfused attention */
    cr_expect_eq(C.model.attention_backend, ATTN_BACKEND_UNFUSED);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--attention-backend", "unfused", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.attention_backend, ATTN_BACKEND_UNFUSED);
    cr_expect_eq(S.src[FLAGS_F_ATTN], FLAGS_SRC_FLAG);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--attention-backend", "fused", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.attention_backend, ATTN_BACKEND_FUSED);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--use-flash-attn", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.model.attention_backend, ATTN_BACKEND_FLASH);
    cr_expect_eq(flags_run(GPT3_FLAGS, "--use-flash-attn", "--attention-backend", "local", NULL), TS_EINVAL);
    EXPECT_MSG("--use-flash-attn means --attention-backend flash");
    cr_expect_eq(flags_run(GPT3_FLAGS, "--gpu", "cpu", "--attention-backend", "flash", NULL), TS_EINVAL);
    EXPECT_MSG("--attention-backend flash needs --bf16 or --fp16 on a GPU with bf16 tensor cores");
    /* the list, up to the next flag; given twice, refused as every flag */
    cr_assert_eq(flags_run(GPT3_FLAGS, "--recompute-granularity", "selective", "--recompute-modules", "mlp",
                           "layernorm", "--recompute-num-layers", "0", NULL),
                 TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.recompute_modules, CONFIG_RC_MLP | CONFIG_RC_LAYERNORM);
    cr_expect_eq(C.par.recompute_num_layers, 0);
    cr_assert_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules=layernorm", "mlp", NULL), TS_OK,
                 "%s", E.msg);
    cr_expect_eq(C.par.recompute_modules, CONFIG_RC_LAYERNORM | CONFIG_RC_MLP);
    cr_assert_eq(
        flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules", "mlp,core_attn layernorm", NULL), TS_OK,
        "%s", E.msg); /* one argument, several names (a sweep cell) */
    cr_expect_eq(C.par.recompute_modules, CONFIG_RC_LAYERNORM | CONFIG_RC_MLP | CONFIG_RC_CORE_ATTN);
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules=core_attn", "mlp",
                           "--recompute-modules", "layernorm", NULL),
                 TS_EINVAL);
    EXPECT_MSG("flag --recompute-modules given twice");
    cr_assert_eq(flags_run(GPT3_FLAGS, "--recompute-activations", NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(C.par.recompute_modules, 0u); /* Megatron-core's default, core_attn */
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules", "shared_experts", NULL),
                 TS_EINVAL);
    EXPECT_MSG("--recompute-modules shared_experts: not modelled (valid: core_attn, mlp, layernorm; moe, moe_act with");
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules", "mla_up_proj", NULL),
                 TS_EINVAL);
    EXPECT_MSG("--recompute-modules mla_up_proj: not modelled");
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules", "moe_act", NULL), TS_EINVAL);
    EXPECT_MSG("--recompute-modules moe_act: not modelled without --num-experts");
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-activations", "--recompute-modules", "--fp16", NULL), TS_EINVAL);
    EXPECT_MSG("--recompute-modules: needs one or more of core_attn, mlp, layernorm");
    cr_expect_eq(flags_run(GPT3_FLAGS, "--recompute-modules", "mlp", NULL), TS_EINVAL);
    EXPECT_MSG("--recompute-modules applies to --recompute-granularity selective only (got none)");
}
