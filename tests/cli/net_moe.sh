#!/usr/bin/env bash
# tests/cli/net_moe.sh — mixture-of-experts runs in the flow modes
# (--network-flows, --full): each MoE layer's dispatch and combine
# all-to-alls run as flows over the expert-parallel group (sim/net/net_a2a.h),
# the allgather dispatcher's gathers and reduce-scatters over the tp_ep group,
# expert tensor parallelism's over the ETP group, the routed experts'
# gradients over the expert-data-parallel group. Small
# Mixtral-shaped runs (8 layers, B 64, 64 GPUs), checked for:
#  - agreement with the default mode on uncontended fabrics, under forced
#    balance (the default mode's all-to-all carries no routing skew): the
#    iteration within 1%, the EP busy time within 0.5% when the group spans
#    nodes (NIC-bound, the same NIC efficiency in both modes), within 5% inside
#    a node (the flows' NVLink payload rate against NCCL's measured bus
#    bandwidth, as for the tensor-parallel collectives: docs/network.md);
#    alltoall and DeepEP, A100 and H100; the allgather dispatcher and ETP 2
#    within 1% across nodes, 5% inside one;
#  - metamorphic: slower NICs and more oversubscription never make a run
#    faster, and make the cross-node all-to-alls slower; an all-to-all inside
#    one node does not depend on the NIC; a degraded NIC cable (--full) never
#    makes it faster, nor does a failed spine; routing skew (the busiest rank
#    receives the load factor times its share) never makes the all-to-alls
#    faster; half-rate NICs never make the allgather dispatcher or ETP across
#    nodes faster, and about double their NIC-bound EP time;
#  - the symmetric mode (its peers' all-to-all bundles merged) against --full:
#    the iteration within 0.5%, EP within 1.5%, with and without skew;
#  - refusals, and golden reports of a small case in both flow modes.
# Goldens live in tests/golden/net/; regenerate them only deliberately:
#   UPDATE_GOLDEN=1 TRAINSIM=build/trainsim bash tests/cli/net_moe.sh
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
G=tests/golden/net
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# seconds from "<number> <unit>" (s, ms, us)
secs() { awk '{ f = $2 == "s" ? 1 : $2 == "ms" ? 1e-3 : 1e-6; printf "%.9g\n", $1 * f }'; }
iter_s() { sed -n 's/^iteration time *\([0-9.]*\) \([mu]*s\)$/\1 \2/p' "$1" | secs; }
ep_s() { sed -n 's/^communication per GPU.*EP \([0-9.]*\) \([mu]*s\) (busy.*/\1 \2/p' "$1" | secs; }
within() { awk -v a="$1" -v b="$2" -v lo="$3" -v hi="$4" 'BEGIN { r = a / b; exit !(b > 0 && r >= lo && r <= hi) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b > 0 ? a / b : -1) }'; }
run() { # out-file, flags...
    local out=$1; shift
    "$TRAINSIM" simulate "$@" >"$out" 2>"$out.err" || { bad "exit $? for $*: $(head -c 300 "$out.err")"; return 1; }
}
topo() { # file, fabric, oversubscription, switch ports, nic_gbps
    printf 'nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,nic_latency_us,fabric,levels,oversubscription,switch_latency_us,switch_ports,pods,pod_oversubscription\n8,8,A100-SXM4-80GB,300,0.6,8,%s,0.6,%s,2,%s,0.13,%s,,\n' \
        "$5" "$2" "$3" "$4" >"$1"
}

SMALL=(--model mixtral-8x7b --num-layers 8 --global-batch-size 64 --moe-router-force-load-balancing)
ACROSS=(--num-experts 16 --expert-model-parallel-size 16) # t 2 x ep 16 ... 16 consecutive ranks: 2 nodes

