#!/usr/bin/env bash
# Inputs through the real command line (trainsim config): the default run,
# help text with units and defaults, presets, and bad input answered with a
# message and a non-zero exit (never a crash). Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_ok "--model gpt3-175b ARGS" "substring of the output": config ARGS exits 0 and prints it
expect_ok() { expect_output "$2" $T config $1; }

# Subcommands that take the shared flags: config always; simulate once it exists.
cmds=(config)
if $T simulate --help >/dev/null 2>&1; then cmds+=(simulate); fi

# expect_err "--model gpt3-175b ARGS" EXIT "substring of stderr": config exits EXIT; every other
# subcommand in cmds must fail too (non-zero, neither a timeout nor a signal)
# with the same message. One check per subcommand.
expect_err() {
    local out rc c
    expect_error "$2" "$3" timeout 60 $T config $1
    for c in "${cmds[@]:1}"; do
        out=$(timeout 60 $T $c $1 2>&1 >/dev/null); rc=$?
        if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then bad "$c $1: exit $rc, want a failure ($out)"; continue; fi
        if ! grep -qF -- "$3" <<<"$out"; then bad "$c $1: no '$3' in: $out"; continue; fi
        ok
    done
}

# --- the default and presets
expect_ok "" "parallelism:           t=8 p=16 d=8 v=2 (1024 GPUs = 8 x 16 x 8)"
expect_ok "" "gpu:                   A100-SXM4-80GB"
expect_ok "" "128 nodes x 8 A100-SXM4-80GB"
expect_ok "--model megatron-39.1b" "t=8 p=2 d=32 v=2 (512 GPUs"
expect_ok "--model llama3-405b" "uneven split:          first stage 7 layers, last stage 7 layers"
expect_ok "--global-batch-size 512 --model megatron-1.7b" "global batch 512 sequences, 16 micro-batches"
expect_ok "--model gpt3-175b --topology topologies/dgx-h200-cluster.csv" "H200-SXM-141GB"
expect_ok "--list-models" "bloom-176b"
expect_ok "--list-gpus" "H100-SXM5-80GB"

# --- golden outputs: same inputs, same output, byte for byte
golden() { # "ARGS" FILE
    if $T config $1 2>&1 | diff -u "tests/golden/$2" - >"$tmp/diff"; then ok; else bad "config $1 differs from tests/golden/$2:"; cat "$tmp/diff"; fi
}
golden "" config-default.txt
golden "--model llama3-405b --topology topologies/dgx-h100-cluster.csv" config-llama3-405b-h100.txt

# --- help: every flag with unit and default
help=$($T config --help); rc=$?
if [ $rc -eq 0 ]; then ok; else bad "config --help exit $rc"; fi
for f in --model --num-layers --hidden-size --num-attention-heads --ffn-hidden-size --num-query-groups --swiglu \
         --seq-length --padded-vocab-size --micro-batch-size --global-batch-size --tensor-model-parallel-size \
         --pipeline-model-parallel-size --num-layers-per-virtual-pipeline-stage --sequence-parallel \
         --recompute-granularity --recompute-method --recompute-num-layers --use-distributed-optimizer \
         --overlap-grad-reduce --bf16 --fp16 --gpus --topology --gpu --schedule; do
    if grep -qE -- "^  (-[a-z], )?$f( |$)" <<<"$help"; then ok; else bad "--help lacks $f"; fi
done
n_flags=$(grep -cE '^  (-[a-z], )?--' <<<"$help")
n_units=$(grep -cE '^      unit: .*; default: ' <<<"$help")
# every flag but --help itself has a unit/default line
if [ "$n_units" -eq $((n_flags - 1)) ]; then ok; else bad "--help: $n_flags flags but $n_units unit/default lines"; fi
if grep -qF "unit: sequences; default: b x d" <<<"$help"; then ok; else bad "--help: global batch unit/default"; fi
if grep -qF "[gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v|dualpipev|dualpipe]" <<<"$help"; then ok; else bad "--help: schedule names"; fi

