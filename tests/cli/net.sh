#!/usr/bin/env bash
# trainsim simulate with the network model: symmetric and --full agree on a
# uniform cluster, reruns are byte-identical, the what-ifs run and change
# the answer, and bad what-if flags are refused with a clear message.
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# 32 H100s: t 8, p 2, d 2; the built-in topology's rail leaves hold all 4 servers.
SMALL=(--model gpt3-175b --num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
       --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 8
       --pipeline-model-parallel-size 2 --gpus 32 --gpu H100-SXM5-80GB --schedule 1f1b)
iter() { grep -E '^iteration time' "$1"; }

run() { # name, flags...
    local name=$1; shift
    if "$TRAINSIM" simulate "${SMALL[@]}" "$@" >"$tmp/$name.txt" 2>"$tmp/$name.err"; then ok "$name runs"
    else bad "$name: exit $? ($(head -c 300 "$tmp/$name.err"))"; fi
}
run sym --network-flows
run full --full
run full2 --full
run slow --full --straggler 8:2
run deg --full --degrade-link nic1.0-sw1.0:0.25
run mix --full --mixed-gpus A100-SXM4-80GB:8-15

[ -n "$(iter "$tmp/sym.txt")" ] && [ "$(iter "$tmp/sym.txt")" = "$(iter "$tmp/full.txt")" ] \
    && ok "symmetric and --full give the same iteration time" \
    || bad "symmetric '$(iter "$tmp/sym.txt")' vs full '$(iter "$tmp/full.txt")'"
cmp -s "$tmp/full.txt" "$tmp/full2.txt" && ok "--full reruns are byte-identical" || bad "--full reruns differ"
grep -q '^network (full' "$tmp/full.txt" && ok "network summary line" || bad "no network summary line"
for w in slow deg mix; do
    [ "$(iter "$tmp/$w.txt")" != "$(iter "$tmp/full.txt")" ] && ok "$w changes the iteration time" \
        || bad "$w: same iteration time as the uniform run"
done

refused() { # name, expected text, flags...
    local name=$1 want=$2; shift 2
    "$TRAINSIM" simulate "${SMALL[@]}" "$@" >"$tmp/r.txt" 2>"$tmp/r.err"; local rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/r.err"; then ok "$name refused (exit 2)"
    else bad "$name: exit $rc, stderr: $(head -c 300 "$tmp/r.err")"; fi
}
refused "straggler without --full" "needs --full" --straggler 3:2
refused "straggler rank out of range" "RANK in 0..31" --full --straggler 32:2
refused "unknown node in --degrade-link" "no node named 'sw9.9'" --full --degrade-link nic0.0-sw9.9:0.5
refused "bad --mixed-gpus" "KIND:FIRST-LAST" --full --mixed-gpus A100-SXM4-80GB
refused "--mixed-gpus past int" "KIND:FIRST-LAST" --full --mixed-gpus A100-SXM4-80GB:4294967304-4294967311
refused "bad --rank-order" "permutation" --network-flows --rank-order tp-dp-dp

finish
