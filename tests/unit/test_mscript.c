/* mscript: Megatron-LM launch scripts read without running them — the exact
 * argument vectors of the example scripts in tests/data/scripts/, the world
 * size, the unresolved list, bash quoting and expansion, every error with
 * its file:line; and --megatron-script through flags_parse (command-line
 * flags override the script's, --gpus from the launcher, Megatron-LM's
 * defaults, unresolved values that are fatal). Run from the repository root. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/config/flags.h"
#include "sim/config/mscript.h"

#define DIR "tests/data/scripts/"

static mscript *M;
static ts_err E;

static void fini(void)
{
    mscript_free(M);
    M = NULL;
}

TestSuite(mscript, .fini = fini);

/* Parse text as NAME; returns the status. */
static int parse(const char *text)
{
    mscript_free(M);
    M = NULL;
    err_clear(&E);
    return mscript_parse("x.sh", text, strlen(text), &M, &E);
}

static int load(const char *path)
{
    mscript_free(M);
    M = NULL;
    err_clear(&E);
    return mscript_load(path, &M, &E);
}

/* M's arguments are exactly the space-separated words of want. */
static void expect_args(const char *want)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", want);
    int i = 0;
    for (char *sv = NULL, *w = strtok_r(buf, " ", &sv); w; w = strtok_r(NULL, " ", &sv), i++) {
        cr_assert_lt(i, M->argc, "only %d arguments; want '%s' next", M->argc, w);
        cr_assert_str_eq(M->argv[i], w, "argument %d", i);
    }
    cr_assert_eq(M->argc, i, "%d arguments, want %d", M->argc, i);
    cr_assert_null(M->argv[M->argc], "argv is NULL-terminated");
}

static void expect_error(const char *text, const char *msg)
{
    cr_assert_eq(parse(text), TS_EINVAL, "no error for:\n%s", text);
    cr_assert_null(M);
    cr_assert(strstr(E.msg, msg), "message '%s' lacks '%s'", E.msg, msg);
}

/* ---------------------------------------------------------------- example scripts */

Test(mscript, gpt3_175b_example_exact)
{
    cr_assert_eq(load(DIR "gpt3_175b.sh"), TS_OK, "%s", E.msg);
    cr_assert_str_eq(M->program, "pretrain_gpt.py");
    cr_assert_eq(M->launcher_line, 79);
    expect_args("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
                "--max-position-embeddings 2048 --attention-backend auto --micro-batch-size 1 --global-batch-size 1536 "
                "--rampup-batch-size 16 16 5859375 --train-iters 500000 --weight-decay 0.1 --adam-beta1 0.9 "
                "--adam-beta2 0.95 --init-method-std 0.006 --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine "
                "--min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 430000 --tensor-model-parallel-size 8 "
                "--pipeline-model-parallel-size 16 --data-path $DATA_PATH --vocab-file $VOCAB_FILE --merge-file "
                "$MERGE_FILE --split 949,50,1 --log-interval 100 --save-interval 10000 --eval-interval 1000 --save "
                "$CHECKPOINT_PATH --load $CHECKPOINT_PATH --eval-iters 10 --tensorboard-dir $TENSORBOARD_LOGS_PATH");
    cr_assert_eq(M->world_size, 8, "GPUS_PER_NODE=8 x NUM_NODES=1, as the example");
    cr_assert_null(M->world_why);
    cr_assert_eq(M->arg_line[0], 31);
    cr_assert_eq(M->arg_line[1], 31);
    cr_assert_eq(M->arg_line[44], 58, "--tensor-model-parallel-size's value is on line 58");
    cr_assert_null(M->arg_why[1]);
    cr_assert_str_eq(M->arg_why[48],
                     "line 63: $DATA_PATH, from line 21: $5 is an argument of the script, known only when the script "
                     "runs");
    static const char *const want[] = {
        "line 63: $DATA_PATH, from line 21: $5 is an argument of the script, known only when the script runs",
        "line 64: $VOCAB_FILE, from line 19: $3 is an argument of the script, known only when the script runs",
        "line 65: $MERGE_FILE, from line 20: $4 is an argument of the script, known only when the script runs",
        "line 73: $CHECKPOINT_PATH, from line 17: $1 is an argument of the script, known only when the script runs",
        "line 74: $CHECKPOINT_PATH, from line 17: $1 is an argument of the script, known only when the script runs",
        ("line 76: $TENSORBOARD_LOGS_PATH, from line 18: $2 is an argument of the script, known only when the "
         "script runs"),
    };
    cr_assert_eq(M->n_unresolved, 6);
    for (size_t i = 0; i < 6; i++)
        cr_assert_str_eq(M->unresolved[i], want[i]);
}

