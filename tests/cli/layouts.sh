#!/usr/bin/env bash
# Pipeline layouts: --pipeline-model-parallel-layout (Llama 3 405B's
# published layout), the account-for-embedding/loss split it equals,
# --decoder-first/last-pipeline-num-layers with interleaving, in trainsim
# config, simulate and schedule; errors name the position in the string.
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

L405='Et*3|(t*4|)*30t*3L'
# full recomputation so that every run fits in 80 GB (simulate exits 3 otherwise)
A=(--model llama3-405b -p 16 -t 8 --schedule interleaved --recompute-granularity full)

# config prints the layers per virtual stage compactly
expect_output "layers per stage:      3 4x30 3 (32 virtual stages" \
    "$TRAINSIM" config "${A[@]}" --num-layers 126 --pipeline-model-parallel-layout "$L405"
expect_output "schedule:              interleaved (2 chunks per rank)" \
    "$TRAINSIM" config "${A[@]}" --num-layers 126 --pipeline-model-parallel-layout "$L405"

# simulate runs the layout; the account-for form is the same split, so the
# same output byte for byte
if "$TRAINSIM" simulate "${A[@]}" --num-layers 126 --pipeline-model-parallel-layout "$L405" >"$tmp/layout.txt" 2>&1; then
    ok "simulate llama3-405b with the published layout"
else bad "simulate with $L405: $(head -c 300 "$tmp/layout.txt")"; fi
"$TRAINSIM" simulate "${A[@]}" --num-layers 126 --num-virtual-stages-per-pipeline-rank 2 \
    --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split >"$tmp/account.txt" 2>&1
check "account-for-embedding/loss gives the same simulation as the layout string" cmp -s "$tmp/layout.txt" "$tmp/account.txt"

# Its iteration time against the even split of 128 layers (8 layers per
# rank everywhere): 2 layers fewer (126/128 = 0.984), and the first and the
# last rank, which also hold the embedding and the 128K-vocabulary output
# layer, lighter by a layer, which shortens the critical path. Band
# [0.85, 1.0]: the layout must not be slower than the larger model, and
# not implausibly faster (measured 0.950).
"$TRAINSIM" simulate "${A[@]}" --num-layers 128 --num-virtual-stages-per-pipeline-rank 2 >"$tmp/even.txt" 2>&1
t_lay=$(awk '/^iteration time/ {print $3}' "$tmp/layout.txt")
t_even=$(awk '/^iteration time/ {print $3}' "$tmp/even.txt")
check_sh "iteration time $t_lay s within [0.85, 1.0] x the even 128-layer split's $t_even s" \
    'awk -v a="$t_lay" -v b="$t_even" "BEGIN { r = a / b; exit !(a > 0 && b > 0 && r >= 0.85 && r <= 1.0) }"'

# first/last stage layers with interleaving, as Megatron-core: whole ranks,
# so rank 0 (stages 0, 16) and rank 15 (stages 15, 31) hold 3 layers per chunk
expect_output "layers per stage:      3 4x14 3x2 4x14 3" \
    "$TRAINSIM" config "${A[@]}" --num-layers 124 --num-virtual-stages-per-pipeline-rank 2 \
    --decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 6
expect_output "iteration time" "$TRAINSIM" simulate "${A[@]}" --num-layers 124 \
    --num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 6

# errors: exit 2, the position in the string, what is valid
expect_error 2 "position 6 ('('): this '(' is never closed" \
    "$TRAINSIM" simulate "${A[@]}" --num-layers 126 --pipeline-model-parallel-layout 'Et*3|(t*4|*30t*3L'
expect_error 2 "its stages hold 126 transformer layers (t) but --num-layers is 128" \
    "$TRAINSIM" simulate "${A[@]}" --num-layers 128 --pipeline-model-parallel-layout "$L405"
expect_error 2 "32 virtual stages is not a multiple of --pipeline-model-parallel-size 12" \
    "$TRAINSIM" config --model llama3-405b -p 12 -t 8 --gpus 96 --global-batch-size 96 --schedule interleaved \
    --num-layers 126 --pipeline-model-parallel-layout "$L405"
expect_error 2 "--schedule 1f1b runs one chunk per pipeline rank" \
    "$TRAINSIM" simulate --model llama3-405b -p 16 -t 8 --schedule 1f1b --num-layers 126 \
    --pipeline-model-parallel-layout "$L405"
expect_error 2 "E must be in the first stage" \
    "$TRAINSIM" config "${A[@]}" --num-layers 126 --pipeline-model-parallel-layout 't*3|E(t*4|)*30t*3L'

# trainsim schedule takes the layout too (v from the stage count)
expect_output "valid: interleaved p=16 m=32 v=2" \
    "$TRAINSIM" schedule --schedule interleaved -p 16 -m 32 --pipeline-model-parallel-layout "$L405" --validate-only
expect_error 2 "--num-virtual-stages-per-pipeline-rank is 4" \
    "$TRAINSIM" schedule --schedule interleaved -p 16 -m 32 -v 4 --pipeline-model-parallel-layout "$L405" --validate-only

finish
