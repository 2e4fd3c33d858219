#!/usr/bin/env bash
# trainsim search with trainsim simulate's flags: the model, precision and
# kernel settings pass through to every candidate (the winner's simulate
# rerun with the same flags gives the same iteration time); the layout
# flags the search chooses are refused naming how to bound or pin them.
# Ends with "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# a small MoE space (p = 1: no stage split), searched in well under a second
sp=(--model qwen3-30b-a3b --gpus 16 --global-batch-size 64 --micro-batch-sizes 1,2 --schedules 1f1b
    --max-tensor-model-parallel-size 2 --max-pipeline-model-parallel-size 1 --no-recompute-block --quiet --top 1)

# The best-ranked simulated candidate of a search CSV with the distributed optimizer (the preset turns it on
# in simulate and no flag turns it off; where memory forces it, the winner), as simulate's flags; its
# iteration time at 3 decimals in row_iter.
row_flags() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $2 == "simulated" && $c["distributed_optimizer"] == 1 && (best == "" || $c["rank"] + 0 < best + 0) {
            best = $c["rank"]; row = $0 }
        END {
            n = split(row, f, ",")
            printf "-t %s -p %s --micro-batch-size %s --schedule %s --use-distributed-optimizer ",
                f[c["tp"]], f[c["pp"]], f[c["micro_batch_size"]], f[c["schedule"]]
            if (f[c["sequence_parallel"]] == 1) printf "--sequence-parallel "
            r = f[c["recompute"]]; sub(/-.*/, "", r); printf "--recompute-granularity %s ", r
            if (f[c["ep"]] != "") {
                printf "--expert-model-parallel-size %s --expert-tensor-parallel-size %s ", f[c["ep"]], f[c["etp"]]
                d = f[c["dispatcher"]]
                printf (d == "flex-deepep" ? "--moe-token-dispatcher-type flex --moe-enable-deepep" : "--moe-token-dispatcher-type " d)
            }
            printf "\n"
            printf "%.3f\n", f[c["iteration_s"]] > "/dev/stderr"
        }' "$1" 2>"$1.iter"
}
row_iter() { cat "$1.iter"; }
best() { awk '$1 == "1" { print $2 }' "$1"; }
# simulate's iteration time in seconds, as search prints it (3 decimals); simulate prints ms below 1 s
sim_iter() { awk '/^iteration time/ { printf "%.3f\n", $3 / ($4 == "ms" ? 1000 : 1) }' "$1"; }

# router settings, and per-iteration costs, from a DeepSeek-V3 / Qwen3 launch script
pass=(--moe-router-dtype fp32 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
      --moe-aux-loss-coeff 0.001 --clip-grad 0)
"$T" search "${sp[@]}" --gpu H100-SXM5-80GB "${pass[@]}" --out "$tmp/p.csv" >"$tmp/p.out" 2>&1
check "pass-through flags: search exits 0" test $? -eq 0
# shellcheck disable=SC2046 # the layout's flags
"$T" simulate --model qwen3-30b-a3b --gpus 16 --global-batch-size 64 --gpu H100-SXM5-80GB --overlap-grad-reduce \
    $(row_flags "$tmp/p.csv") "${pass[@]}" >"$tmp/ps.out" 2>&1
check "the winner simulated with the same flags: exit 0" test $? -eq 0
check "it is the winner (memory forces the distributed optimizer on 80 GiB)" test "$(row_iter "$tmp/p.csv")" = "$(best "$tmp/p.out")"
check "the winner simulated with the same flags: the same iteration time ($(row_iter "$tmp/p.csv") s)" \
    test "$(row_iter "$tmp/p.csv")" = "$(sim_iter "$tmp/ps.out")"
check "the simulation shows the router passed through" grep -q 'sigmoid scores, fp32 GEMM, aux_loss 0.001, expert bias' "$tmp/ps.out"

# metamorphic: a router in fp32 does more work on every candidate, so the best is not faster
"$T" search "${sp[@]}" --gpu H100-SXM5-80GB --out "$tmp/b.csv" >"$tmp/b.out" 2>&1
"$T" search "${sp[@]}" --gpu H100-SXM5-80GB --moe-router-dtype fp32 >"$tmp/f.out" 2>&1
check "--moe-router-dtype fp32: exit 0" test $? -eq 0
check_sh "--moe-router-dtype fp32: the best iteration is slower ($(best "$tmp/b.out") -> $(best "$tmp/f.out") s)" \
    'awk -v a="$(best "$tmp/b.out")" -v b="$(best "$tmp/f.out")" '"'"'BEGIN { exit !(a > 0 && b > a) }'"'"''