# -------- agreement with the default mode
agree() { # name, EP tolerance, flags...
    local name=$1 tol=$2; shift 2
    run "$tmp/agree.default" "$@" || return
    local it ep; it=$(iter_s "$tmp/agree.default"); ep=$(ep_s "$tmp/agree.default")
    for mode in network-flows full; do
        run "$tmp/agree.$mode" "$@" --$mode || continue
        local git gep; git=$(iter_s "$tmp/agree.$mode"); gep=$(ep_s "$tmp/agree.$mode")
        within "$git" "$it" 0.99 1.01 && ok "$mode: $name: iteration $git s = $(ratio "$git" "$it") x the default mode's" \
            || bad "$mode: $name: iteration $git s vs the default mode's $it s (ratio $(ratio "$git" "$it"))"
        within "$gep" "$ep" "$(awk -v t="$tol" 'BEGIN { print 1 - t }')" "$(awk -v t="$tol" 'BEGIN { print 1 + t }')" &&
            ok "$mode: $name: EP $gep s = $(ratio "$gep" "$ep") x the default mode's (tolerance $tol)" ||
            bad "$mode: $name: EP $gep s vs the default mode's $ep s (ratio $(ratio "$gep" "$ep"), tolerance $tol)"
    done
}
agree "EP 8 inside a node, A100" 0.05 "${SMALL[@]}"
agree "EP 8 inside a node, H100" 0.05 "${SMALL[@]}" --gpu H100-SXM5-80GB
agree "EP 16 over 2 nodes, A100" 0.005 "${SMALL[@]}" "${ACROSS[@]}"
# DeepEP's RDMA copies use one NIC per GPU, the NIC the pipeline sends of p > 1 take too: with p 4 the
# flows' EP time is 1% above the default mode's from that contention alone (p 1: equal)
agree "EP 16 over 2 nodes, H100, DeepEP, p 1" 0.005 "${SMALL[@]}" "${ACROSS[@]}" --gpu H100-SXM5-80GB \
    --moe-token-dispatcher-type flex --moe-enable-deepep -p 1 --gpus 32

# the allgather dispatcher (Megatron-LM's default): all-gathers and reduce-scatters over the tp_ep group of
# etp x ep consecutive ranks; expert tensor parallelism: the alltoall dispatcher's ETP all-gather and
# reduce-scatter over etp consecutive ranks, its all-to-alls over the ep ranks etp apart. Both are rings with
# NCCL's terms, as the dense collectives: within 1% across nodes, the NVLink rates' 5% inside one
AG=(--moe-token-dispatcher-type allgather)
agree "allgather dispatcher, tp_ep 8 inside a node, H100" 0.05 "${SMALL[@]}" "${AG[@]}" --gpu H100-SXM5-80GB
agree "allgather dispatcher, tp_ep 16 over 2 nodes, A100" 0.01 "${SMALL[@]}" "${ACROSS[@]}" "${AG[@]}"
agree "allgather dispatcher, etp 2 x ep 8 over 2 nodes, A100" 0.01 "${SMALL[@]}" "${AG[@]}" \
    --expert-tensor-parallel-size 2 --expert-model-parallel-size 8
agree "alltoall, etp 2 x ep 4 inside a node, A100" 0.05 "${SMALL[@]}" --expert-tensor-parallel-size 2 \
    --expert-model-parallel-size 4
agree "alltoall, etp 2 x ep 8 over 2 nodes, A100, p 2" 0.01 "${SMALL[@]}" --num-experts 16 \
    --expert-tensor-parallel-size 2 --expert-model-parallel-size 8 -p 2

# -------- metamorphic: NIC rate and oversubscription (fat tree of 8-port leaves, --full)
prev_it=0 prev_ep=0
for o in 1 3 7; do
    topo "$tmp/o$o.csv" fat-tree "$o" 8 25
    run "$tmp/o$o.txt" "${SMALL[@]}" "${ACROSS[@]}" --gpus 64 --topology "$tmp/o$o.csv" --full || continue
    it=$(iter_s "$tmp/o$o.txt") ep=$(ep_s "$tmp/o$o.txt")
    awk -v a="$it" -v b="$prev_it" -v c="$ep" -v d="$prev_ep" 'BEGIN { exit !(a >= b && c >= d) }' &&
        ok "oversubscription $o:1: iteration $it s, EP $ep s (never faster)" ||
        bad "oversubscription $o:1: iteration $it s, EP $ep s, faster than the lower ratio's $prev_it s, $prev_ep s"
    prev_it=$it prev_ep=$ep
