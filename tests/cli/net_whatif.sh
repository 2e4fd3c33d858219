#!/usr/bin/env bash
# Metamorphic checks of the flow modes (--network-flows and --full) against
# closed forms and the default mode, each checking direction and size:
#  - no cliff: Megatron 1.7B's data-parallel time on the shipped Selene
#    topology at 320 and 328 GPUs (a third 20-node unit with one node) agrees
#    within 1%; the same for llama3-8b (t = 2) on the H100 cluster at 256 and
#    264 GPUs;
#  - the modes agree: on these uncontended rings each flow mode's DP time is
#    the default mode's (NCCL's model over the same topology) within 2%. The
#    flows carry NCCL's latency of each collective and its protocol's
#    per-byte factor (commcost_flow_terms), and their links the same NIC
#    efficiency (topo_nic_eff);
#  - the NIC closed form: NCCL pipelines its ring over the node's 8 NICs (one
#    channel per NIC, PIPE in net_coll.h), so each node moves its share
#    through all 8 rails at once; halving the NICs' rate adds exactly the
#    bandwidth term (gradient + weight bytes) x (n - 1) / n / (8 x 25 GB/s x
#    12.2/12.5) (HDR at NCCL's achievable 12.2 of 12.5 GB/s per 100 Gb/s:
#    ../shared/reference/networks.csv), within 3%; NCCL's latency stays;
#  - oversubscription does not slow a ring: channel c of the pipelined ring
#    goes from NIC c of a node to NIC c of the next, so on a rail-optimized
#    fabric it stays on rail c's leaf and crosses the uplinks once per
#    20-node unit, one flow per uplink whatever the ratio: 1:1, 2:1 and 4:1
#    agree within 1%, and so does failing half of a leaf's uplinks (the
#    unit tests in test_net_fabric.c show that traffic which does cross the
#    uplinks slows by the port ratio);
#  - half the NICs (the hierarchical all-reduce: 2 cross-server rings per
#    NIC): its cross-server part 2x (the closed form 2 (m - 1)/m x S/8 / NIC
#    rate added); a NIC link degraded to half: the bandwidth term added again;
#    a failed spine: slower, at most 2x;
#  - golden summaries of a --network-flows and a --full run of a small case.
# Goldens live in tests/golden/net/; regenerate them only deliberately:
#   UPDATE_GOLDEN=1 TRAINSIM=build/trainsim bash tests/cli/net_whatif.sh
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
G=tests/golden/net
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# DP busy time in seconds from a report ("DP 421.459 ms (busy time").
dp_s() {
    sed -n 's/^communication per GPU.*DP \([0-9.]*\) \([mu]*s\) (busy.*/\1 \2/p' "$1" |
        awk '{ f = $2 == "s" ? 1 : $2 == "ms" ? 1e-3 : 1e-6; printf "%.9g\n", $1 * f }'
}
# iteration time in seconds from a report ("iteration time          9.638 s").
iter_s() {
    sed -n 's/^iteration time *\([0-9.]*\) \([mu]*s\)$/\1 \2/p' "$1" |
        awk '{ f = $2 == "s" ? 1 : $2 == "ms" ? 1e-3 : 1e-6; printf "%.9g\n", $1 * f }'
}
# GiB of a memory line ("  gradients  6.16 GiB ...").
gib() { awk -v k="$2" '$1 == k { print $2; exit }' "$1"; }
# ratio a / b within [lo, hi]
within() { awk -v a="$1" -v b="$2" -v lo="$3" -v hi="$4" 'BEGIN { r = a / b; exit !(b > 0 && r >= lo && r <= hi) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b > 0 ? a / b : -1) }'; }

