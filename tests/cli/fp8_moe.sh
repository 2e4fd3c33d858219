#!/usr/bin/env bash
# FP8 in the MoE block through the command line: the MXFP8 dispatch
# (--moe-dispatch-fwd-dtype / --moe-combine-bwd-dtype mxfp8, sim/model/moe_disp.h)
#  - refusals, exit 2: off Blackwell (the GPU named), without FP8 training with
#    --fp8-recipe mxfp8, without experts;
#  - a Mixtral-shaped run on B200 (EP 16 over 2 nodes, forced balance) for the
#    alltoall, allgather and flex (DeepEP) dispatchers: MXFP8 never makes the EP
#    communication slower than bf16, and for the alltoall dispatcher, where half
#    of the all-to-alls carry (h + h/32) bytes a row instead of 2h, its busy EP
#    time lands near (1 + 4224/8192) / 2 = 0.758 of bf16's (the latency terms
#    unchanged: 0.74 to 0.80); either flag alone lies between;
#  - the flow modes (--network-flows, --full) take the volumes from the plan:
#    their EP ratio MXFP8 / bf16 within 1% of the default mode's, each dispatcher;
#  - the report's MoE line names what travels in MXFP8;
#  - DeepSeek-V3's preset on B200 with FP8 (mxfp8 recipe): MXFP8 dispatch
#    lowers the iteration and the exposed EP;
#  - under FP8 the MoE layers save their expert GEMM inputs in FP8: Mixtral
#    8x7B's memory peak on H100 below bf16's.
# Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"