# a flag at Megatron-LM's default changes nothing: the same CSV byte for byte
"$T" search "${sp[@]}" --gpu H100-SXM5-80GB --clip-grad 1.0 --moe-router-score-function softmax --out "$tmp/d.csv" \
    >"$tmp/d.out" 2>&1
check "flags at their defaults: the same CSV as without" cmp -s "$tmp/b.csv" "$tmp/d.csv"
# without any: the model resolved as simulate resolves it (Megatron-LM's dropout 0.1 included), the same time
# shellcheck disable=SC2046
"$T" simulate --model qwen3-30b-a3b --gpus 16 --global-batch-size 64 --gpu H100-SXM5-80GB --overlap-grad-reduce \
    $(row_flags "$tmp/b.csv") >"$tmp/bs.out" 2>&1
check "no pass-through flag: the winner's simulation gives the same time ($(row_iter "$tmp/b.csv") s)" \
    test "$(row_iter "$tmp/b.csv")" = "$(sim_iter "$tmp/bs.out")"

# --vocab-size (before padding) is padded for each candidate's t, as simulate pads it (x 128 t)
"$T" search --model megatron-1.7b --gpus 16 --global-batch-size 64 --micro-batch-sizes 1 --schedules 1f1b \
    --max-tensor-model-parallel-size 2 --max-pipeline-model-parallel-size 1 --no-recompute-block --quiet \
    --vocab-size 50257 --out "$tmp/v.csv" >"$tmp/v.out" 2>&1
check "--vocab-size: exit 0" test $? -eq 0
"$T" simulate --model megatron-1.7b --gpus 16 --global-batch-size 64 -t 2 -p 1 --micro-batch-size 1 --schedule 1f1b \
    --use-distributed-optimizer --overlap-grad-reduce --recompute-granularity none --vocab-size 50257 >"$tmp/vs.out" 2>&1
vt=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $2 == "simulated" && $c["tp"] == 2 &&
    $c["sequence_parallel"] == 0 && $c["recompute"] == "none" && $c["distributed_optimizer"] == 1 {
    printf "%.3f", $c["iteration_s"] }' "$tmp/v.csv")
check "--vocab-size: the t = 2 layout's time is simulate's ($vt s, the vocabulary padded to 50432)" \
    test "$vt" = "$(sim_iter "$tmp/vs.out")"

# a flag added to the shared table after the pass-through (--qk-layernorm) passes with no change to search:
# on a model without it, the norms make the best iteration slower, and simulate agrees on the winner
qk=(--model megatron-1.7b --gpus 16 --global-batch-size 64 --micro-batch-sizes 1 --schedules 1f1b
    --max-tensor-model-parallel-size 2 --max-pipeline-model-parallel-size 1 --no-recompute-block --quiet --top 1)
"$T" search "${qk[@]}" >"$tmp/q0.out" 2>&1
"$T" search "${qk[@]}" --qk-layernorm --out "$tmp/q1.csv" >"$tmp/q1.out" 2>&1
check "--qk-layernorm: exit 0" test $? -eq 0
check_sh "--qk-layernorm: the best iteration is slower ($(best "$tmp/q0.out") -> $(best "$tmp/q1.out") s)" \
    'awk -v a="$(best "$tmp/q0.out")" -v b="$(best "$tmp/q1.out")" '"'"'BEGIN { exit !(a > 0 && b > a) }'"'"''
# shellcheck disable=SC2046
"$T" simulate --model megatron-1.7b --gpus 16 --global-batch-size 64 --overlap-grad-reduce $(row_flags "$tmp/q1.csv") \
    --qk-layernorm >"$tmp/q1s.out" 2>&1
check "--qk-layernorm: the winner's simulation gives the same time ($(row_iter "$tmp/q1.csv") s)" \
    test "$(row_iter "$tmp/q1.csv")" = "$(sim_iter "$tmp/q1s.out")"

