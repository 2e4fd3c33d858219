#!/usr/bin/env bash
# trainsim infer and search --inference: the static batch's report and CSV,
# the request stream (same seed, same bytes), the search's ranking and
# Pareto CSV, and bad inputs (exit 2; 3 when the batch does not fit).
# Ends with "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
m=(--model llama2-7b --fp16)

expect_output "static batch: time to first token" "$T" infer "${m[@]}" --batch-size 8
expect_output "largest batch that fits" "$T" infer "${m[@]}" --batch-size 8
"$T" infer "${m[@]}" --batch-size 8 --input-len 256 --output-len 32 --csv "$tmp/s.csv" >/dev/null
check "CSV written" test -s "$tmp/s.csv"
check "CSV header" grep -qx 'scope,metric,value,unit' "$tmp/s.csv"
for k in ttft,.*,ns tpot,.*,ns throughput_per_gpu,.*,tokens/s memory_peak,.*,bytes max_batch; do
    check "CSV has $k" grep -qE "^inference,$k" "$tmp/s.csv"
done
"$T" infer "${m[@]}" --batch-size 8 --input-len 256 --output-len 32 --csv - >"$tmp/s2.csv" 2>/dev/null
check "--csv - gives the same bytes on stdout" cmp -s "$tmp/s.csv" "$tmp/s2.csv"
# TPOT grows with the batch, throughput per GPU too (memory-bound decode)
v() { sed -nE "s/^inference,$2,([^,]*),.*/\1/p" "$1"; }
"$T" infer "${m[@]}" --batch-size 64 --input-len 256 --output-len 32 --csv "$tmp/b64.csv" >/dev/null
check_sh "batch 64: higher TPOT than batch 8" '[ "$(echo "$(v "$tmp/b64.csv" tpot) > $(v "$tmp/s.csv" tpot)" | bc)" = 1 ]'
check_sh "batch 64: more tokens/s per GPU than batch 8" \
    '[ "$(echo "$(v "$tmp/b64.csv" throughput_per_gpu) > 2 * $(v "$tmp/s.csv" throughput_per_gpu)" | bc)" = 1 ]'
# t=2 on 4 GPUs: 2 replicas, throughput in total = 4 x per GPU
"$T" infer "${m[@]}" -t 2 --gpus 4 --batch-size 8 --csv "$tmp/t2.csv" >/dev/null
check_sh "replicas" '[ "$(v "$tmp/t2.csv" replicas)" = 2 ]'
check_sh "total = per GPU x GPUs" \
    '[ "$(echo "x = $(v "$tmp/t2.csv" throughput) - 4 * $(v "$tmp/t2.csv" throughput_per_gpu); x < 0.01 && x > -0.01" | bc)" = 1 ]'

# stream mode
s=(infer "${m[@]}" --batch-size 32 --input-len 256 --output-len 32 --request-rate 4 --num-requests 200)
expect_output "time to first token   mean" "$T" "${s[@]}" --seed 5
"$T" "${s[@]}" --seed 5 --csv "$tmp/r1.csv" >/dev/null
"$T" "${s[@]}" --seed 5 --csv "$tmp/r2.csv" >/dev/null
"$T" "${s[@]}" --seed 6 --csv "$tmp/r3.csv" >/dev/null
check "stream: same seed, same CSV" cmp -s "$tmp/r1.csv" "$tmp/r2.csv"
check "stream: another seed, another CSV" test -n "$(cmp "$tmp/r1.csv" "$tmp/r3.csv")"
for k in ttft_p50 ttft_p99 tpot_p50 tpot_p99 e2e_latency_p99; do
    check "stream CSV has $k" grep -qE "^inference,$k,.*,ns" "$tmp/r1.csv"
done

# precisions
expect_output "fp8;" "$T" infer "${m[@]}" --gpu H100-SXM5-80GB --fp8-format e4m3 --batch-size 8
expect_output "fp16/w-int4/kv-int8" "$T" infer "${m[@]}" --weight-quant int4 --kv-cache-dtype int8 --batch-size 8

# search --inference
"$T" search --inference "${m[@]}" --gpus 8 --batch-sizes 1,8,64 --max-tpot-ms 50 --out "$tmp/p.csv" >"$tmp/p.out"
rc=$?
check "search exits 0" test $rc -eq 0
check "search prints the ranking" grep -q 'tok/s/GPU' "$tmp/p.out"
check "search CSV header" grep -q '^tp,pp,precision,batch,ttft_ms,tpot_ms,latency_ms,throughput_per_gpu' "$tmp/p.csv"
check "search CSV marks a Pareto front" grep -qE ',1,1$' "$tmp/p.csv"
check_sh "every row meeting the limit has TPOT <= 50 ms" \
    '[ -z "$(awk -F, "NR > 1 && \$11 == 1 && \$6 > 50" "$tmp/p.csv")" ]'
check_sh "first row has the highest throughput per GPU among those meeting the limit" \
    '[ "$(awk -F, "NR == 2 {print \$8}" "$tmp/p.csv")" = "$(awk -F, "NR > 1 && \$11 == 1 {print \$8}" "$tmp/p.csv" | sort -g | tail -1)" ]'
expect_error 1 "no deployment" "$T" search --inference "${m[@]}" --gpus 1 --max-tpot-ms 0.001

# bad inputs
expect_error 2 "FP8 tensor cores" "$T" infer "${m[@]}" --gpu A100-SXM4-80GB --fp8-format e4m3
expect_error 2 "--no-bias-gelu-fusion: a training-only flag" "$T" infer "${m[@]}" --no-bias-gelu-fusion
expect_error 2 "--clip-grad: a training-only flag" "$T" infer "${m[@]}" --clip-grad 0
# the MoE training step's flags: refused as training-only before their own rules (GPU, layout) run
for f in "--moe-dispatch-fwd-dtype mxfp8" "--moe-combine-bwd-dtype mxfp8" --delay-wgrad-compute \
    --overlap-moe-expert-parallel-comm; do
    # shellcheck disable=SC2086 # the flag and its value
    expect_error 2 "${f%% *}: a training-only flag" "$T" infer "${m[@]}" $f
    # shellcheck disable=SC2086
    expect_error 2 "${f%% *}: a training-only flag" "$T" search --inference "${m[@]}" --gpus 8 $f
done
expect_error 2 "A100-SXM4-80GB" "$T" infer "${m[@]}" --gpu A100-SXM4-80GB --kv-cache-dtype fp8
expect_error 2 "--batch-size" "$T" infer "${m[@]}" --batch-size 0
expect_error 2 "--input-len" "$T" infer "${m[@]}" --input-len -3
expect_error 2 "context window" "$T" infer "${m[@]}" --input-len 4000 --output-len 200
expect_error 2 "--request-rate" "$T" infer "${m[@]}" --request-rate -1
expect_error 2 "--weight-quant" "$T" infer "${m[@]}" --weight-quant int2
expect_error 2 "fp32" "$T" infer --model llama2-7b --fp32
expect_error 2 "--gpus" "$T" infer "${m[@]}" -t 2 --gpus 3
expect_error 2 "--batch-sizes" "$T" search --inference "${m[@]}" --batch-sizes 1,x
expect_error 2 "does not fit" "$T" infer --model gpt3-175b --fp16 --request-rate 1
expect_error 3 "" "$T" infer --model gpt3-175b --fp16 --batch-size 1
finish