M17=(--model megatron-1.7b --use-distributed-optimizer)
run() { # out-file, flags...
    local out=$1; shift
    "$TRAINSIM" simulate "$@" >"$out" 2>"$out.err" || { bad "exit $? for $*: $(head -c 300 "$out.err")"; return 1; }
}
topo() { # file, nodes, fabric, levels, oversubscription, ports, nics, nic_gbps
    printf 'nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,nic_latency_us,fabric,levels,oversubscription,switch_latency_us,switch_ports,pods,pod_oversubscription\n%s,8,A100-SXM4-80GB,300,0.6,%s,%s,0.6,%s,%s,%s,0.13,%s,,\n' \
        "$2" "$7" "$8" "$3" "$4" "$5" "$6" >"$1"
}

# the default mode's DP times of the Selene cases, which the flow modes must reproduce
run "$tmp/a.default" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology topologies/selene-dgx-a100.csv
run "$tmp/b.default" "${M17[@]}" --gpus 328 --global-batch-size 656 --topology topologies/selene-dgx-a100.csv
# the NIC closed form's bandwidth term of a run on 8 x 25 GB/s NICs, seconds
nic_term() { # report, GPUs
    awk -v g="$(gib "$1" gradients)" -v w="$(gib "$1" weights)" -v n="$2" \
        'BEGIN { printf "%.9g", (g + w) * 1073741824 * (n - 1) / n / (8 * 25e9 * 12.2 / 12.5) }'
}

