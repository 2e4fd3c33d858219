#!/usr/bin/env bash
# Command-line tests of measured per-expert loads: trainsim simulate
# --moe-expert-load FILE (the file's errors, its refusals with the other
# routing flags, the report) and trainexec --moe-load-out FILE, closing the
# loop: the simulator's load factors of the per-layer file trainexec wrote
# equal the ones trainexec printed for each MoE layer of the same run.
# Ends with "N passed, N failed".
set -u
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

small="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64 --micro-batch-size 1"
moe="--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --moe-ffn-hidden-size 64"
sim() { "$TRAINSIM" simulate $small $moe --expert-model-parallel-size 2 --gpus 2 "$@"; }

out=$("$TRAINSIM" simulate --help 2>&1)
check_sh "--help lists --moe-expert-load with its unit and default" \
    '[[ "$out" == *"--moe-expert-load FILE"* && "$out" == *"routed token-slots per expert"* && "$out" == *"the --moe-routing-skew model"* ]]'

printf 'layer,expert,tokens\nall,0,300\nall,1,100\nall,2,50\nall,3,50\n' >"$tmp/skew.csv"
out=$(sim --moe-expert-load "$tmp/skew.csv" 2>&1); rc=$?
# experts 0, 1 on EP rank 0: 400 of 500, over the mean 250: 1.6
check_sh "the report names the file and the busiest rank's 400 / 250 = 1.600x" \
    '[ $rc -eq 0 ] && [[ "$out" == *"routing                 measured per-expert loads (--moe-expert-load $tmp/skew.csv): busiest EP rank 1.600x the mean tokens"* && "$out" == *"imbalance cost"* ]]'
csv=$(sim --moe-expert-load "$tmp/skew.csv" --csv - 2>/dev/null)
check_sh "CSV: moe_load_factor 1.6, moe_measured_loads 1, a positive imbalance time" \
    '[[ "$csv" == *"iteration,moe_load_factor,1.6,x mean"* && "$csv" == *"iteration,moe_measured_loads,1,bool"* ]] &&
     [ "$(grep -oP "^iteration,moe_imbalance_time,\K[0-9]+" <<<"$csv")" -gt 0 ]'
printf 'expert,tokens\n0,1\n1,1\n2,1\n3,1\n' >"$tmp/uni.csv"
csv=$(sim --moe-expert-load "$tmp/uni.csv" --csv - 2>/dev/null)
check_sh "uniform loads: load factor 1, no imbalance cost" \
    '[[ "$csv" == *"iteration,moe_load_factor,1,x mean"* && "$csv" == *"iteration,moe_imbalance_time,0,ns"* ]]'

printf 'expert,tokens\n0,1\n1,1\n2,1\n7,1\n' >"$tmp/bad.csv"
expect_error 2 "--moe-expert-load: $tmp/bad.csv:5: column 'expert': '7' is not an expert (valid: an integer 0 to 3, --num-experts 4)" \
    sim --moe-expert-load "$tmp/bad.csv"
printf 'expert,tokens\n0,1\n1,1\n2,-1\n3,1\n' >"$tmp/neg.csv"
expect_error 2 "$tmp/neg.csv:4: column 'tokens': '-1' is not a token count" sim --moe-expert-load "$tmp/neg.csv"
# per-layer rows: layer 2's expert 0 holds 500 of 800 (EP rank 0: 600 / 400 = 1.5), the others uniform
{ echo layer,expert,tokens; for l in 0 1 2 3; do for x in 0 1 2 3; do
      echo "$l,$x,$(( l == 2 && x == 0 ? 500 : 100 ))"; done; done; } >"$tmp/per.csv"
out=$(sim --moe-expert-load "$tmp/per.csv" 2>&1); rc=$?
check_sh "per-layer loads: the report gives the busiest layer's 1.500x (layer 2) and the least loaded's 1.000x" \
    '[ $rc -eq 0 ] && [[ "$out" == *"measured per-layer loads (--moe-expert-load $tmp/per.csv): busiest EP rank 1.500x the mean tokens (layer 2) to 1.000x"* ]]'