# MXFP8 dispatch and combine on Blackwell (with search's own --fp8-format / --fp8-recipe)
mx=(--moe-dispatch-fwd-dtype mxfp8 --moe-combine-bwd-dtype mxfp8)
"$T" search "${sp[@]}" --gpu B200-SXM-180GB --fp8-format e4m3 --fp8-recipe mxfp8 "${mx[@]}" --out "$tmp/mx.csv" \
    >"$tmp/mx.out" 2>&1
check "MXFP8 dispatch: search exits 0" test $? -eq 0
# shellcheck disable=SC2046
"$T" simulate --model qwen3-30b-a3b --gpus 16 --global-batch-size 64 --gpu B200-SXM-180GB --overlap-grad-reduce \
    --fp8-format e4m3 --fp8-recipe mxfp8 $(row_flags "$tmp/mx.csv") "${mx[@]}" >"$tmp/mxs.out" 2>&1
check "MXFP8 dispatch: the best layout with the distributed optimizer simulated: the same time ($(row_iter "$tmp/mx.csv") s)" \
    test "$(row_iter "$tmp/mx.csv")" = "$(sim_iter "$tmp/mxs.out")"
check_sh "MXFP8 dispatch: every simulated candidate's memory bound is at most its peak" \
    'awk -F, '"'"'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR > 1 && $2 == "simulated" { n++; if ($c["mem_bound_gib"] > $c["peak_mem_gib"]) bad = 1 } END { exit bad || n < 10 }'"'"' "$tmp/mx.csv"'
"$T" search "${sp[@]}" --gpu H100-SXM5-80GB --moe-dispatch-fwd-dtype mxfp8 >"$tmp/mxh.out" 2>&1
check_sh "MXFP8 dispatch on H100: exit 2 with simulate's rule" \
    '[ $? -eq 2 ] && grep -q "needs Blackwell" "$tmp/mxh.out"'

# a launch script and the pass-through flags together
cp "$(dirname "$0")/../data/scripts/mixtral_8x7b.sh" "$tmp/mixtral.sh"
"$T" search --megatron-script "$tmp/mixtral.sh" --gpus 64 --quiet --top 1 --micro-batch-sizes 1 --schedules 1f1b \
    --max-tensor-model-parallel-size 2 --no-recompute-block --moe-router-dtype fp32 >"$tmp/s.out" 2>&1
check "--megatron-script with --moe-router-dtype fp32: exit 0" test $? -eq 0
check "--megatron-script with --moe-router-dtype fp32: a ranked MoE layout" grep -qE '^ +1 .* ep=[0-9]+ etp=' "$tmp/s.out"

# --try-overlap-moe-expert-parallel-comm: the overlapped EP pairs tried where their rules hold (ep_pair.h)
ov=(--model qwen3-30b-a3b --gpus 32 --global-batch-size 128 --micro-batch-sizes 1 --schedules 1f1b,interleaved
    --max-virtual-pipeline-stages 2 --max-tensor-model-parallel-size 2 --max-pipeline-model-parallel-size 2
    --no-recompute-block --quiet --top 1 --gpu H100-SXM5-80GB)
"$T" search "${ov[@]}" --out "$tmp/o0.csv" >"$tmp/o0.out" 2>&1
"$T" search "${ov[@]}" --try-overlap-moe-expert-parallel-comm --out "$tmp/o1.csv" >"$tmp/o1.out" 2>&1
check "--try-overlap-moe-expert-parallel-comm: exit 0" test $? -eq 0
check "without it no candidate overlaps" \
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR > 1 && $c["ep_overlap"] == 1 { exit 1 }' "$tmp/o0.csv"
check_sh "with it the overlapped candidates keep the rules (ep > 1, all-to-all, no full recompute, v > 1 or p = 1)" \
    'awk -F, '"'"'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR > 1 && $c["ep_overlap"] == 1 { n++
        if ($c["ep"] < 2 || $c["dispatcher"] == "allgather" || $c["recompute"] ~ /^full/ ||
            !(($c["schedule"] == "interleaved" && $c["vp"] > 1) || ($c["schedule"] == "1f1b" && $c["pp"] == 1))) bad = 1 }
        END { exit bad || n < 10 }'"'"' "$tmp/o1.csv"'