Test(mscript, gpt3_small_exact)
{
    cr_assert_eq(load(DIR "gpt3_small.sh"), TS_OK, "%s", E.msg);
    expect_args("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --padded-vocab-size "
                "51200 --micro-batch-size 2 --global-batch-size 32 --bf16 --tensor-model-parallel-size 2 "
                "--pipeline-model-parallel-size 4 --sequence-parallel --use-distributed-optimizer "
                "--recompute-granularity selective");
    cr_assert_eq(M->world_size, 16, "python -m torch.distributed.launch, 8 x ${NUM_NODES:-2}");
    cr_assert_eq(M->n_unresolved, 1);
    cr_assert_str_eq(M->unresolved[0], "line 23: $NODE_RANK, from line 12: $SLURM_NODEID is never assigned (trainsim "
                                       "does not read the environment)");
    cr_assert_eq(M->arg_line[11], 37, "$MICRO_BATCH is written on line 37");
}

Test(mscript, llama3_8b_exact)
{
    cr_assert_eq(load(DIR "llama3_8b.sh"), TS_OK, "%s", E.msg);
    cr_assert_str_eq(M->program, "pretrain_gpt.py", "from \"$PRETRAIN_SCRIPT_PATH\"");
    expect_args(
        "--use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --kv-channels 128 --seq-length 8192 --max-position-embeddings "
        "8192 --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 "
        "--hidden-dropout 0.0 --swiglu --init-method-std 0.0134 --attention-backend fused --normalization RMSNorm "
        "--untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 --global-batch-size 128 "
        "--train-samples 1953125000 --lr-decay-samples 1949218748 --lr-warmup-samples 3906252 --lr 0.00015 --min-lr "
        "0.00001 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 "
        "--cross-entropy-loss-fusion --manual-gc --empty-unused-memory-level 1 --exit-duration-in-mins 235 "
        "--tensor-model-parallel-size 1 --context-parallel-size 1 --pipeline-model-parallel-size 1 "
        "--sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --mock-data "
        "--tokenizer-type NullTokenizer --vocab-size 128256 --data-cache-path ${DATA_CACHE_PATH} --tiktoken-pattern "
        "v2 --split 99,1,0 --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 "
        "--log-interval 1 --eval-iters 32 --eval-interval 100 --save-interval 1000 --log-throughput --ckpt-format "
        "torch_dist --distributed-timeout-minutes 60 --save checkpoints/llama3_8b --load checkpoints/llama3_8b "
        "--tensorboard-dir tensorboard_logs/llama3_8b");
    cr_assert_eq(M->world_size, 8);
    cr_assert_eq(M->n_unresolved, 1);
    cr_assert_str_eq(M->unresolved[0], "line 110: ${DATA_CACHE_PATH}, from line 41: $PWD is never assigned (trainsim "
                                       "does not read the environment)");
}

Test(mscript, llama2_7b_scalar_launcher_args)
{
    cr_assert_eq(load(DIR "llama2_7b.sh"), TS_OK, "%s", E.msg);
    cr_assert_eq(M->world_size, 32, "a scalar $DISTRIBUTED_ARGS split into words: 8 x 4");
    cr_assert_eq(M->argc, 78);
    cr_assert_str_eq(M->argv[0], "--num-layers");
    cr_assert_str_eq(M->argv[15], "--normalization");
    cr_assert_str_eq(M->argv[16], "RMSNorm");
    cr_assert_str_eq(M->argv[77], "10", "--eval-iters 10, the last continued line");
    cr_assert_eq(M->n_unresolved, 4);
    cr_assert(strstr(M->unresolved[0], "line 70: ${TOKENIZER_MODEL}, from line 17: $2"));
}

Test(mscript, mixtral_conditional_block_noted)
{
    cr_assert_eq(load(DIR "mixtral_8x7b.sh"), TS_OK, "%s", E.msg);
    cr_assert_eq(M->world_size, 8, "NNODES=${SLURM_NNODES:-\"1\"}: the script's default");
    cr_assert_eq(M->argc, 99);
    bool experts = false;
    for (int i = 0; i + 1 < M->argc; i++)
        experts |= !strcmp(M->argv[i], "--num-experts") && !strcmp(M->argv[i + 1], "8");
    cr_assert(experts);
    cr_assert_str_eq(M->unresolved[0], "lines 104-109: the 'if' block was not run (trainsim runs no conditions or "
                                       "loops); its assignments to LOGGING_ARGS were not made");
    cr_assert_str_eq(M->argv[96], "${CHECKPOINT_PATH}/tensorboard", "unresolved text kept as written");
}

