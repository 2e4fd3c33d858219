#!/usr/bin/env bash
# The inference calibration loop: `trainsim infer --decode-calibration FILE`
# reads the constants `trainsim calibrate --decode` fits (closed forms on
# hand-written files for a GPU kind; the file's checks, exit 2), and the
# round trip on this machine: trainexec --inference --decode-samples ->
# calibrate --decode -> infer --gpu cpu predicts the measured decode step.
# Ends with "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
v() { sed -nE "s/^inference,$2,([^,]*),.*/\1/p" "$1"; }
# a decode calibration for $1 at $2 GB/s, launch $3 ns, reference 2039 GB/s
# (A100-SXM4-80GB's datasheet HBM bandwidth, topologies/gpus.csv)
fit() {
    printf 'quantity,value\ngpu,%s\ndecode_hbm_efficiency,%s\ndecode_launch_overhead_ns,%s\ndecode_gbps,%s\nreference_gbps,2039\n' \
        "$1" "$(awk -v g="$2" 'BEGIN { printf "%.9g", g / 2039 }')" "$3" "$2"
}
fit A100-SXM4-80GB 1000 0 >"$tmp/g1000.csv"
fit A100-SXM4-80GB 500 0 >"$tmp/g500.csv"
fit A100-SXM4-80GB 1000 10000 >"$tmp/l10k.csv"
m=(--model llama2-7b --fp16 --gpu A100-SXM4-80GB --batch-size 1 --input-len 128 --output-len 32)
for f in g1000 g500 l10k; do
    "$T" infer "${m[@]}" --decode-calibration "$tmp/$f.csv" --csv "$tmp/$f.out" >/dev/null
done
# batch 1 decode is memory-bound: it reads the fp16 weights but the input
# embedding table (the lookup reads one row): 13.47e9 - 32000 x 4096 x 2 =
# 13.21e9 bytes, 13.21 ms a token at 1000 GB/s, plus the KV cache and
# activations (under 1%)
check_sh "1000 GB/s, no launch: TPOT = weight bytes / 1000 GB/s (13.21 to 13.35 ms)" \
    'awk -v t="$(v "$tmp/g1000.out" tpot)" "BEGIN { exit !(t > 13.21e6 && t < 13.35e6) }"'
check_sh "half the bandwidth: TPOT x 1.95 to 2.0" \
    'awk -v a="$(v "$tmp/g1000.out" tpot)" -v b="$(v "$tmp/g500.out" tpot)" "BEGIN { r = b / a; exit !(r > 1.95 && r <= 2.0) }"'
# 32 layers x 12 kernels (rotary, SwiGLU) + embedding, final norm, logits
check_sh "launch 10 us: TPOT + 387 kernels x 10 us (3.87 ms, within 1%)" \
    'awk -v a="$(v "$tmp/g1000.out" tpot)" -v b="$(v "$tmp/l10k.out" tpot)" "BEGIN { d = b - a; exit !(d > 3.83e6 && d < 3.91e6) }"'
out=$("$T" infer "${m[@]}" --decode-calibration "$tmp/l10k.csv" 2>&1)
check_sh "the report says which constants came from the file" \
    '[[ "$out" == *"launch 10000 ns per kernel ($tmp/l10k.csv)"* && "$out" == *"HBM efficiency 0.4904 ($tmp/l10k.csv)"* && "$out" == *"GEMM efficiency and peaks (cost model default)"* ]]'
out=$("$T" infer "${m[@]}" 2>&1)
check_sh "without a file every constant is the default" '[[ "$out" == *"launch 4000 ns per kernel (cost model default); HBM efficiency per kernel size (cost model default)"* ]]'
"$T" search --inference --model llama2-7b --fp16 --gpu A100-SXM4-80GB --gpus 1 --batch-sizes 1 --weight-quant none \
    --input-len 128 --output-len 32 --decode-calibration "$tmp/g500.csv" --out "$tmp/s500.csv" >"$tmp/s.out"
check_sh "search --inference: the file's constants, the same TPOT as infer" \
    'grep -q "HBM efficiency ($tmp/g500.csv)" "$tmp/s.out" && awk -F, -v t="$(v "$tmp/g500.out" tpot)" "NR == 2 { d = \$6 * 1e6 - t; exit !(d < 1 && d > -1) }" "$tmp/s500.csv"'

# the file's checks
expect_error 2 "fitted for device 'A100-SXM4-80GB', not for --gpu 'H100-SXM5-80GB'" \
    "$T" infer --model llama2-7b --fp16 --gpu H100-SXM5-80GB --decode-calibration "$tmp/g1000.csv"