check_sh "overlapped candidates simulated on both schedules, bound <= peak" \
    'awk -F, '"'"'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR > 1 && $c["ep_overlap"] == 1 && $2 == "simulated" {
        s[$c["schedule"]]++; if ($c["mem_bound_gib"] > $c["peak_mem_gib"]) bad = 1 }
        END { exit bad || !s["1f1b"] || !s["interleaved"] }'"'"' "$tmp/o1.csv"'
check_sh "more candidates: the best is not slower ($(best "$tmp/o0.out") -> $(best "$tmp/o1.out") s)" \
    'awk -v a="$(best "$tmp/o0.out")" -v b="$(best "$tmp/o1.out")" '"'"'BEGIN { exit !(b > 0 && b <= a) }'"'"''
if grep -qE '^ +1 .* ep-overlap$' "$tmp/o1.out"; then
    # shellcheck disable=SC2046
    "$T" simulate --model qwen3-30b-a3b --gpus 32 --global-batch-size 128 --gpu H100-SXM5-80GB --overlap-grad-reduce \
        $(row_flags "$tmp/o1.csv") --overlap-moe-expert-parallel-comm >"$tmp/o1s.out" 2>&1
    check "the overlapped winner's simulation gives the same time ($(row_iter "$tmp/o1.csv") s)" \
        test "$(row_iter "$tmp/o1.csv")" = "$(sim_iter "$tmp/o1s.out")"
    check "it is the winner" test "$(row_iter "$tmp/o1.csv")" = "$(best "$tmp/o1.out")"
else
    check "the winner overlaps its EP pairs" false
fi
# --delay-wgrad-compute with it: set on the overlapped candidates only (it needs the overlap)
"$T" search "${ov[@]}" --try-overlap-moe-expert-parallel-comm --delay-wgrad-compute --out "$tmp/o3.csv" \
    >"$tmp/o3.out" 2>&1
check "--delay-wgrad-compute with --try-overlap-moe-expert-parallel-comm: exit 0" test $? -eq 0
# index -> status, iteration time of the simulated rows, by overlap
cand_times() {
    awk -F, -v ov="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["ep_overlap"] == ov && $2 == "simulated" { print $c["index"], $c["iteration_s"] }' "$1"
}
check_sh "the candidates without the overlap: the same times as without --delay-wgrad-compute" \
    '[ -n "$(cand_times "$tmp/o1.csv" 0)" ] && diff <(cand_times "$tmp/o1.csv" 0) <(cand_times "$tmp/o3.csv" 0) >/dev/null'
check_sh "the overlapped candidates: some time changed (the weight gradients delayed)" \
    '! diff <(cand_times "$tmp/o1.csv" 1) <(cand_times "$tmp/o3.csv" 1) >/dev/null'
if grep -qE '^ +1 .* ep-overlap$' "$tmp/o3.out"; then
    # shellcheck disable=SC2046
    "$T" simulate --model qwen3-30b-a3b --gpus 32 --global-batch-size 128 --gpu H100-SXM5-80GB --overlap-grad-reduce \
        $(row_flags "$tmp/o3.csv") --overlap-moe-expert-parallel-comm --delay-wgrad-compute >"$tmp/o3s.out" 2>&1
    check "the delayed overlapped winner's simulation gives the same time ($(row_iter "$tmp/o3.csv") s)" \
        test "$(row_iter "$tmp/o3.csv")" = "$(sim_iter "$tmp/o3s.out")"
    check "it is the winner" test "$(row_iter "$tmp/o3.csv")" = "$(best "$tmp/o3.out")"
else
    check "the winner with --delay-wgrad-compute overlaps its EP pairs" false
fi
# the best-ranked overlapped candidate (distributed optimizer) whose time the delayed weight gradients changed
# (the winner's may not change: a p = 1 pair hides its all-to-alls either way)
awk -F, 'NR == FNR { if (FNR > 1) t[$1] = $0; next }
    FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; print; next }
    $2 == "simulated" && $c["ep_overlap"] == 1 && $c["distributed_optimizer"] == 1 && $0 != t[$1] &&
    (best == "" || $c["rank"] + 0 < best + 0) { best = $c["rank"]; row = $0 }
    END { if (row != "") print row }' "$tmp/o1.csv" "$tmp/o3.csv" >"$tmp/o3d.csv"