done
within "$(ep_s "$tmp/o7.txt")" "$(ep_s "$tmp/o1.txt")" 1.01 100 &&
    ok "7:1 leaves slow the cross-node all-to-alls: EP x$(ratio "$(ep_s "$tmp/o7.txt")" "$(ep_s "$tmp/o1.txt")")" ||
    bad "7:1 leaves: EP $(ep_s "$tmp/o7.txt") s, not slower than 1:1's $(ep_s "$tmp/o1.txt") s"
topo "$tmp/slow.csv" fat-tree 1 8 12.5
for mode in network-flows full; do
    for layout in inside across; do
        extra=(); [ $layout = across ] && extra=("${ACROSS[@]}")
        run "$tmp/n25.$mode.$layout" "${SMALL[@]}" "${extra[@]}" --gpus 64 --topology "$tmp/o1.csv" --$mode &&
        run "$tmp/n12.$mode.$layout" "${SMALL[@]}" "${extra[@]}" --gpus 64 --topology "$tmp/slow.csv" --$mode || continue
        a=$(iter_s "$tmp/n25.$mode.$layout") b=$(iter_s "$tmp/n12.$mode.$layout")
        ea=$(ep_s "$tmp/n25.$mode.$layout") eb=$(ep_s "$tmp/n12.$mode.$layout")
        awk -v a="$a" -v b="$b" 'BEGIN { exit !(b >= a) }' && ok "$mode, EP $layout: half-rate NICs, iteration x$(ratio "$b" "$a") (never faster)" ||
            bad "$mode, EP $layout: half-rate NICs made the iteration faster: $b s < $a s"
        if [ $layout = inside ]; then
            [ "$ea" = "$eb" ] && ok "$mode: an all-to-all inside a node does not depend on the NIC (EP $ea s both)" ||
                bad "$mode: EP inside a node changed with the NIC rate: $ea s -> $eb s"
        else
            within "$eb" "$ea" 1.5 2.5 && ok "$mode: half-rate NICs, cross-node EP x$(ratio "$eb" "$ea") (NIC-bound: about 2)" ||
                bad "$mode: half-rate NICs, cross-node EP $ea s -> $eb s (x$(ratio "$eb" "$ea"), want about 2)"
        fi
    done
done

# the allgather dispatcher and ETP across nodes: half-rate NICs never faster, the NIC-bound EP time about x2
for layout in ag etp; do
    extra=("${ACROSS[@]}" "${AG[@]}")
    [ $layout = etp ] && extra=(--num-experts 16 --expert-tensor-parallel-size 2 --expert-model-parallel-size 8 -p 2)
    for mode in network-flows full; do
        run "$tmp/n25.$mode.$layout" "${SMALL[@]}" "${extra[@]}" --gpus 64 --topology "$tmp/o1.csv" --$mode &&
        run "$tmp/n12.$mode.$layout" "${SMALL[@]}" "${extra[@]}" --gpus 64 --topology "$tmp/slow.csv" --$mode || continue
        a=$(iter_s "$tmp/n25.$mode.$layout") b=$(iter_s "$tmp/n12.$mode.$layout")
        ea=$(ep_s "$tmp/n25.$mode.$layout") eb=$(ep_s "$tmp/n12.$mode.$layout")
        awk -v a="$a" -v b="$b" 'BEGIN { exit !(b >= a) }' && ok "$mode, $layout: half-rate NICs, iteration x$(ratio "$b" "$a") (never faster)" ||
            bad "$mode, $layout: half-rate NICs made the iteration faster: $b s < $a s"
        within "$eb" "$ea" 1.5 2.5 && ok "$mode, $layout: half-rate NICs, cross-node EP x$(ratio "$eb" "$ea") (NIC-bound: about 2)" ||
            bad "$mode, $layout: half-rate NICs, cross-node EP $ea s -> $eb s (x$(ratio "$eb" "$ea"), want about 2)"
    done
