#!/usr/bin/env bash
# The default mode's collectives follow the topology (NCCL's model over it):
# trainsim config says which topology and what it uses, --nccl-table gives
# NCCL's choices, and simulate's iteration time moves with the NICs and the
# oversubscription by the expected direction.
set -u
T=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

H=nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,nic_latency_us,fabric,levels,oversubscription,switch_latency_us,switch_ports,pods,pod_oversubscription
topo() { # NAME "NICS,NIC_GBPS,FABRIC,LEVELS,OVERSUB"
    IFS=, read -r nics gbps fabric levels o <<<"$2"
    printf '%s\n64,8,A100-SXM4-80GB,300,0.6,%s,%s,0.6,%s,%s,%s,0.13,40,,\n' "$H" "$nics" "$gbps" "$fabric" "$levels" \
        "$o" >"$tmp/$1.csv"
}
topo ft1 8,25,fat-tree,2,1
topo ft8 8,25,fat-tree,2,8
topo rail 8,25,rail-optimized,3,1
topo nic3 1,3,fat-tree,2,1

# config: the topology and what the default mode takes from it
out=$("$T" config --model megatron-1.7b --topology "$tmp/ft8.csv" 2>&1)
check_sh "config names the topology used" '[[ "$out" == *"topology used:         $tmp/ft8.csv"* ]]'
check_sh "config gives the leaf block and its factor (4.5 nodes, 8:1: 0.56)" \
    '[[ "$out" == *"4.5 nodes, uplinks 8:1 (cumulative)"*"to 0.56 of its NIC share"* ]]'
check_sh "config gives the data-parallel group's choice" \
    '[[ "$out" == *"data-parallel group:   32 ranks, 8 per node on 4 nodes: a 1 GiB all-reduce runs ring/Simple"* ]]'
expect_output "collectives from --calibration" "$T" config --gpu cpu --gpus 2 --model megatron-1.7b
expect_error 2 "no communication defaults for GPU kind 'CPU'" "$T" config --gpu cpu --gpus 2 --model megatron-1.7b --nccl-table

# --nccl-table: LL for 1 KiB in a node, Simple at 4 GiB at 229-230 GB/s
"$T" config --model megatron-1.7b --nccl-table >"$tmp/table.csv" 2>&1
check "--nccl-table exits 0 with its header" grep -q '^group,ranks,ranks_per_node,collective,bytes,algorithm' "$tmp/table.csv"
check_sh "node all-reduce of 1 KiB: ring LL" 'grep -q "^node,8,8,all-reduce,1024,ring,LL," "$tmp/table.csv"'
bw=$(awk -F, '$1=="node" && $4=="all-reduce" && $5==4294967296 {print $10}' "$tmp/table.csv")
check_sh "node all-reduce of 4 GiB: busbw $bw in [229, 230] (networks.csv 230)" \
    'awk -v b="$bw" "BEGIN{exit !(b >= 229 && b <= 230)}"'

# simulate (16 nodes, one data-parallel group of 128): the iteration time
# follows the topology
it() { "$T" simulate --model megatron-1.7b --gpus 128 --topology "$tmp/$1.csv" 2>/dev/null | awk '/^iteration time/ {v=$3; u=$4; if (u=="ms") v/=1000; print v}'; }
t1=$(it ft1) t8=$(it ft8) tr=$(it rail) t3=$(it nic3)
check_sh "non-blocking fat tree and rail-optimized: within 0.1% (path latency only: $t1 s, $tr s)" \
    'awk -v a="$t1" -v b="$tr" "BEGIN{d = a / b - 1; exit !(d < 0.001 && d > -0.001)}"'
check_sh "8:1 leaves of 4.5 nodes slower than 1:1 ($t8 s > $t1 s)" 'awk -v a="$t8" -v b="$t1" "BEGIN{exit !(a > b)}"'
check_sh "one 3 GB/s NIC per node far slower than eight 25 GB/s ($t3 s > 2 x $t1 s)" \
    'awk -v a="$t3" -v b="$t1" "BEGIN{exit !(a > 2 * b)}"'
# Blackwell: the derived defaults (commcost.c: the H100's measured bus
# bandwidths x NVLink 5 / NVLink 4 = 2): a B200 node's 4 GiB all-reduce runs
# NVLS at NVLS's 960 GB/s ceiling within 1%; GB200's default cluster is NVL72
# racks, 72 GPUs in one NVLink domain
"$T" config --gpu b200 --model megatron-1.7b --nccl-table >"$tmp/b200.csv" 2>&1
bw=$(awk -F, '$1=="node" && $4=="all-reduce" && $5==4294967296 && $6=="nvls" {print $10}' "$tmp/b200.csv")
check_sh "B200 node all-reduce of 4 GiB: NVLS busbw $bw in [950, 960]" \
    'awk -v b="$bw" "BEGIN{exit !(b >= 950 && b <= 960)}"'
check_sh "GB200's default topology: racks of 72 GPUs" \
    '"$T" config --gpu gb200 --gpus 144 --model llama3-8b --global-batch-size 288 2>&1 | grep -q "^topology: *2 nodes x 72 GB200-186GB"'

finish
