#!/usr/bin/env bash
# Context parallelism (--context-parallel-size, --cp-comm-type,
# --hierarchical-context-parallel-sizes): Megatron-core's rules as exit-2
# errors, a golden of a CP simulation, the llama3-405b-128k preset fitting
# 80 GB, a slower NVLink never making a CP run faster, and the network
# model's flows agreeing with the default mode on that preset
# (tests/cli/net_cp.sh has the flow modes' checks).
# Regenerate the golden deliberately: UPDATE_GOLDEN=1 bash tests/cli/context_parallel.sh
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
G=tests/golden/sim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# a small GQA model on one DGX H100 node: t 2 x cp 4 (NVLink ring)
B=(--num-layers 4 --hidden-size 2048 --num-attention-heads 16 --group-query-attention --micro-batch-size 1 --global-batch-size 8 --bf16 --padded-vocab-size 32768
    --gpu H100-SXM5-80GB --gpus 8 -t 2 --sequence-parallel)
S=("${B[@]}" --num-query-groups 4 --seq-length 16384)

# errors: exit 2 with what would be valid
expect_error 2 "not divisible by 2 x --context-parallel-size = 8" \
    "$TRAINSIM" simulate "${B[@]}" --num-query-groups 4 --context-parallel-size 4 --seq-length 16380
expect_error 2 "needs --attention-backend flash or fused" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --attention-backend unfused
expect_error 2 "must both be divisible by 4" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --cp-comm-type a2a
expect_error 2 "needs --hierarchical-context-parallel-sizes A P with A x P" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --cp-comm-type a2a+p2p
expect_error 2 "applies to a2a+p2p only" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --hierarchical-context-parallel-sizes 2 2
expect_error 2 "not a multiple of t x cp x p" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 3
expect_error 2 "--context-parallel-size" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 0
expect_error 2 "two levels are modelled" \
    "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 1 2 2
# the flow modes run the K,V exchange as flows over the context-parallel groups (cp 16 over 16 nodes here)
if "$TRAINSIM" simulate --model llama3-405b-128k --gpu H100-SXM5-80GB >"$tmp/cp-def.txt" 2>&1 &&
    "$TRAINSIM" simulate --model llama3-405b-128k --gpu H100-SXM5-80GB --network-flows >"$tmp/cp-net.txt" 2>&1; then
    a=$(sed -n 's/^iteration time *\([0-9.]*\) s$/\1/p' "$tmp/cp-def.txt")
    b=$(sed -n 's/^iteration time *\([0-9.]*\) s$/\1/p' "$tmp/cp-net.txt")
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b / a >= 0.99 && b / a <= 1.01) }' &&
        ok "llama3-405b-128k with --network-flows: $b s against the default mode's $a s (within 1%)" ||
        bad "llama3-405b-128k with --network-flows: '$b' s against the default mode's '$a' s (want within 1%)"
else
    bad "llama3-405b-128k: $(tail -n 1 "$tmp/cp-def.txt") / $(tail -n 1 "$tmp/cp-net.txt")"
fi

# every comm type runs (a2a kinds on 16 query groups: heads / t divisible by cp)
for k in p2p all_gather; do
    expect_output "context parallel" "$TRAINSIM" config "${S[@]}" --context-parallel-size 4 --cp-comm-type $k
    if "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --cp-comm-type $k >"$tmp/$k.txt" 2>&1; then ok "simulate cp 4 $k"
    else bad "simulate cp 4 $k: $(head -c 300 "$tmp/$k.txt")"; fi
done
for k in "a2a" "a2a+p2p --hierarchical-context-parallel-sizes 2 2"; do
    # shellcheck disable=SC2086
    if "$TRAINSIM" simulate "${B[@]}" --seq-length 16384 --num-query-groups 16 --context-parallel-size 4 --cp-comm-type $k >"$tmp/a.txt" 2>&1; then
        ok "simulate cp 4 $k"
    else bad "simulate cp 4 $k: $(head -c 300 "$tmp/a.txt")"; fi
done

# the golden of a CP run
if "$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --csv "$tmp/cp.csv" >"$tmp/cp.txt" 2>"$tmp/cp.err"; then
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
        cp "$tmp/cp.txt" "$G/small-cp4.txt" && cp "$tmp/cp.csv" "$G/small-cp4.csv" && ok "small-cp4: golden regenerated"
    else
        for ext in txt csv; do
            if cmp -s "$tmp/cp.$ext" "$G/small-cp4.$ext"; then ok "small-cp4.$ext matches the golden"
            else bad "small-cp4.$ext differs:"; diff "$G/small-cp4.$ext" "$tmp/cp.$ext" | head -n 20; fi
        done
    fi
else bad "small-cp4: exit $? ($(head -c 300 "$tmp/cp.err"))"; fi

# dense gradients are reduced over d x cp: d = 1 here, yet the cp 4 run has a reduction
dp_busy=$(awk '/^communication per GPU/ {for (i = 1; i <= NF; i++) if ($i == "DP") {print $(i + 1); exit}}' "$tmp/cp.txt")
check_sh "d 1 x cp 4: the gradient reduction over the 4 cp ranks takes time ($dp_busy)" \
    "awk -v x=$dp_busy 'BEGIN{exit !(x > 0)}'"

# activations: cp 4 keeps about a quarter of cp 1's (same t, d x 4)
act() { awk '/^  activations/ {print $2; exit}' "$1"; }
"$TRAINSIM" simulate "${S[@]}" >"$tmp/cp1.txt" 2>&1
x1=$(act "$tmp/cp1.txt"); x4=$(act "$tmp/cp.txt")
check_sh "activations at the peak: cp 4 ($x4 GiB) within [0.2, 0.3] x cp 1 ($x1 GiB)" \
    "awk -v a=$x1 -v b=$x4 'BEGIN{exit !(b >= 0.2*a && b <= 0.3*a)}'"

# a slower NVLink never makes the CP run faster (the ring is on NVLink)
sed 's/^1024,8,H100-SXM5-80GB,450,/1024,8,H100-SXM5-80GB,45,/' topologies/dgx-h100-cluster.csv >"$tmp/slow.csv"
it() { awk '/^iteration time/ {v = $3; u = $4; print (u == "s" ? v : u == "ms" ? v / 1e3 : v / 1e6); exit}' "$1"; }
"$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --topology topologies/dgx-h100-cluster.csv >"$tmp/fast.txt" 2>&1
"$TRAINSIM" simulate "${S[@]}" --context-parallel-size 4 --topology "$tmp/slow.csv" >"$tmp/slow.txt" 2>&1
tf=$(it "$tmp/fast.txt"); ts=$(it "$tmp/slow.txt")
check_sh "NVLink at 1/10: iteration $ts s >= $tf s" "awk -v f=$tf -v s=$ts 'BEGIN{exit !(s >= f && f > 0)}'"

# the preset: Llama 3 405B at 128K tokens with t 8, cp 16, p 16 fits 80 GB
"$TRAINSIM" simulate --model llama3-405b-128k --gpu H100-SXM5-80GB >"$tmp/405.txt" 2>&1
rc=$?
check_sh "llama3-405b-128k simulates and fits (exit $rc)" "[ $rc -eq 0 ] && grep -q '(fits)' '$tmp/405.txt'"
expect_output "cp=16, p2p; 8192 tokens per rank; world = t x cp x d x p = 8 x 16 x 8 x 16" \
    "$TRAINSIM" config --model llama3-405b-128k --gpu H100-SXM5-80GB

finish
