#!/usr/bin/env bash
# --overlap-moe-expert-parallel-comm (sim/core/ep_pair.h): Megatron-LM's
# rules answered with exit 2 naming what is valid, the flow modes refusing
# it, and the overlap shortening the iteration and the exposed EP time on
# the qwen3-235b-a22b preset (interleaved) and deepseek-v3 (DualPipeV), the
# rest of the report unchanged; --delay-wgrad-compute refused without the
# overlap and shortening deepseek-v3's DualPipeV run, its compute unchanged.
# Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
F=--overlap-moe-expert-parallel-comm

secs() { awk '{ f = $2 == "s" ? 1 : $2 == "ms" ? 1e-3 : 1e-6; printf "%.9g\n", $1 * f }'; }
iter_s() { sed -n 's/^iteration time *\([0-9.]*\) \([mu]*s\)$/\1 \2/p' "$1" | secs; }
exp_ep_s() { sed -n 's/^exposed communication.*EP \([0-9.]*\) \([mu]*s\) (.*/\1 \2/p' "$1" | secs; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && a < b) }'; }
run() { # out-file, flags... (exit 3: simulated, does not fit the GPU's memory)
    local out=$1 rc; shift
    $T simulate "$@" >"$out" 2>"$out.err"; rc=$?
    [ $rc = 0 ] || [ $rc = 3 ] || { bad "exit $rc for $*: $(head -c 300 "$out.err")"; return 1; }
}

# -------- rules
MIX=(--model mixtral-8x7b --num-layers 8 --global-batch-size 64 --gpus 64)
expect_error 2 "$F: needs expert parallelism (--expert-model-parallel-size > 1, got 1)" $T simulate "${MIX[@]}" $F \
    --expert-model-parallel-size 1 --moe-token-dispatcher-type alltoall
expect_error 2 "$F: needs --moe-token-dispatcher-type alltoall or flex (got allgather: no all-to-all)" $T simulate \
    "${MIX[@]}" $F --expert-model-parallel-size 8 --moe-token-dispatcher-type allgather
expect_error 2 "valid --schedule interleaved (with --num-layers-per-virtual-pipeline-stage or" $T simulate \
    "${MIX[@]}" $F --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall -p 2
expect_error 2 "$F: not with --recompute-granularity full" $T simulate "${MIX[@]}" $F \
    --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --recompute-granularity full
expect_error 2 "$F: needs a mixture-of-experts model (--num-experts > 0)" $T simulate --model gpt3-175b $F
for mode in network-flows full; do
    expect_error 2 "$F: not modelled in the flow modes" $T simulate "${MIX[@]}" $F --expert-model-parallel-size 8 \
        --moe-token-dispatcher-type alltoall --$mode
done
expect_output "$F" $T simulate --help
expect_error 2 "--delay-wgrad-compute needs $F" $T simulate "${MIX[@]}" --expert-model-parallel-size 8 \
    --moe-token-dispatcher-type alltoall --delay-wgrad-compute
expect_output "--delay-wgrad-compute" $T simulate --help

# -------- effect: interleaved qwen3-235b-a22b, DualPipeV deepseek-v3
compare() { # name, flags...
    local name=$1; shift
    run "$tmp/$name.off" "$@" && run "$tmp/$name.on" "$@" $F || return
    local i0 i1 e0 e1
    i0=$(iter_s "$tmp/$name.off"); i1=$(iter_s "$tmp/$name.on")
    e0=$(exp_ep_s "$tmp/$name.off"); e1=$(exp_ep_s "$tmp/$name.on")
    lt "$i1" "$i0" && ok "$name: iteration $i0 s -> $i1 s" || bad "$name: iteration $i0 s -> $i1 s, not shorter"
    lt "$e1" "$e0" && ok "$name: exposed EP $e0 s -> $e1 s" || bad "$name: exposed EP $e0 s -> $e1 s, not less"
    # compute, the layout, the all-to-alls' busy time are the same (the
    # pipeline transfers' busy time includes waiting for the receiver)
    for line in "^compute per GPU" "^  layout"; do
        if [ "$(grep "$line" "$tmp/$name.off")" = "$(grep "$line" "$tmp/$name.on")" ]; then ok
        else bad "$name: '$line' changed"; fi
    done
    if [ "$(grep -o 'EP [0-9.]* [mu]*s (busy' "$tmp/$name.off")" = "$(grep -o 'EP [0-9.]* [mu]*s (busy' \
        "$tmp/$name.on")" ]; then ok; else bad "$name: the all-to-alls' busy time changed"; fi
}
compare qwen3-interleaved --model qwen3-235b-a22b --gpu H100-SXM5-80GB --schedule interleaved \
    --num-virtual-stages-per-pipeline-rank 2 --account-for-embedding-in-pipeline-split \
    --account-for-loss-in-pipeline-split
compare deepseek-v3-dualpipev --model deepseek-v3 --gpu H100-SXM5-80GB --schedule dualpipev \
    --pipeline-model-parallel-layout 'Et|(tt|)*30L'
# p = 1: Megatron's combined step of forward i+1 and backward i
compare mixtral-p1 "${MIX[@]}" -p 1 --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall

# -------- --delay-wgrad-compute: DualPipeV's F&B pairs run whole backwards
# (their weight gradients split off and delayed): never slower, faster on
# deepseek-v3, the compute the same
DS=(--model deepseek-v3 --gpu H100-SXM5-80GB --schedule dualpipev --pipeline-model-parallel-layout 'Et|(tt|)*30L' $F)
if run "$tmp/ds.on" "${DS[@]}" && run "$tmp/ds.delay" "${DS[@]}" --delay-wgrad-compute; then
    i0=$(iter_s "$tmp/ds.on"); i1=$(iter_s "$tmp/ds.delay")
    lt "$i1" "$i0" && ok "deepseek-v3 dualpipev: iteration $i0 s -> $i1 s with --delay-wgrad-compute" ||
        bad "deepseek-v3 dualpipev: iteration $i0 s -> $i1 s with --delay-wgrad-compute, not shorter"
    if [ "$(grep "^compute per GPU" "$tmp/ds.on")" = "$(grep "^compute per GPU" "$tmp/ds.delay")" ]; then ok
    else bad "deepseek-v3: the compute changed with --delay-wgrad-compute"; fi
fi
finish