done

# -------- a degraded NIC cable on an EP group's node (--full)
run "$tmp/deg.txt" "${SMALL[@]}" "${ACROSS[@]}" --gpus 64 --topology "$tmp/o1.csv" --full --degrade-link nic0.0-sw1.0:0.25 &&
    { d=$(ep_s "$tmp/deg.txt") a=$(ep_s "$tmp/o1.txt")
      within "$d" "$a" 1.0 100 && ok "nic0.0-sw1.0 at a quarter: EP x$(ratio "$d" "$a") (never faster)" ||
          bad "nic0.0-sw1.0 at a quarter: EP $d s faster than $a s"; }

# -------- a failed spine (one of the 4): the cross-node all-to-alls reroute over the others, never faster
run "$tmp/fail.txt" "${SMALL[@]}" "${ACROSS[@]}" --gpus 64 --topology "$tmp/o1.csv" --full --fail-node sw2.0 &&
    { f=$(ep_s "$tmp/fail.txt") a=$(ep_s "$tmp/o1.txt")
      within "$f" "$a" 1.0 100 && ok "spine sw2.0 failed: EP x$(ratio "$f" "$a") (never faster)" ||
          bad "spine sw2.0 failed: EP $f s faster than $a s"; }

# -------- routing skew: the busiest rank's share, never faster; the imbalance reported
SKEW=(--model mixtral-8x7b --num-layers 8 --global-batch-size 64 "${ACROSS[@]}")
for mode in network-flows full; do
    run "$tmp/skew.$mode" "${SKEW[@]}" --$mode &&
        { s=$(ep_s "$tmp/skew.$mode") b=$(ep_s "$tmp/agree.$mode" 2>/dev/null)
          run "$tmp/bal.$mode" "${SMALL[@]}" "${ACROSS[@]}" --$mode && b=$(ep_s "$tmp/bal.$mode")
          within "$s" "$b" 1.0 100 && ok "$mode: routing skew 0.3: EP x$(ratio "$s" "$b") against forced balance" ||
              bad "$mode: routing skew made the all-to-alls faster: $s s < $b s"
          grep -q "^imbalance cost" "$tmp/skew.$mode" && ok "$mode: the imbalance cost is reported" ||
              bad "$mode: no imbalance cost line"; }
done

# -------- the symmetric mode against --full: --network-flows runs each all-to-all of the simulated rank's
# group as its bundles and its peers' merged into one flow per kind (net_coll.h, merge_peers), --full every
# bundle of every group; with and without routing skew, DeepEP, 4 nodes: the iteration within 0.5%, EP
# within 1.5% (measured: at most 0.05% and 0.83%, DeepEP's RDMA copies sharing the rail NICs with the
# pipeline sends of the ranks --network-flows does not simulate)
sym_full() { # name, flags...
    local name=$1; shift
    run "$tmp/sf.sym" "$@" --network-flows && run "$tmp/sf.full" "$@" --full || return
    local si sf se fe; si=$(iter_s "$tmp/sf.sym"); sf=$(iter_s "$tmp/sf.full"); se=$(ep_s "$tmp/sf.sym"); fe=$(ep_s "$tmp/sf.full")
    within "$si" "$sf" 0.995 1.005 && within "$se" "$fe" 0.985 1.015 &&
        ok "$name: --network-flows / --full: iteration $(ratio "$si" "$sf"), EP $(ratio "$se" "$fe")" ||
        bad "$name: --network-flows / --full: iteration $si / $sf s ($(ratio "$si" "$sf"), tolerance 0.005), EP $se / $fe s ($(ratio "$se" "$fe"), tolerance 0.015)"
}
sym_full "EP 16 over 2 nodes, forced balance" "${SMALL[@]}" "${ACROSS[@]}"
sym_full "EP 16 over 2 nodes, routing skew" "${SKEW[@]}"
sym_full "EP 16 over 2 nodes, H100, DeepEP, skew" "${SKEW[@]}" --gpu H100-SXM5-80GB --moe-token-dispatcher-type flex \
    --moe-enable-deepep