csv=$(sim --moe-expert-load "$tmp/per.csv" --csv - 2>/dev/null)
check_sh "per-layer CSV: moe_load_factor 1.5, moe_load_factor_min 1, moe_busiest_layer 2" \
    '[[ "$csv" == *"iteration,moe_load_factor,1.5,x mean"* && "$csv" == *"iteration,moe_load_factor_min,1,x mean"* && "$csv" == *"iteration,moe_busiest_layer,2,layer"* ]]'
# one layer at 1.5 is slower than none, faster than every layer at 1.5 (skew.csv is 1.6 everywhere)
t_per=$(grep -oP "^iteration,iteration_time,\K[0-9]+" <<<"$csv")
t_uni=$(sim --moe-expert-load "$tmp/uni.csv" --csv - 2>/dev/null | grep -oP "^iteration,iteration_time,\K[0-9]+")
t_all=$(sim --moe-expert-load "$tmp/skew.csv" --csv - 2>/dev/null | grep -oP "^iteration,iteration_time,\K[0-9]+")
check_sh "one skewed layer: slower than uniform, faster than every layer skewed ($t_uni < $t_per < $t_all ns)" \
    '[ -n "$t_per" ] && [ "$t_uni" -lt "$t_per" ] && [ "$t_per" -lt "$t_all" ]'
expect_error 2 "network model: per-layer --moe-expert-load with load factors 1.000 to 1.500: not modelled" \
    sim --moe-expert-load "$tmp/per.csv" --network-flows
grep -v "^1," "$tmp/per.csv" >"$tmp/nolayer.csv"
expect_error 2 "--moe-expert-load: $tmp/nolayer.csv: column 'layer': MoE layer 1 has no rows (per-layer loads give every MoE layer: 0, 1, 2, 3" \
    sim --moe-expert-load "$tmp/nolayer.csv"
expect_error 2 "$tmp/per.csv:6: column 'layer': layer 1 is not a MoE layer (the MoE layers of --moe-layer-freq: 0, 2)" \
    sim --moe-expert-load "$tmp/per.csv" --moe-layer-freq 2
sed '3s/^0,1,/0,0,/' "$tmp/per.csv" >"$tmp/dup.csv"
expect_error 2 "$tmp/dup.csv:3: column 'expert': expert 0 of layer 0 is given twice (first at line 2" \
    sim --moe-expert-load "$tmp/dup.csv"
sed '5d' "$tmp/per.csv" >"$tmp/short.csv"
expect_error 2 "$tmp/short.csv: column 'expert': expert 3 of layer 0 has no row (give one row per expert 0 to 3, --num-experts 4; 3 given)" \
    sim --moe-expert-load "$tmp/short.csv"
printf 'layer,expert,tokens\n0,0,1\nall,1,1\n' >"$tmp/mixed.csv"
expect_error 2 "$tmp/mixed.csv:3: column 'layer': 'all' mixes the two forms (line 2 has a layer number)" \
    sim --moe-expert-load "$tmp/mixed.csv"
expect_error 2 "--moe-expert-load with --moe-routing-skew" sim --moe-expert-load "$tmp/uni.csv" --moe-routing-skew 0.5
expect_error 2 "--moe-expert-load with --moe-router-force-load-balancing" \
    sim --moe-expert-load "$tmp/uni.csv" --moe-router-force-load-balancing
expect_error 1 "--moe-expert-load: $tmp/none.csv: cannot open" sim --moe-expert-load "$tmp/none.csv"

if [ ! -x "${TRAINEXEC:-}" ] || ! command -v mpirun >/dev/null; then
    echo "trainexec not built (no MPI): the loop skipped"; finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { timeout 120 mpirun --oversubscribe -np "$@"; }

out=$(run 2 "$TRAINEXEC" $small $moe --expert-model-parallel-size 2 --iterations 2 --warmup 1 \
      --moe-load-out "$tmp/L.csv" 2>&1); rc=$?