if [ "$(wc -l <"$tmp/o3d.csv")" -eq 2 ]; then
    # shellcheck disable=SC2046
    "$T" simulate --model qwen3-30b-a3b --gpus 32 --global-batch-size 128 --gpu H100-SXM5-80GB --overlap-grad-reduce \
        $(row_flags "$tmp/o3d.csv") --overlap-moe-expert-parallel-comm --delay-wgrad-compute >"$tmp/o3e.out" 2>&1
    check "a changed overlapped candidate simulated with --delay-wgrad-compute: the same time ($(row_iter "$tmp/o3d.csv") s)" \
        test "$(row_iter "$tmp/o3d.csv")" = "$(sim_iter "$tmp/o3e.out")"
    # shellcheck disable=SC2046
    "$T" simulate --model qwen3-30b-a3b --gpus 32 --global-batch-size 128 --gpu H100-SXM5-80GB --overlap-grad-reduce \
        $(row_flags "$tmp/o3d.csv") --overlap-moe-expert-parallel-comm >"$tmp/o3f.out" 2>&1
    check "the same candidate without it: another time ($(sim_iter "$tmp/o3f.out") s)" \
        test "$(row_iter "$tmp/o3d.csv")" != "$(sim_iter "$tmp/o3f.out")"
else
    check "an overlapped candidate with the distributed optimizer changed by --delay-wgrad-compute" false
fi
"$T" search "${sp[@]}" --delay-wgrad-compute=maybe >"$tmp/o4.out" 2>&1
check_sh "--delay-wgrad-compute=maybe: exit 2 naming the values" '[ $? -eq 2 ] && grep -q "true|false" "$tmp/o4.out"'
"$T" search --model megatron-1.7b --gpus 16 --try-overlap-moe-expert-parallel-comm >"$tmp/o2.out" 2>&1
check_sh "--try-overlap-moe-expert-parallel-comm on a dense model: exit 2" \
    '[ $? -eq 2 ] && grep -q "needs a mixture of experts" "$tmp/o2.out"'

# the layout the search chooses: refused, naming how to bound or pin it
refused() { # flag words..., then the expected text after "--"
    local args=() want
    while [ "$1" != "--" ]; do
        args+=("$1")
        shift
    done
    want=$2
    "$T" search "${sp[@]}" "${args[@]}" >"$tmp/r.out" 2>&1
    local rc=$?
    check_sh "search ${args[*]}: exit 2 saying \"$want\"" '[ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/r.out"'
}
refused -t 2 -- "the search chooses t; bound it with --max-tensor-model-parallel-size"
refused --tensor-model-parallel-size=2 -- "bound it with --max-tensor-model-parallel-size"
refused -p 2 -- "bound it with --max-pipeline-model-parallel-size"
refused --micro-batch-size 1 -- "--micro-batch-sizes"
refused --schedule 1f1b -- "give those to try with --schedules"
refused --sequence-parallel -- "--no-sequence-parallel"
refused --recompute-granularity full -- "the search chooses the recomputation"
refused --use-distributed-optimizer -- "--no-distributed-optimizer"
refused --context-parallel-size 2 -- "bound it with --max-context-parallel-size"
refused --expert-model-parallel-size 8 -- "bound it with --max-expert-model-parallel-size"
refused --expert-tensor-parallel-size 1 -- "--no-expert-tensor-parallel"
refused --moe-token-dispatcher-type alltoall -- "--dispatchers"
refused --moe-enable-deepep -- "--dispatchers flex-deepep"
refused --overlap-moe-expert-parallel-comm -- "--try-overlap-moe-expert-parallel-comm tries it"
refused --moe-layer-recompute -- "the search chooses the recomputation"
refused --delay-wgrad-compute -- "needs --overlap-moe-expert-parallel-comm"
refused --delay-wgrad-compute -- "give --try-overlap-moe-expert-parallel-comm too"
# simulate's own options (not the shared flags) and unknown flags: unknown to search
"$T" search "${sp[@]}" --trace "$tmp/x.json" >"$tmp/u.out" 2>&1
check_sh "simulate's --trace: exit 2 (not a search flag)" '[ $? -eq 2 ] && grep -q -- "--trace" "$tmp/u.out"'
"$T" search "${sp[@]}" --bogus-flag >"$tmp/u2.out" 2>&1
check "an unknown flag: exit 2" test $? -eq 2
finish
