#!/usr/bin/env bash
# --megatron-script FILE through the real command line: a Megatron-LM launch
# script (tests/data/scripts/) read, never run, by config, simulate, search,
# a sweep column and trainexec; command-line flags override the script's;
# notes on what the script left unresolved; refusals with file:line.
# tests/data/scripts/gpt3_small.sh holds only flags trainsim knows; the full
# example scripts are refused for the Megatron-LM flags trainsim does not model,
# and resolve field by field as Megatron-LM would without them. Ends with
# "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
S=tests/data/scripts

# --- trainsim config: the script's model and layout, --gpus from the launcher
out=$($T config --megatron-script $S/gpt3_small.sh 2>"$tmp/err"); rc=$?
check "config --megatron-script exits 0" test $rc -eq 0
check_sh "layout and GPUs from the script" '[[ "$out" == *"t=2 p=4 d=2 v=1 (16 GPUs = 2 x 4 x 2)"* ]]'
check_sh "shape from the script" '[[ "$out" == *"24 layers, hidden 2048, 16 heads"* ]]'
check_sh "batch from the script" '[[ "$out" == *"micro-batch 2, global batch 32 sequences"* ]]'
check_sh "1F1B: the script gives no virtual stages" '[[ "$out" == *"schedule:              1f1b"* ]]'
check_sh "note on stderr: what was not resolved, with its line" \
    'grep -qF "trainsim config: note: --megatron-script $S/gpt3_small.sh: line 23: \$NODE_RANK, from line 12: \$SLURM_NODEID is never assigned" "$tmp/err"'
expect_output "t=2 p=4 d=2" $T config --megatron-script=$S/gpt3_small.sh

# --- the command line overrides the script, whatever the order
expect_output "t=4 p=4 d=2 v=1 (32 GPUs = 4 x 4 x 2)" \
    $T config -t 4 --megatron-script $S/gpt3_small.sh --gpus 32 --global-batch-size 64
expect_output "sequence parallel:     off" $T config --megatron-script $S/gpt3_small.sh --sequence-parallel=false
expect_output "recompute:             full" $T config --megatron-script $S/gpt3_small.sh --recompute-granularity full
expect_output "48 layers" $T config --megatron-script $S/gpt3_small.sh --num-layers 48
expect_output "H100-SXM5-80GB" $T config --megatron-script $S/gpt3_small.sh --gpu h100

# --- simulate
out=$($T simulate --megatron-script $S/gpt3_small.sh 2>"$tmp/err"); rc=$?
check "simulate --megatron-script exits 0" test $rc -eq 0
check_sh "simulate reports the iteration" '[[ "$out" == *"iteration"* ]]'
check_sh "simulate notes what was not resolved" 'grep -qF "trainsim simulate: note: --megatron-script" "$tmp/err"'

# --- search: model, GPUs, GPU kind and batch from the script; its own flags override
out=$($T search --megatron-script $S/gpt3_small.sh --quiet --top 1 2>&1); rc=$?
check "search --megatron-script exits 0" test $rc -eq 0
check_sh "search: 16 GPUs and batch 32 from the script" \
    '[[ "$out" == *"gpt3-175b (modified) on 16 x A100-SXM4-80GB, global batch 32"* ]]'
out=$($T search --megatron-script $S/gpt3_small.sh --gpus 32 --gpu h100 --global-batch-size 64 --quiet --top 1 2>&1)
check_sh "search flags override the script" '[[ "$out" == *"on 32 x H100-SXM5-80GB, global batch 64"* ]]'
expect_error 2 "--megatron-script $S/gpt3_175b.sh:42: --rampup-batch-size: not modelled" \
    $T search --megatron-script $S/gpt3_175b.sh --quiet
expect_error 1 "cannot open the launch script" $T search --megatron-script "$tmp/none.sh" --quiet
expect_error 2 "--megatron-script $S/gpt3_small.sh: --gpus 12 is not a multiple of" \
    $T search --megatron-script $S/gpt3_small.sh --gpus 12 --quiet

# --- sweep: a megatron_script column (underscores stand for dashes)
{
    echo "megatron_script,global_batch_size,tensor-model-parallel-size"
    echo "$S/gpt3_small.sh,,"
    echo "$S/gpt3_small.sh,64,4"
    echo "$S/gpt3_175b.sh,,"
} >"$tmp/in.csv"
$T sweep "$tmp/in.csv" --out "$tmp/out.csv" --threads 2 >/dev/null 2>&1
check "sweep: two script rows ok" test "$(grep -c ',ok,' "$tmp/out.csv")" -eq 2
check "sweep: the full example refused in its row" grep -q 'gpt3_175b.sh,,,error,.*rampup-batch-size: not modelled' "$tmp/out.csv"
check_sh "sweep: the row's override changed the result" \
    '[ "$(grep ",ok," "$tmp/out.csv" | cut -d, -f6 | sort -u | wc -l)" -eq 2 ]'

