#!/usr/bin/env bash
# --moe-shared-expert-overlap (sim/model/moe.h, sim/core/overlap.h): the
# rules (shared experts, the alltoall or flex dispatcher, not with
# --overlap-moe-expert-parallel-comm, as Megatron-LM) answered with exit 2; the closed form
# on a small case (the dispatch and the combine's backward all-to-all hidden
# whole behind the shared experts: exposed EP exactly half); metamorphic
# checks (never a longer iteration or more exposed EP, the all-to-alls' busy
# time unchanged; no all-to-all at ep 1: the same report); the flow modes.
# Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
F=--moe-shared-expert-overlap

secs() { awk '{ f = $2 == "s" ? 1 : $2 == "ms" ? 1e-3 : 1e-6; printf "%.9g\n", $1 * f }'; }
iter_s() { sed -n 's/^iteration time *\([0-9.]*\) \([mu]*s\)$/\1 \2/p' "$1" | secs; }
exp_ep_s() { sed -n 's/^exposed communication.*EP \([0-9.]*\) \([mu]*s\) (.*/\1 \2/p' "$1" | secs; }
busy_ep() { grep -o 'EP [0-9.]* [mu]*s (busy' "$1"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && a <= b) }'; }
run() { # out-file, flags... (exit 3: simulated, does not fit the GPU's memory)
    local out=$1 rc; shift
    $T simulate "$@" >"$out" 2>"$out.err"; rc=$?
    [ $rc = 0 ] || [ $rc = 3 ] || { bad "exit $rc for $*: $(head -c 300 "$out.err")"; return 1; }
}

# -------- rules
MIX=(--model mixtral-8x7b --num-layers 4 --global-batch-size 16 --gpus 8 -p 1 --expert-model-parallel-size 8)
expect_error 2 "$F needs shared experts (give --moe-shared-expert-intermediate-size)" $T simulate "${MIX[@]}" $F \
    --moe-token-dispatcher-type alltoall
expect_error 2 "$F needs --moe-token-dispatcher-type alltoall or flex (got allgather)" $T simulate "${MIX[@]}" $F \
    --moe-shared-expert-intermediate-size 512 --moe-token-dispatcher-type allgather
expect_error 2 "$F with --overlap-moe-expert-parallel-comm: Megatron-LM refuses the combination (megatron/training/arguments.py" $T simulate "${MIX[@]}" $F \
    --moe-shared-expert-intermediate-size 512 --moe-token-dispatcher-type alltoall --overlap-moe-expert-parallel-comm
expect_error 2 "$F needs --num-experts" $T simulate --model gpt3-175b $F
expect_output "$F" $T simulate --help

# -------- closed form: 4 all-to-alls per layer and micro-batch, all
# exposed without the flag; the dispatch's and the combine's backward one
# hidden whole behind the shared experts (p 1, no recomputation)
A2A=("${MIX[@]}" --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 4096)
if run "$tmp/cf.off" "${A2A[@]}" && run "$tmp/cf.on" "${A2A[@]}" $F; then
    e0=$(exp_ep_s "$tmp/cf.off"); e1=$(exp_ep_s "$tmp/cf.on")
    awk -v a="$e0" -v b="$e1" 'BEGIN { d = a / 2 - b; exit !(a > 0 && d < 1e-5 && d > -1e-5) }' &&
        ok "exposed EP $e0 s -> $e1 s (half)" || bad "exposed EP $e0 s -> $e1 s, want half"
fi

# -------- metamorphic: never slower, never more exposed EP, busy EP unchanged
compare() { # name, flags...
    local name=$1; shift
    run "$tmp/$name.off" "$@" && run "$tmp/$name.on" "$@" $F || return
    local i0 i1 e0 e1
    i0=$(iter_s "$tmp/$name.off"); i1=$(iter_s "$tmp/$name.on")
    e0=$(exp_ep_s "$tmp/$name.off"); e1=$(exp_ep_s "$tmp/$name.on")
    le "$i1" "$i0" && ok "$name: iteration $i0 s -> $i1 s" || bad "$name: iteration $i0 s -> $i1 s, longer"
    le "$e1" "$e0" && ok "$name: exposed EP $e0 s -> $e1 s" || bad "$name: exposed EP $e0 s -> $e1 s, more"
    [ "$(busy_ep "$tmp/$name.off")" = "$(busy_ep "$tmp/$name.on")" ] && ok ||
        bad "$name: the all-to-alls' busy time changed"
}
for sh in 64 512 65536; do
    compare "alltoall-$sh" "${MIX[@]}" --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size $sh
done
compare mixtral-p2-skew --model mixtral-8x7b --num-layers 8 --global-batch-size 64 --gpus 64 -p 2 \
    --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 2048 \
    --recompute-granularity selective --moe-routing-skew 0.5
compare flex-deepep "${MIX[@]}" --moe-token-dispatcher-type flex --moe-enable-deepep \
    --moe-shared-expert-intermediate-size 2048
for mode in network-flows full; do
    compare "alltoall-$mode" "${A2A[@]}" --$mode
done

# -------- no all-to-all (ep 1): the flag changes nothing
NOEP=(--model mixtral-8x7b --num-layers 4 --global-batch-size 16 --gpus 8 -p 1 --expert-model-parallel-size 1
    --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 512)
if run "$tmp/ep1.off" "${NOEP[@]}" && run "$tmp/ep1.on" "${NOEP[@]}" $F; then
    cmp -s "$tmp/ep1.off" "$tmp/ep1.on" && ok "ep 1: the same report" || bad "ep 1: the report changed"
fi
finish