# --- bad flags
expect_err "--num-layer 4" 2 "unknown flag '--num-layer'; did you mean --num-layers?"
expect_err "--hidden-size" 2 "flag --hidden-size: missing value"
expect_err "--model gpt3-175b --hidden-size 12k" 2 "flag --hidden-size: '12k' is not an integer"
expect_err "--model gpt3-175b --micro-batch-size 0" 2 "flag --micro-batch-size: 0 is out of range (valid: 1 to"
expect_err "--model gpt3-175b --schedule 2f2b" 2 "valid: gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v"
expect_err "--model gpt3-175b --gpus 8 --gpus 16" 2 "flag --gpus given twice"
expect_err "stray" 2 "unexpected argument 'stray'"

# --- bad configurations
expect_err "--model gpt3-175b --hidden-size 1000" 2 "--hidden-size 1000 is not divisible by --num-attention-heads 96"
expect_err "--model llama2-13b -t 16 --gpus 128" 2 "--num-attention-heads 40 is not divisible by --tensor-model-parallel-size 16"
expect_err "--model llama2-70b -t 16 -p 2" 2 "--num-query-groups 8 is not divisible by --tensor-model-parallel-size 16"
expect_err "--model gpt3-175b --num-layers 90 --schedule 1f1b" 2 "--num-layers 90 is not divisible by --pipeline-model-parallel-size 16"
expect_err "--model gpt3-175b --num-layers-per-virtual-pipeline-stage 5" 2 "= 16 x 5 = 80"
expect_err "--model gpt3-175b --global-batch-size 1540" 2 "--global-batch-size 1540 is not divisible by --micro-batch-size x data-parallel size"
expect_err "--model gpt3-175b --gpus 1000" 2 "--gpus 1000 is not a multiple of"
expect_err "--model gpt3-175b -d 4" 2 "--gpus 1024 != t x p x d = 8 x 16 x 4 = 512"
expect_err "--model gpt3-175b --schedule zb-v --num-layers-per-virtual-pipeline-stage 2" 2 "zb-v runs exactly 2 chunks"
expect_err "--model gpt3-175b --gpu X100" 2 "unknown GPU kind 'X100' (valid: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM-141GB, B200-SXM-180GB, GB200-186GB"
expect_err "--model llama-7b" 2 "unknown model 'llama-7b'; nearest: llama2-7b"

# --- bad topology files (file:line and column)
hdr="nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,nic_latency_us,fabric,levels,oversubscription"
printf '# test\n%s\n16,8,a100,300,0.6,8,-25,0.6,fat-tree,2,1\n' "$hdr" >"$tmp/neg.csv"
expect_err "--model gpt3-175b --topology $tmp/neg.csv --gpus 128" 2 "$tmp/neg.csv:3: column 'nic_gbps': -25 is out of range (expected a number in [0.001, 1e+06])"
printf '%s\n16,8,a100,300,0.6,8,abc,0.6,fat-tree,2,1\n' "$hdr" >"$tmp/nan.csv"
expect_err "--model gpt3-175b --topology $tmp/nan.csv --gpus 128" 2 "$tmp/nan.csv:2: column 'nic_gbps': 'abc' is not a number"
printf '%s\n16,8,MI300X,300,0.6,8,25,0.6,fat-tree,2,1\n' "$hdr" >"$tmp/gpu.csv"
expect_err "--model gpt3-175b --topology $tmp/gpu.csv --gpus 128" 2 "$tmp/gpu.csv:2: column 'gpu': unknown GPU kind 'MI300X'"
printf 'nodes,gpus_per_node\n16,8\n' >"$tmp/col.csv"
expect_err "--model gpt3-175b --topology $tmp/col.csv" 2 "$tmp/col.csv:1: missing column 'gpu'"
: >"$tmp/empty.csv"
expect_err "--model gpt3-175b --topology $tmp/empty.csv" 2 "$tmp/empty.csv: empty: no header row"
printf 'endpoint_a,endpoint_b,bandwidth_gbps,latency_us,kind\ngpu0.0,gpu0.1,300,0.3,nvlink\ngpu0.1,gpu0.0,300,0.3,nvlink\n' >"$tmp/dup.csv"
expect_err "--model gpt3-175b --topology $tmp/dup.csv --gpus 2" 2 "$tmp/dup.csv:3: duplicate link gpu0.1 - gpu0.0 (first at line 2"
printf 'endpoint_a,endpoint_b,bandwidth_gbps,latency_us,kind\ngpu0.0,gpu0.1,300,0.3,nvlink\ngpu0.1,sw1.0,25,0.3,fabric\nsw1.0,sw2.0,25,0.3,fabric\nsw3.0,sw3.1,25,0.3,fabric\n' >"$tmp/dangle.csv"
expect_err "--model gpt3-175b --topology $tmp/dangle.csv --gpus 2" 2 "$tmp/dangle.csv:5: dangling link: sw3.0 (first named here) is not connected"
expect_err "--model gpt3-175b --topology $tmp/missing.csv" 1 "$tmp/missing.csv: cannot open"