sym_full "EP 32 over 4 nodes, skew" --model mixtral-8x7b --num-layers 8 --global-batch-size 64 --num-experts 32 \
    --expert-model-parallel-size 32 --gpus 128

# -------- the aux loss's all-reduce beyond the tensor-parallel group: global_aux_loss over a stage's t x cp x d
# ranks, aux_loss with cp 2 over the t x cp consecutive ranks (net_place.h's NET_PLACE_STAGE, NET_PLACE_TCP;
# refused, or run over the cp ring, before): the flows' iteration within 0.5% of the default mode's, the
# all-reduce's cost in the flows within 5% of the default mode's (latency-bound: 8 bytes per expert)
AUX=(--model mixtral-8x7b --num-layers 8 --global-batch-size 64 --moe-aux-loss-coeff 0.01)
for cp in 1 2; do
    for lb in aux_loss global_aux_loss; do
        [ "$cp" = 1 ] && [ "$lb" = aux_loss ] && continue # t x 1: the tensor-parallel group's all-reduce
        name="$lb, cp $cp"
        run "$tmp/aux.default" "${AUX[@]}" --context-parallel-size $cp --moe-router-load-balancing-type $lb || continue
        run "$tmp/noaux.default" "${AUX[@]}" --context-parallel-size $cp --moe-router-load-balancing-type none || continue
        d_cost=$(awk -v a="$(iter_s "$tmp/aux.default")" -v b="$(iter_s "$tmp/noaux.default")" 'BEGIN { print a - b }')
        for mode in network-flows full; do
            run "$tmp/aux.$mode" "${AUX[@]}" --context-parallel-size $cp --moe-router-load-balancing-type $lb --$mode &&
                run "$tmp/noaux.$mode" "${AUX[@]}" --context-parallel-size $cp --moe-router-load-balancing-type none \
                    --$mode || continue
            a=$(iter_s "$tmp/aux.$mode") b=$(iter_s "$tmp/noaux.$mode")
            f_cost=$(awk -v a="$a" -v b="$b" 'BEGIN { print a - b }')
            within "$a" "$(iter_s "$tmp/aux.default")" 0.995 1.005 && within "$f_cost" "$d_cost" 0.95 1.05 &&
                ok "$mode: $name: iteration $(ratio "$a" "$(iter_s "$tmp/aux.default")") x the default mode's, the aux loss $f_cost s ($d_cost s)" ||
                bad "$mode: $name: iteration $a s vs the default mode's $(iter_s "$tmp/aux.default") s, the aux loss $f_cost s vs $d_cost s"
        done
    done
done

# -------- refusals
expect_error 2 "expert-data-parallel groups must lie inside the data-parallel ones" "$TRAINSIM" simulate \
    "${SMALL[@]}" --expert-model-parallel-size 1 --network-flows

# -------- goldens: the small cross-node case in both flow modes, and with routing skew in --full
golden() { # name, flags...
    local name=$1; shift
    run "$tmp/g-$name.txt" "$@" || return
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
        mkdir -p "$G" && cp "$tmp/g-$name.txt" "$G/$name.txt" && ok "$name: golden regenerated"
    elif cmp -s "$tmp/g-$name.txt" "$G/$name.txt"; then ok "$name matches the golden"
    else bad "$name differs from $G/$name.txt:"; diff "$G/$name.txt" "$tmp/g-$name.txt" | head -n 20; fi
}
golden moe-network-flows "${SMALL[@]}" "${ACROSS[@]}" --network-flows
golden moe-full "${SMALL[@]}" "${ACROSS[@]}" --full
golden moe-skew-full "${SKEW[@]}" --full
finish
