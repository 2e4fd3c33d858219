#!/usr/bin/env bash
# Command-line tests of trainexec --inference (KV-cache decoding, measured):
# help, a 1-rank and a tensor-parallel 2-rank run and their CSVs, the
# per-op decode samples and their fit by trainsim calibrate --decode, and
# bad flag combinations (exit 2). Ends with "N passed, N failed". Needs
# mpirun; says so and counts nothing when trainexec was not built (no MPI).
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -x "${TRAINEXEC:-}" ] || ! command -v mpirun >/dev/null; then
    echo "trainexec not built (no MPI): skipped"; finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { timeout 120 mpirun --oversubscribe -np "$@"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# the CSV cell of column $2 in row 2 of file $1
cell() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i } NR == 2 { print $k }' "$1"; }

out=$(run 1 "$TRAINEXEC" --help 2>&1)
check_sh "--help lists the inference flags with units" \
    '[[ "$out" == *--inference* && "$out" == *--input-len* && "$out" == *--output-len* && "$out" == *--decode-samples* && "$out" == *tokens* ]]'

# L=2, h=64, 4 heads, s=32, V=128
m="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --padded-vocab-size 128 --micro-batch-size 2"
# (--batch-size stands for --micro-batch-size, which is then not needed)
out=$(run 1 "$TRAINEXEC" ${m% --micro-batch-size 2} --inference --batch-size 4 --input-len 8 --output-len 16 --iterations 2 --warmup 1 \
      --output "$tmp/inf.csv" --decode-samples "$tmp/dec.csv" 2>&1); rc=$?
check_sh "1 rank: exit 0, prefill and decode step times printed" \
    '[ $rc -eq 0 ] && [[ "$out" == *"prefill"* && "$out" == *"decode step mean"* && "$out" == *"tokens/s"* ]]'
check_sh "--output: a header and one row" '[ "$(wc -l <"$tmp/inf.csv")" -eq 2 ]'
check_sh "--output: B=4 (--batch-size), I=8, O=16, 2 iterations" \
    '[ "$(cell "$tmp/inf.csv" batch)" = 4 ] && [ "$(cell "$tmp/inf.csv" input_len)" = 8 ] && [ "$(cell "$tmp/inf.csv" output_len)" = 16 ] && [ "$(cell "$tmp/inf.csv" iterations)" = 2 ]'
# 2 (K, V) x 2 layers x 64 x 4 bytes per token, 4 sequences x 32 positions
check_sh "--output: KV cache bytes = 2 x L x h x 4 x B x s = 131072" '[ "$(cell "$tmp/inf.csv" kv_cache_bytes)" = 131072 ]'
p50=$(cell "$tmp/inf.csv" decode_step_p50_ns); p99=$(cell "$tmp/inf.csv" decode_step_p99_ns)
tps=$(cell "$tmp/inf.csv" decode_tokens_per_s); mean=$(cell "$tmp/inf.csv" decode_step_mean_ns)
check_sh "--output: 0 < p50 <= p99, decode tokens/s = B / mean step" \
    'awk -v a="$p50" -v b="$p99" -v t="$tps" -v m="$mean" "BEGIN { r = t * m / 1e9; exit !(a > 0 && a <= b && r > 3.999 && r < 4.001) }"'
# per step: embed, 11 ops per layer, lnf, logits = 25; 2 iterations x 16 steps
check_sh "--decode-samples: 25 ops x 32 measured steps, sample header" \
    '[ "$(wc -l <"$tmp/dec.csv")" -eq 801 ] && [ "$(head -1 "$tmp/dec.csv")" = "kind,name,dtype,m,n,k,batch,bytes,ranks,rep,time_ns" ]'
attn10=$(awk -F, '$2 == "attn" && $5 == 10 && $6 == 0 { print $8; exit }' "$tmp/dec.csv")
attn11=$(awk -F, '$2 == "attn" && $5 == 11 && $6 == 0 { print $8; exit }' "$tmp/dec.csv")
check_sh "--decode-samples: attention bytes grow by 2 x B x h x 4 = 2048 per cached position" \
    '[ -n "$attn10" ] && [ $((attn11 - attn10)) -eq 2048 ]'