# --- Megatron-LM flags trainsim does not model (topologies/megatron_flags.csv)
# ignored: dropped with their values, named on one stderr line, the output unchanged
base=$($T config --model gpt3-175b 2>/dev/null)
out=$($T config --model gpt3-175b --lr 1e-4 --data-path x --log-interval 10 2>"$tmp/err"); rc=$?
check_sh "ignored flags: exit 0, the same configuration" '[ $rc -eq 0 ] && [ "$out" = "$base" ]'
check_sh "ignored flags: one stderr line naming them" \
    '[ "$(cat "$tmp/err")" = "ignored (cannot change performance): --lr, --data-path, --log-interval" ]'
expect_ok "--model gpt3-175b --data-path 0.3 a -0.7 b --lr=1e-4 --num-layers 192" "shape:                 192 layers"
expect_output "ignored (cannot change performance): --lr, --save" $T simulate --model megatron-1.7b --lr 1 --save ckpt
# refused: exit 2 naming what the flag changes, through every subcommand
expect_err "--moe-apply-probs-on-input" 2 "--moe-apply-probs-on-input: not modelled: mixture of experts (Megatron-LM flag; remove it or see docs/inputs.md#megatron-flags)"
expect_err "--fp8-output-proj" 2 "--fp8-output-proj: not modelled: FP8 training"
expect_err "--lr 1e-4 --tp-comm-overlap-rs-dgrad" 2 "--tp-comm-overlap-rs-dgrad: not modelled: tensor-parallel communication overlap"
expect_err "--use-cpu-initialization=1" 2 "--use-cpu-initialization: takes no value"
expect_err "--lr" 2 "--lr: missing value"
# default-only: silent at Megatron's default, refused at any other value
out=$($T config --model gpt3-175b --cpu-offloading-num-layers 0 --cuda-graph-impl=none 2>&1 >/dev/null); rc=$?
check_sh "default-only flags at their default: exit 0, nothing said" '[ $rc -eq 0 ] && [ -z "$out" ]'
expect_err "--cpu-offloading-num-layers 2" 2 "--cpu-offloading-num-layers 2: not modelled: activation or weight offloading to CPU (Megatron-LM flag; trainsim accepts only --cpu-offloading-num-layers 0"
expect_err "--model gpt3-175b --attention-backend sdpa" 2 "--attention-backend"
expect_err "--model gpt3-175b --attention-backend flash --fp32" 2 "--attention-backend flash needs --bf16 or --fp16"
expect_err "--model gpt3-175b --use-flash-attn --attention-backend unfused" 2 "--use-flash-attn means --attention-backend flash"
expect_err "--model gpt3-175b --recompute-granularity selective --recompute-modules moe" 2 "--recompute-modules moe: not modelled without --num-experts (moe: also --moe-layer-recompute) (valid: core_attn, mlp, layernorm; moe, moe_act with --num-experts; mla_up_proj with --multi-latent-attention)"
expect_err "--model gpt3-175b --recompute-granularity selective --recompute-modules core_attn bogus" 2 "unknown module 'bogus'"
expect_err "--model gpt3-175b --recompute-granularity full --recompute-modules mlp" 2 "--recompute-modules applies to --recompute-granularity selective only"
# neither modelled nor in the file: the unknown-flag error as before
expect_err "--max-positon-embeddings 2048" 2 "unknown flag '--max-positon-embeddings'"
# the whole table: one line per flag, then the counts, which add up
out=$($T config --megatron-flags); rc=$?
last=$(tail -n 1 <<<"$out")
check_sh "config --megatron-flags: exit 0 and the count line" \
    '[ $rc -eq 0 ] && [[ "$last" =~ ^[0-9]+\ modelled,\ [0-9]+\ refused,\ [0-9]+\ ignored,\ [0-9]+\ default-only$ ]]'