csv() { awk -F, -v k="$1" '$1 == "iteration" && $2 == k { print $3; exit }' <<<"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b > 0 ? a / b : -1) }'; }
between() { awk -v r="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(r >= lo && r <= hi) }'; }

# -------- refusals
MIX=(--model mixtral-8x7b)
expect_error 2 "--moe-dispatch-fwd-dtype mxfp8 needs Blackwell's block-scaled tensor cores (MXFP8); H100-SXM5-80GB" \
    $T simulate "${MIX[@]}" --gpu H100-SXM5-80GB --fp8-format e4m3 --moe-dispatch-fwd-dtype mxfp8
expect_error 2 "--moe-combine-bwd-dtype mxfp8 needs FP8 training with --fp8-recipe mxfp8" \
    $T simulate "${MIX[@]}" --gpu B200-SXM-180GB --moe-combine-bwd-dtype mxfp8
expect_error 2 "got --fp8-recipe delayed" \
    $T simulate "${MIX[@]}" --gpu B200-SXM-180GB --fp8-format hybrid --moe-dispatch-fwd-dtype mxfp8
expect_error 2 "--moe-dispatch-fwd-dtype needs --num-experts" \
    $T simulate --model llama3-8b --gpu B200-SXM-180GB --fp8-format e4m3 --fp8-recipe mxfp8 \
    --moe-dispatch-fwd-dtype mxfp8
expect_error 2 "--moe-dispatch-fwd-dtype" $T simulate "${MIX[@]}" --gpu B200-SXM-180GB --moe-dispatch-fwd-dtype fp8

# -------- EP communication: never slower, the closed form's ratio
B200=(--model mixtral-8x7b --num-layers 8 --global-batch-size 64 --moe-router-force-load-balancing --num-experts 16
    --expert-model-parallel-size 16 --gpu B200-SXM-180GB --fp8-format e4m3 --fp8-recipe mxfp8)
run() { # extra flags...
    $T simulate "${B200[@]}" "$@" --csv - 2>&1
}
for disp in alltoall allgather flex; do
    extra=(--moe-token-dispatcher-type "$disp")
    [ "$disp" = flex ] && extra+=(--moe-enable-deepep --expert-tensor-parallel-size 1)
    b=$(run "${extra[@]}")
    m=$(run "${extra[@]}" --moe-dispatch-fwd-dtype mxfp8 --moe-combine-bwd-dtype mxfp8)
    f=$(run "${extra[@]}" --moe-dispatch-fwd-dtype mxfp8)
    bb=$(csv time_ep "$b") mb=$(csv time_ep "$m") fb=$(csv time_ep "$f")
    be=$(csv exposed_ep "$b") me=$(csv exposed_ep "$m")
    check_sh "$disp: MXFP8 dispatch never slower EP ($mb vs $bb ns busy, $me vs $be ns exposed)" \
        '[ -n "$mb" ] && [ -n "$bb" ] && awk -v a="$mb" -v b="$bb" -v c="$me" -v d="$be" "BEGIN { exit !(a < b && c <= d) }"'
    check_sh "$disp: the forward dispatch alone in MXFP8 between the two ($fb ns)" \
        'awk -v a="$mb" -v b="$bb" -v f="$fb" "BEGIN { exit !(f >= a && f <= b && a < f) }"'
    if [ "$disp" = alltoall ]; then
        r=$(ratio "$mb" "$bb")
        check_sh "alltoall: busy EP MXFP8 / bf16 = $r (closed form 0.758 plus latencies)" 'between "$r" 0.74 0.80'
    fi
done

# -------- the flow modes take the volumes from the plan (DeepEP at p 1, as tests/cli/net_moe.sh: its RDMA
# copies share the NICs with the pipeline sends otherwise)
MX=(--moe-dispatch-fwd-dtype mxfp8 --moe-combine-bwd-dtype mxfp8)
for disp in alltoall allgather flex; do
    extra=(--moe-token-dispatcher-type "$disp")
    [ "$disp" = flex ] && extra+=(--moe-enable-deepep --expert-tensor-parallel-size 1 -p 1 --gpus 32)
    dr=$(ratio "$(csv time_ep "$(run "${extra[@]}" "${MX[@]}")")" "$(csv time_ep "$(run "${extra[@]}")")")
    for mode in network-flows full; do
        fr=$(ratio "$(csv time_ep "$(run "${extra[@]}" --$mode "${MX[@]}")")" "$(csv time_ep "$(run "${extra[@]}" --$mode)")")
        check_sh "$disp --$mode: EP MXFP8 / bf16 = $fr, the default mode's $dr (within 1%)" \
            'awk -v a="$fr" -v b="$dr" "BEGIN { r = a / b; exit !(b > 0 && r >= 0.99 && r <= 1.01) }"'
    done
done

# -------- the report names what travels in MXFP8
expect_output "(alltoall dispatcher; MXFP8: the dispatch and the combine's backward)" \
    $T simulate "${B200[@]}" --moe-token-dispatcher-type alltoall --moe-dispatch-fwd-dtype mxfp8 \
    --moe-combine-bwd-dtype mxfp8
expect_output "(allgather dispatcher; MXFP8: the combine's backward)" \
    $T simulate "${B200[@]}" --moe-token-dispatcher-type allgather --moe-combine-bwd-dtype mxfp8

# -------- DeepSeek-V3 preset on B200
DS=(--model deepseek-v3 --gpu B200-SXM-180GB --fp8-format e4m3 --fp8-recipe mxfp8)
d0=$($T simulate "${DS[@]}" --csv - 2>&1)
d1=$($T simulate "${DS[@]}" --moe-dispatch-fwd-dtype mxfp8 --moe-combine-bwd-dtype mxfp8 --csv - 2>&1)
i0=$(csv iteration_time "$d0") i1=$(csv iteration_time "$d1")
e0=$(csv exposed_ep "$d0") e1=$(csv exposed_ep "$d1")
check_sh "deepseek-v3 on B200: MXFP8 dispatch, iteration $i1 < $i0 ns, exposed EP $e1 < $e0 ns" \
    '[ -n "$i1" ] && [ -n "$e1" ] && awk -v a="$i1" -v b="$i0" -v c="$e1" -v d="$e0" "BEGIN { exit !(a < b && c < d) }"'

# -------- FP8 saved inputs in the MoE layers
p16=$(csv memory_peak "$($T simulate --model mixtral-8x7b --gpu H100-SXM5-80GB --csv - 2>&1)")
p8=$(csv memory_peak "$($T simulate --model mixtral-8x7b --gpu H100-SXM5-80GB --fp8-format hybrid --csv - 2>&1)")
check_sh "mixtral-8x7b on H100: FP8 memory peak $p8 below bf16's $p16 bytes (FP8 saved inputs)" \
    '[ -n "$p8" ] && [ -n "$p16" ] && [ "$p8" -lt "$p16" ]'
finish