check_sh "trainexec --moe-load-out: one row per MoE layer and expert, no temporary left" \
    '[ $rc -eq 0 ] && [ "$(grep -c "^[0-3],[0-3],[0-9]*$" "$tmp/L.csv")" -eq 16 ] && [ -z "$(ls -A "$tmp" | grep "^\.")" ]'
# trainexec prints each MoE layer's factor; the simulator reports the largest (and its layer) and the smallest
per=$(grep -oP "MoE load, layer \K[0-9]+ \(ep 2\): moe_rank_load_factor of the layer's per-expert rows [0-9.]+" <<<"$out" |
      awk '{print $1, $NF}')
read -r m_layer m_max m_min <<<"$(sort -k2,2gr -k1,1n <<<"$per" | awk 'NR==1{l=$1; mx=$2} {mn=$2} END{print l, mx, mn}')"
csv=$(sim --moe-expert-load "$tmp/L.csv" --csv - 2>/dev/null)
s_max=$(grep -oP "^iteration,moe_load_factor,\K[0-9.e+-]+" <<<"$csv")
s_min=$(grep -oP "^iteration,moe_load_factor_min,\K[0-9.e+-]+" <<<"$csv")
s_layer=$(grep -oP "^iteration,moe_busiest_layer,\K[0-9]+" <<<"$csv")
check_sh "the loop: trainexec printed 4 per-layer factors" '[ "$(wc -l <<<"$per")" -eq 4 ]'
check_sh "the loop: the busiest layer's factor agrees (layer $m_layer $m_max vs layer $s_layer $s_max)" \
    '[ -n "$m_max" ] && [ -n "$s_max" ] && [ "$m_layer" = "$s_layer" ] && awk -v a="$m_max" -v b="$s_max" "BEGIN{exit !(a - b < 5e-7 && b - a < 5e-7)}"'
check_sh "the loop: the least loaded layer's factor agrees ($m_min vs $s_min)" \
    '[ -n "$m_min" ] && [ -n "$s_min" ] && awk -v a="$m_min" -v b="$s_min" "BEGIN{exit !(a - b < 5e-7 && b - a < 5e-7)}"'
# every layer's rows alone, as a whole-model file: that layer's printed factor
ok=0
while read -r l f; do
    { echo layer,expert,tokens; grep "^$l," "$tmp/L.csv" | sed "s/^$l,/all,/"; } >"$tmp/one.csv"
    g=$(sim --moe-expert-load "$tmp/one.csv" --csv - 2>/dev/null | grep -oP "^iteration,moe_load_factor,\K[0-9.e+-]+")
    awk -v a="$f" -v b="$g" "BEGIN{exit !(a - b < 5e-7 && b - a < 5e-7)}" && ok=$((ok + 1))
done <<<"$per"
check_sh "the loop: each layer's rows alone give that layer's printed factor ($ok of 4)" '[ "$ok" -eq 4 ]'
sum=$(awk -F, "/^[0-9]+,/{s+=\$3} END{print s}" "$tmp/L.csv")
# 2 iterations x 4 MoE layers x 2 ranks x 16 tokens x top-2
check_sh "the file's tokens are every routed copy of the measured iterations: 2 x 4 x 2 x 16 x 2 = 512 ($sum)" '[ "$sum" = 512 ]'
out=$(run 1 "$TRAINEXEC" $small --moe-load-out "$tmp/D.csv" 2>&1); rc=$?
check_sh "trainexec --moe-load-out on a dense model: exit 2" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--moe-load-out $tmp/D.csv needs --num-experts"* ]] && [ ! -e "$tmp/D.csv" ]'
out=$(run 1 "$TRAINEXEC" $small $moe --moe-expert-load "$tmp/uni.csv" 2>&1); rc=$?
check_sh "trainexec refuses --moe-expert-load (its router routes)" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--moe-expert-load $tmp/uni.csv: the executor routes with its own router"* ]]'
finish