sum=$(awk '{n += $1} END {print n}' RS=', ' <<<"$last")
check_sh "config --megatron-flags: the counts add up to the rows" '[ "$sum" -eq $(($(wc -l <<<"$out") - 1)) ]'
check_sh "config --megatron-flags: modelled, refused and ignored rows" \
    '[[ "$out" == *"--num-layers "*modelled* && "$out" == *"--moe-apply-probs-on-input "*refused*"mixture of experts"* && "$out" == *"--lr "*ignored* ]]'
doc=$(sed -n '/^<!-- megatron-flags begin -->$/,/^<!-- megatron-flags end -->$/p' docs/inputs.md | sed '1d;$d')
check_sh "docs/inputs.md: the Megatron flag tables are up to date (bash docs/megatron-flags.sh --update)" \
    '[ "$doc" = "$(bash docs/megatron-flags.sh "$T")" ]'

# --- numbers that stay in range
# --seq-length 2^24 x 128 heads x micro-batch 128: one layer's activations pass 2^62
# bytes; refused naming the flags (they wrapped to a negative size before)
big=(--seq-length 16777216 --max-position-embeddings 16777216 --num-attention-heads 128 --hidden-size 16384
     --micro-batch-size 128 --global-batch-size 128 --num-layers 2 --gpus 8 --tensor-model-parallel-size 8)
expect_error 2 "--seq-length 16777216, --micro-batch-size 128, --num-attention-heads 128, --hidden-size 16384: one layer's activations would take" \
    timeout 60 $T simulate "${big[@]}"
# a GPU catalogue's hbm_gib of 1e30 is out of its physical range (it printed a negative size)
mkdir -p "$tmp/data" && cp topologies/*.csv "$tmp/data/"
awk -F, -v OFS=, '/^#/ || NR == 1 {print; next} !done && $1 != "gpu" {for (i = 1; i <= NF; i++) if (hc == i) $i = "1e30"; done = 1} $1 == "gpu" {for (i = 1; i <= NF; i++) if ($i == "hbm_gib") hc = i} {print}' \
    topologies/gpus.csv >"$tmp/data/gpus.csv"
expect_error 2 "column 'hbm_gib': 1e30 is out of range (expected a number in (0, 100000])" \
    env TRAINSIM_DATA_DIR="$tmp/data" $T config --list-gpus

# --- the catalogue is found from another directory (via the executable's path)
abs=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
out=$(cd "$tmp" && "$abs" config 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "gpt3-175b" <<<"$out"; then ok; else bad "config from another directory: $out"; fi
out=$(TRAINSIM_DATA_DIR=$tmp $T config 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF "models.csv not found: looked in $tmp/models.csv" <<<"$out"; then ok; else bad "TRAINSIM_DATA_DIR: $out"; fi

finish
