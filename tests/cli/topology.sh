#!/usr/bin/env bash
# trainsim topology: the summary of the shipped files (design counts and
# oversubscription as built), node and link listings, routes, Graphviz
# output, failures, and bad input.
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

for f in topologies/selene-dgx-a100.csv topologies/dgx-h100-cluster.csv topologies/dgx-h200-cluster.csv \
    topologies/llama3-24k-h100.csv topologies/dgx-b200-superpod.csv topologies/gb200-nvl72.csv \
    topologies/two-dgx-a100-links.csv; do
    check_sh "$f validates" '"$TRAINSIM" topology "$f" >/dev/null'
done

# Selene: 560 nodes x 8 rails, 20-node units -> 224 leaves; 20 uplinks each, full bisection.
"$TRAINSIM" topology topologies/selene-dgx-a100.csv >"$tmp/s.txt" 2>&1
check "Selene: 4480 GPUs in 560 NVLink domains" grep -q "^GPUs  *4480 (560 servers x 8; 560 NVLink domains of 8 GPUs)" "$tmp/s.txt"
check "Selene: 224 leaves at 1:1" grep -q "level 1  *224 switches, .* oversubscription 1:1" "$tmp/s.txt"
check "Selene: bisection 56000 GB/s = 25 GB/s per GPU" grep -q "^bisection bandwidth  56000 GB/s per direction (25 GB/s per GPU" "$tmp/s.txt"
# 328 GPUs: the third unit's one node has a full leaf's uplinks (design, not population).
"$TRAINSIM" topology topologies/selene-dgx-a100.csv --gpus 328 >"$tmp/s328.txt" 2>&1
check "Selene 328 GPUs: 24 leaves, still 1:1 on the fullest" grep -q "level 1  *24 switches, 8200 GB/s down, 12000 GB/s up in all; oversubscription 1:1" "$tmp/s328.txt"
# Llama 3: 3072-GPU pods, 1:7 between them.
"$TRAINSIM" topology topologies/llama3-24k-h100.csv --gpus 8192 >"$tmp/l.txt" 2>&1
check "Llama 3: the pod level at 7:1" grep -q "level 2  *48 switches, .* oversubscription 7:1" "$tmp/l.txt"
# GB200: 72-GPU NVLink domains.
"$TRAINSIM" topology topologies/gb200-nvl72.csv >"$tmp/g.txt" 2>&1
check "GB200 NVL72: 8 NVLink domains of 72 GPUs" grep -q "^GPUs  *576 (8 servers x 72; 8 NVLink domains of 72 GPUs)" "$tmp/g.txt"

# listings: the names the what-if flags take
"$TRAINSIM" topology topologies/two-dgx-a100-links.csv --list-links >"$tmp/links.txt" 2>&1
check "--list-links: 56 links" test "$(sed -n '/^link,kind/,$p' "$tmp/links.txt" | grep -c ,)" -eq 57
check "--list-links: a fabric link with its rate" grep -qx "sw1.0-sw2.0,fabric,50,0.13" "$tmp/links.txt"
check "--list-nodes: 43 nodes" test "$("$TRAINSIM" topology topologies/two-dgx-a100-links.csv --list-nodes | sed -n '/^node,kind/,/^$/p' | grep -c ,)" -eq 44

# --route: across rails through the spine, 6 hops; by name or GPU index, A B or A:B
"$TRAINSIM" topology topologies/two-dgx-a100-links.csv --route gpu0.0 gpu1.1 >"$tmp/r.txt" 2>&1
check "--route A B: 6 hops through sw2.0" grep -q "^sw1.0  *-> sw2.0 " "$tmp/r.txt"
check "--route: latency 0.5+0.6+0.13+0.13+0.6+0.5 = 2.46 us" grep -q "^6 hops, latency 2.46 us, narrowest line rate 25 GB/s" "$tmp/r.txt"
check "--route 0:9 is the same path" cmp -s "$tmp/r.txt" <("$TRAINSIM" topology topologies/two-dgx-a100-links.csv --route 0:9)
expect_error 2 "no node 'gpu7.0'" "$TRAINSIM" topology topologies/two-dgx-a100-links.csv --route gpu0.0 gpu7.0
# a failed leaf uplink: rail 0 can no longer leave its leaf
expect_error 2 "cannot reach" "$TRAINSIM" topology topologies/two-dgx-a100-links.csv --fail-link sw1.0:sw2.0
# a failed link with another path: sw1.0's traffic reroutes (Selene, 320 GPUs: 20 spines per leaf)
"$TRAINSIM" topology topologies/selene-dgx-a100.csv --gpus 320 --fail-link sw1.0:sw2.0 --route gpu0.0 gpu20.0 >"$tmp/f.txt" 2>&1
"$TRAINSIM" topology topologies/selene-dgx-a100.csv --gpus 320 --route gpu0.0 gpu20.0 >"$tmp/f0.txt" 2>&1
check "without the failure the route takes sw1.0-sw2.0" grep -q '^sw1.0  *-> sw2.0 ' "$tmp/f0.txt"
check "--fail-link: the route avoids sw1.0-sw2.0" test "$(grep -c '^sw1.0  *-> sw2.0 ' "$tmp/f.txt")" -eq 0 -a "$(grep -c '^sw1.0  *-> sw2' "$tmp/f.txt")" -eq 1

# --dot: every pair once; large fabrics collapsed
"$TRAINSIM" topology topologies/two-dgx-a100-links.csv --dot "$tmp/t.dot" >/dev/null 2>&1
check "--dot: 56 edges" test "$(grep -c -- ' -- ' "$tmp/t.dot")" -eq 56
"$TRAINSIM" topology topologies/selene-dgx-a100.csv --dot "$tmp/s.dot" >/dev/null 2>&1
check "--dot on 4480 GPUs: collapsed to 4 boxes and 3 edges" test "$(grep -c -- ' -- ' "$tmp/s.dot")" -eq 3
check "--dot collapsed: the boxes say what they hold" grep -q '"level1" \[label="level 1: 224 switches"\]' "$tmp/s.dot"
if command -v dot >/dev/null; then
    check "--png renders" "$TRAINSIM" topology topologies/two-dgx-a100-links.csv --png "$tmp/t.png"
else
    expect_error 1 "'dot' is not installed" "$TRAINSIM" topology topologies/two-dgx-a100-links.csv --png "$tmp/t.png"
fi

# bad input
expect_error 2 "give a topology file" "$TRAINSIM" topology
expect_error 1 "nope.csv" "$TRAINSIM" topology "$tmp/nope.csv"
grep -v '^gpu1.5,nvs1,' topologies/two-dgx-a100-links.csv >"$tmp/miss.csv"
expect_error 2 "gpu1.5 has 0 nvlink links where other GPUs have 1" "$TRAINSIM" topology "$tmp/miss.csv"
expect_error 2 "does not fit the 4480 GPUs" "$TRAINSIM" topology topologies/selene-dgx-a100.csv --gpus 5000
finish
