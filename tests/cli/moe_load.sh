#!/usr/bin/env bash
# Command-line tests of measured per-expert loads: trainsim simulate
# --moe-expert-load FILE (the file's errors, its refusals with the other
# routing flags, the report) and trainexec --moe-load-out FILE, closing the
# loop: the simulator's load factor of the file trainexec wrote equals the
# one trainexec printed for the same run. Ends with "N passed, N failed".
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
printf 'layer,expert,tokens\n1,0,1\n' >"$tmp/layer.csv"
expect_error 2 "per-layer loads (layer 1) are not modelled" sim --moe-expert-load "$tmp/layer.csv"
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
check_sh "trainexec --moe-load-out: one row per expert, no temporary left" \
    '[ $rc -eq 0 ] && [ "$(grep -c "^all,[0-3],[0-9]*$" "$tmp/L.csv")" -eq 4 ] && [ -z "$(ls -A "$tmp" | grep "^\.")" ]'
measured=$(grep -oP "moe_rank_load_factor of the measured per-expert rows \K[0-9.]+" <<<"$out")
csv=$(sim --moe-expert-load "$tmp/L.csv" --csv - 2>/dev/null)
simulated=$(grep -oP "^iteration,moe_load_factor,\K[0-9.e+-]+" <<<"$csv")
check_sh "the loop: simulate --moe-expert-load of trainexec's file gives its printed load factor ($measured vs $simulated)" \
    '[ -n "$measured" ] && [ -n "$simulated" ] && awk -v a="$measured" -v b="$simulated" "BEGIN{exit !(a - b < 5e-7 && b - a < 5e-7)}"'
sum=$(awk -F, "/^all,/{s+=\$3} END{print s}" "$tmp/L.csv")
# 2 iterations x 4 MoE layers x 2 ranks x 16 tokens x top-2
check_sh "the file's tokens are every routed copy of the measured iterations: 2 x 4 x 2 x 16 x 2 = 512 ($sum)" '[ "$sum" = 512 ]'
out=$(run 1 "$TRAINEXEC" $small --moe-load-out "$tmp/D.csv" 2>&1); rc=$?
check_sh "trainexec --moe-load-out on a dense model: exit 2" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--moe-load-out $tmp/D.csv needs --num-experts"* ]] && [ ! -e "$tmp/D.csv" ]'
out=$(run 1 "$TRAINEXEC" $small $moe --moe-expert-load "$tmp/uni.csv" 2>&1); rc=$?
check_sh "trainexec refuses --moe-expert-load (its router routes)" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--moe-expert-load $tmp/uni.csv: the executor routes with its own router"* ]]'
finish
