#!/usr/bin/env bash
# Command-line tests of `trainsim calibrate`: medians of repeated samples,
# the latency/bandwidth fit of messages on exact synthetic data, bad input,
# and a simulator run that reads the calibration it wrote.
set -u
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# synthetic samples: GEMMs at 50 GFLOP/s with one outlier repeat (the median
# ignores it), copies at 5 GB/s, messages exactly 1000 ns + bytes / 2 GB/s
{
    echo "kind,name,dtype,m,n,k,batch,bytes,ranks,rep,time_ns"
    for s in 64 128 256 512 1024; do
        t=$(awk -v s=$s 'BEGIN { printf "%.1f", 2 * s * s * s / 50 }')
        for r in 0 1 2; do echo "gemm,gemm,fp32,$s,$s,$s,1,,1,$r,$t"; done
        echo "gemm,gemm,fp32,$s,$s,$s,1,,1,3,$(awk -v t=$t 'BEGIN { print 10 * t }')"
    done
    for b in 8192 131072 1048576 8388608; do
        echo "memory,copy,fp32,,,,,$b,1,0,$(awk -v b=$b 'BEGIN { print b / 5 }')"
    done
    echo "launch,gelu1,fp32,,,,,,1,0,50"
    for b in 1024 65536 4194304; do
        echo "p2p,sendrecv,fp32,,,,,$b,2,0,$(awk -v b=$b 'BEGIN { print 1000 + b / 2 }')"
    done
} >"$tmp/mb.csv"

out=$("$TRAINSIM" calibrate --microbench "$tmp/mb.csv" -o "$tmp/cal.csv" --gpu A100-SXM4-80GB \
      --dtype bf16 --comm-output "$tmp/comm.csv" 2>&1); rc=$?
check_sh "calibrate succeeds" '[ $rc -eq 0 ]'
check_sh "one row per shape: 5 gemm, 4 memory, 1 launch" \
    '[ $(grep -c ",gemm,bf16," "$tmp/cal.csv") -eq 5 ] && [ $(grep -c ",memory,bf16," "$tmp/cal.csv") -eq 4 ] && [ $(grep -c ",launch," "$tmp/cal.csv") -eq 1 ]'
check_sh "median drops the outlier repeat (50 GFLOP/s reported)" '[[ "$out" == *"best GEMM 50.0 GFLOP/s"* ]]'
check_sh "p2p fit: latency 1000 ns, 2.00 GB/s" \
    'grep -qE "^p2p,2,1000,2,1,3$" "$tmp/comm.csv"'

out=$("$TRAINSIM" simulate --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 64 \
      --padded-vocab-size 4096 --gpus 2 -t 1 -p 2 --micro-batch-size 1 --global-batch-size 4 \
      --schedule 1f1b --recompute-granularity none --sequence-parallel=false --bf16 \
      --gpu A100-SXM4-80GB --calibration "$tmp/cal.csv" 2>&1); rc=$?
check_sh "trainsim simulate reads the calibration" '[ $rc -eq 0 ] && [[ "$out" == *"iteration time"* ]]'

check_sh "p2p fit becomes a p2p row of the calibration (alpha 1000 ns, 2 GB/s)" \
    'grep -qE "^A100-SXM4-80GB,p2p,bf16,.*,2,1000,2$" "$tmp/cal.csv"'

# calibrated-only device: --gpu cpu --fp32 takes compute and link costs from the file
CPUSIM=(simulate --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 64
        --padded-vocab-size 4096 --gpus 2 -t 1 -p 2 --micro-batch-size 1 --global-batch-size 4
        --schedule 1f1b --recompute-granularity none --sequence-parallel=false --gpu cpu)
out=$("$TRAINSIM" "${CPUSIM[@]}" --fp32 2>&1); rc=$?
check_sh "--gpu cpu without --calibration: error naming what is missing" \
    '[ $rc -ne 0 ] && [[ "$out" == *"--calibration FILE"* && "$out" == *CPU* ]]'
"$TRAINSIM" calibrate --microbench "$tmp/mb.csv" -o "$tmp/cpu.csv" >/dev/null 2>&1
out=$("$TRAINSIM" "${CPUSIM[@]}" --fp32 --calibration "$tmp/cpu.csv" 2>&1); rc=$?
check_sh "--gpu cpu without an allreduce row: error naming it" \
    '[ $rc -ne 0 ] && [[ "$out" == *"allreduce row"* ]]'
for b in 1024 65536 4194304; do
    echo "allreduce,allreduce,fp32,,,,,$b,2,0,$(awk -v b=$b 'BEGIN { print 2000 + b / 1 }')"
done >>"$tmp/mb.csv"
"$TRAINSIM" calibrate --microbench "$tmp/mb.csv" -o "$tmp/cpu.csv" >/dev/null 2>&1
out=$("$TRAINSIM" "${CPUSIM[@]}" --fp32 --calibration "$tmp/cpu.csv" --csv "$tmp/cpu.sim.csv" 2>&1); rc=$?
check_sh "--gpu cpu --fp32 with a full calibration simulates" \
    '[ $rc -eq 0 ] && [[ "$out" == *"iteration time"* ]]'
out=$("$TRAINSIM" "${CPUSIM[@]}" --fp32 --bf16 --calibration "$tmp/cpu.csv" 2>&1); rc=$?
check_sh "--fp32 with --bf16: error" '[ $rc -ne 0 ] && [[ "$out" == *"--fp32 excludes"* ]]'
out=$("$TRAINSIM" "${CPUSIM[@]}" --bf16 --calibration "$tmp/cpu.csv" 2>&1); rc=$?
check_sh "--gpu cpu at bf16 with fp32-only rows: error naming dtype" '[ $rc -ne 0 ] && [[ "$out" == *"dtype=bf16"* ]]'

printf 'kind,m,n,k,bytes,ranks,time_ns\nwarp,1,1,1,,1,5\n' >"$tmp/bad.csv"
out=$("$TRAINSIM" calibrate --microbench "$tmp/bad.csv" -o "$tmp/x.csv" 2>&1); rc=$?
check_sh "unknown sample kind: exit 2 with file:line and the valid kinds" \
    '[ $rc -eq 2 ] && [[ "$out" == *"bad.csv:2"* && "$out" == *allreduce* ]]'
out=$("$TRAINSIM" calibrate -o "$tmp/x.csv" 2>&1); rc=$?
check_sh "missing --microbench: exit 2" '[ $rc -eq 2 ] && [[ "$out" == *--microbench* ]]'
check_sh "nothing written on failure" '[ ! -e "$tmp/x.csv" ]'

finish