/* ---------------------------------------------------------------- bash */

Test(mscript, quoting_and_splitting)
{
    cr_assert_eq(parse("A=\"x  y\"\n"
                       "B='$A'\n"
                       "C=( --a \"$A\" $A '$B' \"${A}z\" \\\"q\\\" \"\" )\n"
                       "python pretrain_gpt.py \"${C[@]}\" ${C[1]} \"${C[*]}\"\n"),
                 TS_OK, "%s", E.msg);
    static const char *const want[] = {
        "--a", "x  y", "x", "y", "$B", "x  yz", "\"q\"", "", "x", "y", "--a x  y x y $B x  yz \"q\" "};
    cr_assert_eq(M->argc, 11);
    for (int i = 0; i < 11; i++)
        cr_assert_str_eq(M->argv[i], want[i], "argument %d", i);
    cr_assert_eq(M->n_unresolved, 0);
}

Test(mscript, continuations_comments_export_append)
{
    cr_assert_eq(parse("#!/bin/bash\n"
                       "export CUDA_DEVICE_MAX_CONNECTIONS=1 L=2 # two\n"
                       "declare -a ARGS=( --num-layers $L   # layers\n"
                       "   # a comment line\n"
                       "   --hidden-size 64 )\n"
                       "ARGS+=( --fp16 )\n"
                       "S=ab; S+=cd\n"
                       "unset L\n"
                       "torchrun \\\n"
                       "  --nproc-per-node=4 --nnodes=2 pretrain_bert.py \\\n"
                       "  ${ARGS[@]} --s $S ${#ARGS[@]} 2>&1 | tee log.txt\n"),
                 TS_OK, "%s", E.msg);
    expect_args("--num-layers 2 --hidden-size 64 --fp16 --s abcd 5");
    cr_assert_eq(M->world_size, 8);
    cr_assert_str_eq(M->program, "pretrain_bert.py");
    cr_assert_eq(M->launcher_line, 9);
    cr_assert_eq(M->arg_line[2], 5);
    cr_assert_eq(M->arg_line[5], 11);
}

Test(mscript, arithmetic)
{
    cr_assert_eq(parse("G=8\nN=$((2*2))\nW=$(( (G + 1) * $N % 7 - ${N} / 3 ))\n"
                       "python pretrain_gpt.py --a $W --b $((N*G)) --c $((X+1)) --d $((1/0))\n"),
                 TS_OK, "%s", E.msg);
    expect_args("--a 0 --b 32 --c $((X+1)) --d $((1/0))");
    cr_assert_str_eq(M->arg_why[5], "line 4: X in $(( )) is never assigned");
    cr_assert(strstr(M->arg_why[7], "line 4: $((1/0)) is not simple integer arithmetic"), "%s", M->arg_why[7]);
    cr_assert_eq(parse("python pretrain_gpt.py $((9223372036854775807 + 1)) $(( -(0 - 9223372036854775807 - 1) )) "
                       "$(( (0 - 9223372036854775807 - 1) / -1 )) $((3000000000 * 4))\n"),
                 TS_OK, "%s", E.msg);
    cr_assert_eq(M->argc, 4);
    for (int i = 0; i < 3; i++)
        cr_assert(M->arg_why[i] && strstr(M->arg_why[i], "is not simple integer arithmetic"), "overflow %d", i);
    cr_assert_str_eq(M->argv[3], "12000000000");
}