for mode in --network-flows --full; do
    m=${mode#--}
    # -------- no cliff at 320 -> 328 GPUs on Selene, and the closed form
    run "$tmp/a.$m" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology topologies/selene-dgx-a100.csv $mode &&
    run "$tmp/b.$m" "${M17[@]}" --gpus 328 --global-batch-size 656 --topology topologies/selene-dgx-a100.csv $mode || continue
    a=$(dp_s "$tmp/a.$m"); b=$(dp_s "$tmp/b.$m")
    within "$b" "$a" 0.99 1.01 && ok "$m: Selene 328 vs 320 GPUs, DP ratio $(ratio "$b" "$a") (no cliff)" \
        || bad "$m: Selene DP 320 GPUs $a s, 328 GPUs $b s (ratio $(ratio "$b" "$a"))"
    for x in a:320 b:328; do
        f=$tmp/${x%%:*}.$m n=${x#*:}
        want=$(dp_s "$tmp/${x%%:*}.default") got=$(dp_s "$f")
        within "$got" "$want" 0.98 1.02 && ok "$m: $n GPUs DP $got s = $(ratio "$got" "$want") x the default mode's" \
            || bad "$m: $n GPUs DP $got s vs the default mode's $want s (ratio $(ratio "$got" "$want"))"
    done

    # -------- no cliff at 256 -> 264 GPUs on the H100 cluster (32-node units): llama3-8b, t = 2
    run "$tmp/c.$m" --model llama3-8b --gpus 256 --global-batch-size 512 --topology topologies/dgx-h100-cluster.csv $mode &&
    run "$tmp/d.$m" --model llama3-8b --gpus 264 --global-batch-size 528 --topology topologies/dgx-h100-cluster.csv $mode &&
        { c=$(dp_s "$tmp/c.$m"); d=$(dp_s "$tmp/d.$m")
          within "$d" "$c" 0.99 1.01 && ok "$m: H100 cluster 264 vs 256 GPUs (llama3-8b), DP ratio $(ratio "$d" "$c") (no cliff)" \
            || bad "$m: H100 DP 256 GPUs $c s, 264 GPUs $d s (ratio $(ratio "$d" "$c"))"; }

    # -------- oversubscription: 1:1, 2:1, 4:1 on 40-port rail-optimized leaves
    for o in 1 2 4; do
        topo "$tmp/o$o.csv" 560 rail-optimized 2 "$o" 40 8 25
        run "$tmp/o$o.$m" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology "$tmp/o$o.csv" $mode
    done
    o1=$(dp_s "$tmp/o1.$m"); o2=$(dp_s "$tmp/o2.$m"); o4=$(dp_s "$tmp/o4.$m")
    within "$o2" "$o1" 0.99 1.01 && ok "$m: 2:1 leaves (27 down, 13 up): DP x$(ratio "$o2" "$o1") (the ring stays on its rail)" \
        || bad "$m: 2:1 DP $o2 s vs 1:1 $o1 s: x$(ratio "$o2" "$o1"), want 1 (one flow per uplink)"
    within "$o4" "$o1" 0.99 1.01 && ok "$m: 4:1 leaves (32 down, 8 up): DP x$(ratio "$o4" "$o1") (the ring stays on its rail)" \
        || bad "$m: 4:1 DP $o4 s vs 1:1 $o1 s: x$(ratio "$o4" "$o1"), want 1 (one flow per uplink)"

    # -------- slower NICs (12.5 GB/s): the bandwidth term again
    topo "$tmp/slow.csv" 560 rail-optimized 2 1 40 8 12.5
    run "$tmp/s.$m" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology "$tmp/slow.csv" $mode &&
        { s=$(dp_s "$tmp/s.$m") want=$(nic_term "$tmp/o1.$m" 320)
          added=$(awk -v a="$s" -v b="$o1" 'BEGIN { printf "%.9g", a - b }')
          within "$added" "$want" 0.97 1.03 && ok "$m: half-rate NICs: DP x$(ratio "$s" "$o1"), the time added $(ratio "$added" "$want") x the NIC closed form" \
            || bad "$m: half-rate NICs DP $s s vs $o1 s: added $added s, want the NIC closed form $want s"; }

    # -------- fewer NICs (4 per server), hierarchical all-reduce: 2 rings per NIC, 2x
    topo "$tmp/n4.csv" 560 rail-optimized 2 1 40 4 25
    run "$tmp/h8.$m" --model megatron-1.7b --gpus 320 --global-batch-size 640 --topology "$tmp/o1.csv" $mode &&
    run "$tmp/h4.$m" --model megatron-1.7b --gpus 320 --global-batch-size 640 --topology "$tmp/n4.csv" $mode &&
        { h8=$(dp_s "$tmp/h8.$m"); h4=$(dp_s "$tmp/h4.$m")
          # the cross-server part, 2 (m - 1) / m x (gradient bytes / 8) / NIC rate for m = 40 servers, doubles
          want=$(awk -v t="$h8" -v g="$(gib "$tmp/h8.$m" gradients)" \
              'BEGIN { printf "%.9g", t + 2 * 39 / 40 * g * 1073741824 / 8 / (25e9 * 12.2 / 12.5) }')
          within "$h4" "$want" 0.98 1.02 && ok "$m: 4 NICs per server instead of 8: DP x$(ratio "$h4" "$h8") (cross-server part doubled: $(ratio "$h4" "$want") x its closed form)" \
            || bad "$m: 4 NICs DP $h4 s vs 8 NICs $h8 s, want $want s (its cross-server part doubled)"; }

    # -------- half of leaf sw1.7's 20 uplinks failed: rail 7's one cross-unit flow still has an uplink
    fails=$(for k in 0 1 2 3 4 5 6 7 8 9; do printf 'sw1.7:sw2.%d,' $k; done); fails=${fails%,}
    run "$tmp/f.$m" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology "$tmp/o1.csv" $mode --fail-link "$fails" &&
        { f=$(dp_s "$tmp/f.$m"); within "$f" "$o1" 1.0 1.01 && ok "$m: 10 of 20 uplinks of sw1.7 failed: DP x$(ratio "$f" "$o1") (rerouted, one flow per uplink)" \
            || bad "$m: 10 uplinks failed DP $f s vs $o1 s: x$(ratio "$f" "$o1"), want 1"; }
    # -------- a failed spine: 19 spines for 20 flows per leaf: slower, at most 2x
    run "$tmp/fs.$m" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology "$tmp/o1.csv" $mode --fail-node sw2.0 &&
        { f=$(dp_s "$tmp/fs.$m"); within "$f" "$o1" 1.0 2.05 && ok "$m: spine sw2.0 failed: DP x$(ratio "$f" "$o1")" \
            || bad "$m: spine failed DP $f s vs $o1 s: x$(ratio "$f" "$o1"), want in [1, 2]"; }
done

# -------- a degraded NIC link (--full only): the ring's flow through it at half rate, the bandwidth term again
run "$tmp/d.full" "${M17[@]}" --gpus 320 --global-batch-size 640 --topology "$tmp/o1.csv" --full \
    --degrade-link nic0.7-sw1.7:0.5 &&
    { d=$(dp_s "$tmp/d.full"); o1=$(dp_s "$tmp/o1.full") want=$(nic_term "$tmp/o1.full" 320)
      added=$(awk -v a="$d" -v b="$o1" 'BEGIN { printf "%.9g", a - b }')
      within "$added" "$want" 0.97 1.03 && ok "full: nic0.7-sw1.7 at half rate: DP x$(ratio "$d" "$o1"), the time added $(ratio "$added" "$want") x the NIC closed form" \
        || bad "full: degraded NIC link DP $d s vs $o1 s: added $added s, want the NIC closed form $want s"; }

# -------- the modes agree where nothing contends: whole iterations (TP inside a node,
# DP rings across rails, pipeline sends) within 2% of the default mode in both flow modes
agree() { # name, flags...
    local name=$1; shift
    run "$tmp/agree-$name.default" "$@" || return
    local want; want=$(iter_s "$tmp/agree-$name.default")
    for mode in network-flows full; do
        run "$tmp/agree-$name.$mode" "$@" --$mode || continue
        local got; got=$(iter_s "$tmp/agree-$name.$mode")
        within "$got" "$want" 0.98 1.02 && ok "$mode: $name iteration $got s = $(ratio "$got" "$want") x the default mode's" \
            || bad "$mode: $name iteration $got s vs the default mode's $want s (ratio $(ratio "$got" "$want"))"
    done
}
agree "megatron-18.4b on 256 A100s (Selene)" --model megatron-18.4b --gpus 256 --topology topologies/selene-dgx-a100.csv
agree "llama3-8b on 256 H100s" --model llama3-8b --gpus 256 --global-batch-size 512 --topology topologies/dgx-h100-cluster.csv
agree "gpt3-175b on 1024 A100s (built-in default)" --model gpt3-175b

# -------- failures that cannot run are refused, naming what to do
expect_error 2 "gpu0.7 cannot reach" "$TRAINSIM" simulate "${M17[@]}" --gpus 320 --global-batch-size 640 \
    --topology "$tmp/o1.csv" --network-flows --fail-link nic0.7:sw1.7
expect_error 2 "shrink the job as a user would: run on the other servers with --gpus 312" "$TRAINSIM" simulate \
    "${M17[@]}" --gpus 320 --global-batch-size 640 --topology "$tmp/o1.csv" --full --fail-node nvs3

# -------- goldens: a small case in both flow modes
SMALL=(--model gpt3-175b --num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
       --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 8
       --pipeline-model-parallel-size 2 --gpus 32 --gpu H100-SXM5-80GB --schedule 1f1b
       --topology topologies/dgx-h100-cluster.csv)
for mode in network-flows full; do
    run "$tmp/g-$mode.txt" "${SMALL[@]}" --$mode || continue
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
        mkdir -p "$G" && cp "$tmp/g-$mode.txt" "$G/small-$mode.txt" && ok "small-$mode: golden regenerated"
    elif cmp -s "$tmp/g-$mode.txt" "$G/small-$mode.txt"; then ok "small-$mode matches the golden"
    else bad "small-$mode differs from $G/small-$mode.txt:"; diff "$G/small-$mode.txt" "$tmp/g-$mode.txt" | head -n 20; fi
done
finish