sed 's/^decode_gbps,.*/decode_gbps,fast/' "$tmp/g1000.csv" >"$tmp/bad1.csv"
expect_error 2 "bad1.csv:5: column 'value'" "$T" infer "${m[@]}" --decode-calibration "$tmp/bad1.csv"
sed 's/^decode_hbm_efficiency,.*/decode_hbm_efficiency,7/' "$tmp/g1000.csv" >"$tmp/bad2.csv"
expect_error 2 "bad2.csv:3: column 'value'" "$T" infer "${m[@]}" --decode-calibration "$tmp/bad2.csv"
sed 's/^decode_hbm_efficiency,.*/decode_hbm_efficiency,0.4/' "$tmp/g1000.csv" >"$tmp/bad3.csv"
expect_error 2 "is not decode_gbps / reference_gbps" "$T" infer "${m[@]}" --decode-calibration "$tmp/bad3.csv"
grep -v '^decode_gbps' "$tmp/g1000.csv" >"$tmp/bad4.csv"
expect_error 2 "no 'decode_gbps' row" "$T" infer "${m[@]}" --decode-calibration "$tmp/bad4.csv"
{ cat "$tmp/g1000.csv"; echo "speed,3"; } >"$tmp/bad5.csv"
expect_error 2 "bad5.csv:7: column 'quantity'" "$T" infer "${m[@]}" --decode-calibration "$tmp/bad5.csv"
{ cat "$tmp/g1000.csv"; echo "decode_gbps,1000"; } >"$tmp/bad6.csv"
expect_error 2 "given twice (first on line 5)" "$T" infer "${m[@]}" --decode-calibration "$tmp/bad6.csv"
expect_error 1 "--decode-calibration: $tmp/none.csv: cannot open" "$T" infer "${m[@]}" --decode-calibration "$tmp/none.csv"
expect_error 2 "--calibration FILE" "$T" infer --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 32 --padded-vocab-size 128 --input-len 8 --output-len 16 --gpu cpu --fp32

# the round trip on this machine (CPU executor, fp32)
if [ ! -x "${TRAINEXEC:-}" ] || ! command -v mpirun >/dev/null; then
    echo "trainexec not built (no MPI): round trip skipped"; finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { timeout 300 mpirun --oversubscribe -np "$@"; }
cell() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i } NR == 2 { print $k }' "$1"; }
# two ranks each: the kernel microbenchmarks and the decode steps share the
# cores alike (data-parallel decoding, one batch of 4 per rank)
run 2 "$TRAINEXEC" --microbench "$tmp/mb.csv" >/dev/null 2>&1
tiny=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --padded-vocab-size 128)
run 2 "$TRAINEXEC" "${tiny[@]}" --inference --batch-size 4 --input-len 8 --output-len 16 --iterations 3 --warmup 1 \
    --output "$tmp/inf.csv" --decode-samples "$tmp/dec.csv" >/dev/null 2>&1
out=$("$T" calibrate --microbench "$tmp/mb.csv" -o "$tmp/cpu.csv" --decode "$tmp/dec.csv" \
      --decode-output "$tmp/fit.csv" 2>&1); rc=$?
check_sh "calibrate --decode on the measured samples: exit 0, the file names the device" \
    '[ $rc -eq 0 ] && grep -qx "gpu,CPU" "$tmp/fit.csv"'
# the fitted line over the ops of each measured step against the measured
# steps (per-op sums): the line weighs every sample, so its mean step is the
# medians' step; the median step (robust to the shared machine's spikes)
# agrees within 15%
a=$(sed -n 's/^decode_launch_overhead_ns,//p' "$tmp/fit.csv"); g=$(sed -n 's/^decode_gbps,//p' "$tmp/fit.csv")
awk -F, -v a="$a" -v g="$g" 'NR > 1 { p[$10] += a + $8 / g; t[$10] += $11 } END { for (r in t) print t[r], p[r] }' \
    "$tmp/dec.csv" | sort -g >"$tmp/steps.txt"
awk '{ t[NR] = $1; p += $2 } END { printf "fitted line: mean step %.0f ns, measured median step %.0f ns\n", p / NR, t[int((NR + 1) / 2)] }' "$tmp/steps.txt"
check_sh "the fitted line predicts the median measured step within 15%" \
    'awk "{ t[NR] = \$1; p += \$2 } END { m = t[int((NR + 1) / 2)]; r = p / NR / m; exit !(NR > 0 && r > 0.85 && r < 1.15) }" "$tmp/steps.txt"'
expect_error 2 "fp32 only" "$T" infer "${tiny[@]}" --input-len 8 --output-len 16 --gpu cpu --fp16 \
    --calibration "$tmp/cpu.csv"
expect_error 2 "fitted for device 'CPU', not for --gpu 'A100-SXM4-80GB'" "$T" infer "${tiny[@]}" --input-len 8 \
    --output-len 16 --decode-calibration "$tmp/fit.csv"
"$T" infer "${tiny[@]}" --gpu cpu --fp32 --gpus 2 --calibration "$tmp/cpu.csv" --decode-calibration "$tmp/fit.csv" \
    --batch-size 4 --input-len 8 --output-len 16 --csv "$tmp/pred.csv" >/dev/null 2>&1
out=$("$T" search --inference "${tiny[@]}" --gpu cpu --fp32 --gpus 2 --calibration "$tmp/cpu.csv" \
      --decode-calibration "$tmp/fit.csv" --input-len 8 --output-len 16 --batch-sizes 4 2>&1); rc=$?
check_sh "search --inference --gpu cpu: fp32 layouts only, the files' constants" \
    '[ $rc -eq 0 ] && [[ "$out" == *"HBM efficiency ($tmp/fit.csv)"* && "$out" == *fp32* && "$out" != *int4* && "$out" != *skipped* ]]'
meas=$(cell "$tmp/inf.csv" decode_step_p50_ns); pred=$(v "$tmp/pred.csv" tpot)
echo "round trip: measured decode step p50 ${meas} ns, predicted TPOT ${pred} ns"
# stated tolerance: 35%. Measured on a shared 2-core machine: -5% to -22%
# over five runs (the microbenchmarks and the decode steps run at different
# moments of the other work's load); without --decode-calibration the same
# prediction is about 4x the measured step
check_sh "predicted TPOT within 35% of the measured decode step (p50)" \
    'awk -v p="$pred" -v m="$meas" "BEGIN { r = p / m; exit !(m > 0 && r > 0.65 && r < 1.35) }"'
finish
