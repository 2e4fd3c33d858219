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
# the message lists the valid names with this topology's index ranges (4 servers)
refused "unknown node: valid names and ranges" \
    "nodes: gpu<s>.<k> with s in 0..3, k in 0..7; nvs<s> with s in 0..3; nic<s>.<k> with s in 0..3, k in 0..7; sw1.<i> with i in 0..7" \
    --full --degrade-link nic0.0-sw9.9:0.5
refused "unlinked nodes: what the first links to" "nic0.0 and sw2.0 are not linked (nic0.0 links to: gpu0.0, sw1.0;" \
    --full --degrade-link nic0.0-sw2.0:0.5

# trainsim config --list-nodes: the names --degrade-link takes
CFG=("${SMALL[@]}")
"$TRAINSIM" config "${CFG[@]}" --list-nodes >"$tmp/nodes.txt" 2>"$tmp/nodes.err"
check "config --list-nodes (built-in topology) exits 0" test $? -eq 0
check "node rows: 32 GPUs" test "$(grep -c ',gpu$' "$tmp/nodes.txt")" -eq 32
check "the header names the ranges" grep -qF "# nodes: gpu<s>.<k> with s in 0..3, k in 0..7;" "$tmp/nodes.txt"
# the first, a middle and the last link listed are accepted by --degrade-link
links=$(sed -n '/^link,kind/,$p' "$tmp/nodes.txt" | tail -n +2 | cut -d, -f1)
n=$(wc -l <<<"$links")
check "links listed" test "$n" -gt 32
for l in "$(sed -n 1p <<<"$links")" "$(sed -n "$((n / 2))p" <<<"$links")" "$(sed -n "${n}p" <<<"$links")"; do
    "$TRAINSIM" simulate "${SMALL[@]}" --full --degrade-link "$l:0.5" >/dev/null 2>"$tmp/l.err"
    check "listed link $l is one --degrade-link takes" test $? -eq 0
done
# a link-list file: its own nodes, whatever the model's GPU count (43 nodes, 56 links)
"$TRAINSIM" config --topology topologies/two-dgx-a100-links.csv --list-nodes >"$tmp/two.txt" 2>&1
check "config --topology FILE --list-nodes exits 0" test $? -eq 0
check "link list: 43 nodes, 56 links" test "$(sed -n '/^node,kind/,/^$/p' "$tmp/two.txt" | grep -c ,)" -eq 44 \
    -a "$(sed -n '/^link,kind/,$p' "$tmp/two.txt" | grep -c ,)" -eq 57
check "link list: a fabric link with its rate" grep -qx "sw1.0-sw2.0,fabric,50,0.13" "$tmp/two.txt"
expect_error 1 "nope.csv" "$TRAINSIM" config --topology "$tmp/nope.csv" --list-nodes
refused "bad --mixed-gpus" "KIND:FIRST-LAST" --full --mixed-gpus A100-SXM4-80GB
refused "--mixed-gpus past int" "KIND:FIRST-LAST" --full --mixed-gpus A100-SXM4-80GB:4294967304-4294967311
refused "bad --rank-order" "permutation" --network-flows --rank-order tp-dp-dp

# factors and bandwidths that would push times past int64 ns are refused at input
refused "--straggler 1e12" "FACTOR in \\[0.001, 1000\\]" --full --straggler 8:1e12
refused "--degrade-link 1e-300" "FACTOR in \\[1e-06, 1000\\]" --full --degrade-link nic1.0-sw1.0:1e-300
sed 's/^sw1.0,sw2.0,50,/sw1.0,sw2.0,1e-300,/' topologies/two-dgx-a100-links.csv >"$tmp/slow.csv"
grep -q '^sw1.0,sw2.0,1e-300,' "$tmp/slow.csv" && ok "topology with a 1e-300 GB/s link written" || bad "sed found no sw1.0,sw2.0 row"
expect_error 2 "column 'bandwidth_gbps': 1e-300 is out of range (expected a number in [0.001, 1e+06])" \
    "$TRAINSIM" simulate --model gpt3-175b --num-layers 4 --hidden-size 1024 --num-attention-heads 16 \
    --seq-length 1024 --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 2 --gpus 16 --gpu A100-SXM4-80GB --topology "$tmp/slow.csv" --full

finish