Test(mscript, parameter_defaults)
{
    cr_assert_eq(parse("X=5\nE=\n"
                       "python pretrain_gpt.py ${X:-1} ${Y:-2} ${1:-3} ${E:-4} ${E-5} ${X:+6} ${Y:+7} \"${Z:-a b}\"\n"),
                 TS_OK, "%s", E.msg);
    /* ${E-5} (E is assigned, empty) and ${Y:+7} expand to nothing, unquoted: no word, as in bash */
    static const char *const want[] = {"5", "2", "3", "4", "6", "a b"};
    cr_assert_eq(M->argc, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_str_eq(M->argv[i], want[i], "argument %d", i);
}

Test(mscript, unresolved_words)
{
    cr_assert_eq(parse("H=$(hostname)\npython pretrain_gpt.py --host $H --w `date` --rest \"$@\" ${X%.sh}\n"), TS_OK,
                 "%s", E.msg);
    expect_args("--host $H --w `date` --rest $@ ${X%.sh}");
    cr_assert_str_eq(M->arg_why[1], "line 2: $H, from line 1: $(hostname) runs a command (trainsim runs nothing)");
    cr_assert_str_eq(M->arg_why[3], "line 2: `date` runs a command (trainsim runs nothing)");
    cr_assert_str_eq(M->arg_why[5], "line 2: $@ is set by the shell, known only when the script runs");
    cr_assert_str_eq(M->arg_why[6], "line 2: ${X%.sh}: trainsim does not evaluate this expansion");
    cr_assert_eq(M->n_unresolved, 4);
    cr_assert_eq(M->world_size, 0, "python alone gives no world size");
}

Test(mscript, world_size_unresolved)
{
    cr_assert_eq(parse("torchrun --nproc_per_node $G pretrain_gpt.py --x 1\n"), TS_OK, "%s", E.msg);
    cr_assert_eq(M->world_size, 0);
    cr_assert_str_eq(M->world_why, "the launcher's --nproc_per_node is unresolved: line 1: $G is never assigned "
                                   "(trainsim does not read the environment)");
    cr_assert_eq(parse("torchrun --nproc_per_node 8 --nnodes 1:4 pretrain_gpt.py --x 1\n"), TS_OK, "%s", E.msg);
    cr_assert_str_eq(M->world_why, "line 1: the launcher's --nnodes '1:4' is not a positive integer");
    cr_assert_eq(parse("torchrun --nproc_per_node=8 pretrain_gpt.py --x 1\n"), TS_OK, "%s", E.msg);
    cr_assert_eq(M->world_size, 8, "nnodes 1 when only nproc_per_node is given");
}

Test(mscript, launcher_choice)
{
    cr_assert_eq(parse("python tools/preprocess_data.py --input a.json\n"
                       "echo python pretrain_gpt.py --no\n"
                       "torchrun pretrain_gpt.py --yes 1\n"),
                 TS_OK, "%s", E.msg);
    expect_args("--yes 1");
    cr_assert_eq(M->launcher_line, 3);
    cr_assert_eq(parse("python train.py --lr 1\n"), TS_OK, "another *.py given flags");
    expect_args("--lr 1");
}

/* ---------------------------------------------------------------- errors */

Test(mscript, errors_name_file_and_line)
{
    expect_error("A=1\necho hi\n", "x.sh: no launcher line: no command runs pretrain_gpt.py");
    expect_error("torchrun pretrain_gpt.py --a\n\ntorchrun pretrain_gpt.py --b\n",
                 "x.sh:3: a second launcher line (the first is line 1)");
    expect_error("A=1\nB=\"abc\npython pretrain_gpt.py\n", "x.sh:2: unterminated double quote");
    expect_error("A=1\nB='abc\n", "x.sh:2: unterminated single quote");
    expect_error("A=$(foo\n", "x.sh:1: unterminated $( ... )");
    expect_error("X=1\nARGS=(\n --a 1\n", "x.sh:2: unterminated array ARGS=( ... )");
    expect_error("case $X in\n a) B=1 ;;\nesac\n", "x.sh:1: unsupported construct 'case'");
    expect_error("f() {\n echo\n}\n", "x.sh:1: unsupported construct: a function definition NAME()");
    expect_error("source env.sh\n", "x.sh:1: unsupported construct 'source'");
    expect_error(". env.sh\n", "x.sh:1: unsupported construct '.'");
    expect_error("cat <<EOF\nx\nEOF\n", "x.sh:1: unsupported construct: here-document");
    expect_error("(cd a; ls)\n", "x.sh:1: unsupported construct: a subshell");
    expect_error("if [ -n \"$A\" ]; then\n  torchrun pretrain_gpt.py --a 1\nfi\n",
                 "x.sh:2: unsupported construct: a *.py command inside the 'if' block of line 1");
    expect_error("if true; then\n  A=1\n", "x.sh:1: the 'if' block is never closed (no fi)");
    const char nul[] = "A=1\nB=2\0\npython pretrain_gpt.py\n";
    mscript_free(M);
    M = NULL;
    cr_assert_eq(mscript_parse("x.sh", nul, sizeof nul - 1, &M, &E), TS_EINVAL);
    cr_assert(strstr(E.msg, "x.sh:2: a NUL byte"), "%s", E.msg);
}

Test(mscript, blocks_without_assignments_are_skipped)
{
    cr_assert_eq(parse("for d in a b; do\n  mkdir -p $d\ndone\nwhile false; do :; done\n"
                       "if [ -z \"$X\" ]; then echo none; fi\npython pretrain_gpt.py --a 1\n"),
                 TS_OK, "%s", E.msg);
    expect_args("--a 1");
    cr_assert_eq(M->n_unresolved, 0);
}

Test(mscript, missing_file)
{
    cr_assert_eq(load(DIR "no-such-script.sh"), TS_EIO);
    cr_assert(strstr(E.msg, DIR "no-such-script.sh: cannot open the launch script"), "%s", E.msg);
}

/* ---------------------------------------------------------------- flags_parse */

static config C;
static flags_state S;
static opt_table T;

static void ffini(void)
{
    config_free(&C);
    flags_release(&S);
    opt_table_free(&T);
}

TestSuite(mscript_flags, .fini = ffini);

/* flags_parse + flags_finish of "test" and the NULL-terminated arguments. */
static int run(const char *const *args)
{
    const char *argv[32] = {"test"};
    int argc = 1;
    while (*args && argc < 31)
        argv[argc++] = *args++;
    config_free(&C);
    flags_release(&S);
    opt_table_free(&T);
    err_clear(&E);
    opt_table_init(&T, "test", "");
    cr_assert_eq(flags_register(&S, &T, &C, &E), TS_OK, "%s", E.msg);
    int rc = flags_parse(&S, &T, argc, (char **)argv, &E);
    return rc ? rc : flags_finish(&S, &T, &E);
}

/* A temporary script holding text; the caller unlinks *path. */
static void write_script(char *path, size_t n, const char *text)
{
    snprintf(path, n, "/tmp/test_mscript_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    cr_assert_geq(fputs(text, f), 0);
    cr_assert_eq(fclose(f), 0);
}

Test(mscript_flags, script_then_command_line)
{
    const char *a[] = {"--megatron-script", DIR "gpt3_small.sh", NULL};
    cr_assert_eq(run(a), TS_OK, "%s", E.msg);
    cr_assert_eq(C.model.num_layers, 24);
    cr_assert_eq(C.model.hidden_size, 2048);
    cr_assert_eq(C.par.tp, 2);
    cr_assert_eq(C.par.pp, 4);
    cr_assert_eq(C.par.dp, 2);
    cr_assert_eq(C.cluster.gpus, 16, "--gpus from 8 x 2 of the launcher");
    cr_assert_eq(C.par.global_batch_size, 32);
    cr_assert(C.par.sequence_parallel);
    cr_assert_eq(C.par.schedule, SCHED_1F1B, "no virtual stages in the script: Megatron-LM's 1F1B");
    cr_assert_eq(C.par.recompute, RECOMPUTE_SELECTIVE);
    cr_assert_str_eq(S.argv_owned[1], "--num-layers", "the script's arguments come first");
    cr_assert_eq(S.script->n_unresolved, 1);
}

Test(mscript_flags, command_line_overrides)
{
    const char *a[] = {"-t",
                       "4",
                       ("--megatron-script=" DIR "gpt3_small.sh"),
                       "--sequence-parallel=false",
                       "--gpus",
                       "32",
                       "--global-batch-size",
                       "64",
                       "--recompute-granularity",
                       "full",
                       "--num-layers",
                       "48",
                       NULL};
    cr_assert_eq(run(a), TS_OK, "%s", E.msg);
    cr_assert_eq(C.par.tp, 4);
    cr_assert(!C.par.sequence_parallel);
    cr_assert_eq(C.cluster.gpus, 32);
    cr_assert_eq(C.par.global_batch_size, 64);
    cr_assert_eq(C.model.num_layers, 48);
    cr_assert_eq(C.par.recompute, RECOMPUTE_FULL);
    for (int i = 1; S.argv_owned[i]; i++) { /* the script's copies are gone, with their values */
        cr_assert_str_neq(S.argv_owned[i], "--tensor-model-parallel-size");
        cr_assert_str_neq(S.argv_owned[i], "--sequence-parallel");
        cr_assert_str_neq(S.argv_owned[i], "selective");
        cr_assert_str_neq(S.argv_owned[i], "24");
    }
}

Test(mscript_flags, megatron_defaults_not_the_preset)
{
    char path[64];
    write_script(
        path, sizeof path,
        "ARGS=(--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 512 --micro-batch-size 1 "
        "--global-batch-size 16 --num-layers-per-virtual-pipeline-stage 2 -p 2)\n"
        "torchrun --nproc_per_node 8 pretrain_gpt.py ${ARGS[@]}\n");
    const char *a[] = {"--megatron-script", path, NULL};
    int rc = run(a);
    unlink(path);
    cr_assert_eq(rc, TS_OK, "%s", E.msg);
    cr_assert_eq(C.par.tp, 1);
    cr_assert_eq(C.par.pp, 2);
    cr_assert_eq(C.par.schedule, SCHED_INTERLEAVED, "virtual stages given: interleaved");
    cr_assert(!C.par.sequence_parallel);
    cr_assert(!C.par.distributed_optimizer);
    cr_assert_eq(C.par.recompute, RECOMPUTE_NONE);
    cr_assert_eq(C.model.precision, PREC_FP32, "no --bf16/--fp16: Megatron-LM trains in fp32");
    cr_assert_eq(C.cluster.gpus, 8);
}

Test(mscript_flags, unresolved_value_of_a_used_flag_is_fatal)
{
    char path[64];
    write_script(path, sizeof path,
                 "L=$1\n\ntorchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $L --hidden-size 1024 "
                 "--num-attention-heads 8 --seq-length 512 --micro-batch-size 1 \"$@\"\n");
    const char *a[] = {"--megatron-script", path, NULL};
    int rc = run(a);
    cr_assert_eq(rc, TS_EINVAL);
    char want[256];
    snprintf(want, sizeof want,
             "--megatron-script %s:3: flag --num-layers takes '$L', which the script alone does not give (line 3: "
             "$L, from line 1: $1 is an argument of the script",
             path);
    cr_assert(strstr(E.msg, want), "%s", E.msg);
    const char *b[] = {"--megatron-script", path, "--num-layers", "4", NULL};
    rc = run(b);
    unlink(path);
    cr_assert_eq(rc, TS_OK, "given on the command line, and \"$@\" dropped: %s", E.msg);
    cr_assert_eq(C.model.num_layers, 4);
}

Test(mscript_flags, unresolved_world_size_needs_gpus)
{
    char path[64];
    write_script(
        path, sizeof path,
        "torchrun --nproc_per_node 8 --nnodes $NNODES pretrain_gpt.py --fp16 --num-layers 8 --hidden-size 1024 "
        "--num-attention-heads 8 --seq-length 512 --micro-batch-size 1\n");
    const char *a[] = {"--megatron-script", path, NULL};
    int rc = run(a);
    cr_assert_eq(rc, TS_EINVAL);
    cr_assert(strstr(E.msg, "the GPU count is unknown: the launcher's --nnodes is unresolved: line 1: $NNODES is "
                            "never assigned"),
              "%s", E.msg);
    cr_assert(strstr(E.msg, "give --gpus N on the command line"), "%s", E.msg);
    const char *b[] = {"--megatron-script", path, "--gpus", "8", "--global-batch-size", "8", NULL};
    rc = run(b);
    unlink(path);
    cr_assert_eq(rc, TS_OK, "%s", E.msg);
    cr_assert_eq(C.model.precision, PREC_FP16);
}

Test(mscript_flags, script_errors)
{
    const char *a[] = {"--megatron-script", DIR "missing.sh", NULL};
    cr_assert_eq(run(a), TS_EIO);
    cr_assert(strstr(E.msg, "--megatron-script " DIR "missing.sh: cannot open"), "%s", E.msg);
    const char *b[] = {"--megatron-script", DIR "gpt3_small.sh", "--megatron-script=x.sh", NULL};
    cr_assert_eq(run(b), TS_EINVAL);
    cr_assert(strstr(E.msg, "flag --megatron-script given twice"), "%s", E.msg);
    const char *c[] = {"--megatron-script", DIR "gpt3_175b.sh", NULL};
    cr_assert_eq(run(c), TS_EINVAL);
    cr_assert(strstr(E.msg, DIR "gpt3_175b.sh:42: --rampup-batch-size: not modelled"),
              "a Megatron flag trainsim does not model, at its line: %s", E.msg);
}