if [ -x "${TRAINSIM:-}" ]; then
    out=$("$TRAINSIM" calibrate --decode "$tmp/dec.csv" --decode-output "$tmp/fit.csv" --gpu H100 2>&1); rc=$?
    check_sh "calibrate --decode: exit 0, the two decode constants printed" \
        '[ $rc -eq 0 ] && [[ "$out" == *decode_hbm_efficiency* && "$out" == *decode_launch_overhead_ns* ]]'
    check_sh "calibrate --decode-output: quantity,value rows with both names" \
        'grep -q "^decode_hbm_efficiency," "$tmp/fit.csv" && grep -q "^decode_launch_overhead_ns," "$tmp/fit.csv"'
    expect_error 2 "--decode-output" "$TRAINSIM" calibrate --decode "$tmp/dec.csv"
    expect_error 2 "reference bandwidth" "$TRAINSIM" calibrate --decode "$tmp/dec.csv" --decode-output "$tmp/f2.csv"
    printf 'kind,name,bytes,time_ns\ngemm,x,10,5\n' >"$tmp/bad.csv"
    expect_error 2 "not a decode sample" "$TRAINSIM" calibrate --decode "$tmp/bad.csv" --decode-output "$tmp/f3.csv" --gpu H100
    check_sh "a refused fit writes no --decode-output" '[ ! -e "$tmp/f2.csv" ] && [ ! -e "$tmp/f3.csv" ]'
fi

out=$(run 2 "$TRAINEXEC" $m --inference --tensor-model-parallel-size 2 --batch-size 4 --input-len 8 --output-len 4 \
      --iterations 1 --output "$tmp/tp.csv" 2>&1); rc=$?
check_sh "t=2 on 2 ranks: exit 0, tp 2, each rank caches half the heads (65536 bytes)" \
    '[ $rc -eq 0 ] && [ "$(cell "$tmp/tp.csv" tp)" = 2 ] && [ "$(cell "$tmp/tp.csv" kv_cache_bytes)" = 65536 ]'

out=$(run 1 "$TRAINEXEC" $m --inference --input-len 20 --output-len 13 2>&1); rc=$?
check_sh "input + output past --seq-length: exit 2 naming it" '[ $rc -eq 2 ] && [[ "$out" == *--seq-length* && "$out" == *33* ]]'
out=$(run 1 "$TRAINEXEC" $m --inference --qk-layernorm 2>&1); rc=$?
check_sh "--qk-layernorm with --inference: exit 2 naming the flag (training runs it)" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--qk-layernorm with --inference"* ]]'
out=$(run 2 "$TRAINEXEC" $m --inference --pipeline-model-parallel-size 2 2>&1); rc=$?
check_sh "pipeline-parallel inference: exit 2, not implemented" '[ $rc -eq 2 ] && [[ "$out" == *"pipeline-parallel decoding is not implemented"* ]]'
out=$(run 1 "$TRAINEXEC" $m --output "$tmp/x.csv" 2>&1); rc=$?
check_sh "--output without --inference: exit 2" '[ $rc -eq 2 ] && [[ "$out" == *"--output is an --inference flag"* ]]'
out=$(run 1 "$TRAINEXEC" $m --batch-size 4 2>&1); rc=$?
check_sh "--batch-size for training: exit 2 pointing at --micro-batch-size" '[ $rc -eq 2 ] && [[ "$out" == *--micro-batch-size* ]]'
out=$(run 1 "$TRAINEXEC" $m --inference --trace "$tmp/t.json" 2>&1); rc=$?
check_sh "--inference with a training output: exit 2 naming it" '[ $rc -eq 2 ] && [[ "$out" == *"--inference with --trace"* ]]'
out=$(run 1 "$TRAINEXEC" $m --inference --output-len 0 2>&1); rc=$?
check_sh "--output-len 0: exit 2" '[ $rc -eq 2 ] && [[ "$out" == *--output-len* ]]'
out=$(run 1 "$TRAINEXEC" $m --inference --output "$tmp/no/such/dir/x.csv" 2>&1); rc=$?
check_sh "--output in a missing directory: exit 2 before the run" '[ $rc -eq 2 ] && [[ "$out" == *--output* && "$out" != *"decode step"* ]]'
finish