# --- the example scripts as Megatron-LM's examples write them: every flag trainsim does not
# model is named at once, with the first one's file:line
expect_error 2 "--megatron-script $S/gpt3_175b.sh:42: --rampup-batch-size: not modelled" \
    $T config --megatron-script $S/gpt3_175b.sh --gpus 1024
expect_error 2 "--megatron-script $S/llama3_8b.sh:91: --manual-gc: not modelled" \
    $T simulate --megatron-script $S/llama3_8b.sh
expect_error 2 "also not modelled: --empty-unused-memory-level" \
    $T simulate --megatron-script $S/llama3_8b.sh
# Megatron-LM accepts the deprecated --no-position-embedding only with rope (the Mixtral example's)
$T config --megatron-script $S/mixtral_8x7b.sh --gpus 64 >/dev/null 2>&1
check "mixtral_8x7b.sh (rope with --no-position-embedding) resolves" test $? -eq 0
expect_error 2 "--no-position-embedding with --position-embedding-type learned_absolute: Megatron-LM refuses it" \
    $T config --megatron-script $S/gpt3_small.sh --no-position-embedding

# --- the same scripts less those flags resolve to exactly what Megatron-LM runs, field by
# field (config's "where each value came from" table: value and source)
field() { # OUT FLAG VALUE SOURCE-PREFIX
    if grep -qE -- "^  $2 +$3( \([^)]*\))? +$4" <<<"$1"; then ok; else bad "$2: want '$3' from '$4' in: $(grep -- "^  $2 " <<<"$1")"; fi
}
grep -v -- '--rampup-batch-size' $S/gpt3_175b.sh >"$tmp/gpt3.sh"
out=$($T config --megatron-script "$tmp/gpt3.sh" --gpus 1024 2>/dev/null); rc=$?
check "gpt3_175b.sh less the unmodelled flags: config exits 0" test $rc -eq 0
for f in "--num-layers 96 flag" "--hidden-size 12288 flag" "--num-attention-heads 96 flag" \
         "--kv-channels 128 derived" "--num-query-groups 96 derived" "--ffn-hidden-size 49152 derived" \
         "--swiglu off Megatron-LM" "--seq-length 2048 flag" "--max-position-embeddings 2048 flag" \
         "--attention-dropout 0.1 Megatron-LM" "--hidden-dropout 0.1 Megatron-LM" "--vocab-size 50257 Megatron-LM" \
         "--padded-vocab-size 51200 derived" "--untie-embeddings-and-output-weights off Megatron-LM" \
         "--disable-bias-linear off Megatron-LM" "--normalization LayerNorm Megatron-LM" \
         "--position-embedding-type learned_absolute Megatron-LM" "--bf16/--fp16/--fp32 fp16 flag" \
         "--micro-batch-size 1 flag" "--global-batch-size 1536 flag" "--tensor-model-parallel-size 8 flag" \
         "--pipeline-model-parallel-size 16 flag" "--data-parallel-size 8 derived" \
         "--sequence-parallel off Megatron-LM" "--recompute-granularity none Megatron-LM" \
         "--use-distributed-optimizer off Megatron-LM" "--overlap-grad-reduce off Megatron-LM" \
         "--schedule 1f1b Megatron-LM" "--gpus 1024 flag" "--attention-backend flash derived" \
         "--recompute-modules core_attn Megatron-LM"; do
    read -r fl v src <<<"$f"; field "$out" "$fl" "$v" "$src"
done
grep -v -- '--cross-entropy-loss-fusion\|--manual-gc\|--empty-unused-memory-level\|--overlap-param-gather\|--no-create-attention-mask-in-dataloader' \
    $S/llama3_8b.sh >"$tmp/llama3.sh"
out=$($T config --megatron-script "$tmp/llama3.sh" 2>/dev/null); rc=$?
check "llama3_8b.sh less the unmodelled flags: config exits 0" test $rc -eq 0
for f in "--num-layers 32 flag" "--hidden-size 4096 flag" "--num-attention-heads 32 flag" "--kv-channels 128 flag" \
         "--num-query-groups 8 flag" "--ffn-hidden-size 14336 flag" "--swiglu on flag" "--seq-length 8192 flag" \
         "--attention-dropout 0 flag" "--hidden-dropout 0 flag" "--vocab-size 128256 flag" \
         "--padded-vocab-size 128256 derived" "--untie-embeddings-and-output-weights on flag" \
         "--disable-bias-linear on flag" "--normalization RMSNorm flag" "--position-embedding-type rope flag" \
         "--attention-backend fused flag" \
         "--bf16/--fp16/--fp32 bf16 flag" "--micro-batch-size 1 flag" "--global-batch-size 128 flag" \
         "--tensor-model-parallel-size 1 flag" "--pipeline-model-parallel-size 1 flag" "--data-parallel-size 8 derived" \
         "--sequence-parallel off" "--recompute-granularity none Megatron-LM" "--use-distributed-optimizer on flag" \
         "--overlap-grad-reduce on flag" "--schedule 1f1b Megatron-LM" "--gpus 8 flag"; do
    read -r fl v src <<<"$f"; field "$out" "$fl" "$v" "${src:-}"
done
expect_error 2 "unknown flag '--bogus'; did you mean" $T config --megatron-script $S/gpt3_small.sh --bogus
$T config --megatron-script $S/mixtral_8x7b.sh --gpus 64 >/dev/null 2>"$tmp/err"
check "mixtral: the skipped 'if' block is noted" \
    grep -qF "lines 104-109: the 'if' block was not run (trainsim runs no conditions or loops); its assignments to LOGGING_ARGS were not made" "$tmp/err"

# --- errors: file:line, the flag, what would be valid
expect_error 1 "--megatron-script $tmp/none.sh: cannot open the launch script" $T config --megatron-script "$tmp/none.sh"
printf 'L=$1\nARGS=(--num-layers $L)\ntorchrun --nproc_per_node 8 pretrain_gpt.py ${ARGS[@]}\n' >"$tmp/unres.sh"
expect_error 2 "--megatron-script $tmp/unres.sh:2: flag --num-layers takes '\$L', which the script alone does not give" \
    $T config --megatron-script "$tmp/unres.sh"
expect_output "96 layers" $T config --megatron-script "$tmp/unres.sh" --num-layers 96 \
    --hidden-size 1024 --num-attention-heads 8 --seq-length 512 --micro-batch-size 1
printf 'A=1\necho $A\n' >"$tmp/nolaunch.sh"
expect_error 2 "--megatron-script $tmp/nolaunch.sh: no launcher line" $T simulate --megatron-script "$tmp/nolaunch.sh"
printf 'ARGS=(\n  --num-layers 4\ntorchrun pretrain_gpt.py ${ARGS[@]}\n' >"$tmp/open.sh"
expect_error 2 "$tmp/open.sh:1: unterminated array ARGS=( ... )" $T config --megatron-script "$tmp/open.sh"
printf 'torchrun --nproc_per_node 8 --nnodes $N pretrain_gpt.py --fp16 --num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 512 --micro-batch-size 1\n' >"$tmp/world.sh"
expect_error 2 "the GPU count is unknown" $T config --megatron-script "$tmp/world.sh"
expect_output "precision:             fp16" $T config --megatron-script "$tmp/world.sh" --gpus 8 --global-batch-size 8
expect_error 2 "flag --megatron-script given twice" $T config --megatron-script $S/gpt3_small.sh --megatron-script=x.sh
expect_output "--megatron-script FILE" $T config --help

# --- trainexec: the script's shape and layout run for real (ranks = --gpus)
if [ -x "${TRAINEXEC:-}" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    printf '%s\n' 'GPUS_PER_NODE=2' 'ARGS=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16' \
        '  --padded-vocab-size 64 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 4 --fp16)' \
        'torchrun --nproc_per_node $GPUS_PER_NODE --master_addr $MASTER_ADDR pretrain_gpt.py ${ARGS[@]}' >"$tmp/cpu.sh"
    out=$(timeout 120 mpirun --oversubscribe -np 2 "$TRAINEXEC" --megatron-script "$tmp/cpu.sh" --iterations 1 \
        --warmup 0 2>&1); rc=$?
    check "trainexec --megatron-script exits 0" test $rc -eq 0
    check_sh "trainexec: the script's shape and layout" '[[ "$out" == *"(L=4 h=32 heads=4 ffn=128 s=16 V=64), t=1 p=2 d=1"* ]]'
    check_sh "trainexec rank 0 notes the unresolved once" \
        '[ "$(grep -c "trainexec: note: --megatron-script .*MASTER_ADDR is never assigned" <<<"$out")" -eq 1 ]'
else
    echo "trainexec checks skipped: no trainexec or mpirun"
fi

finish
