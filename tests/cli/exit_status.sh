#!/usr/bin/env bash
# The exit statuses of the README's table, one case of each status every
# command can produce: 0 success; 2 bad input (unknown flag, value out of
# range, inconsistent layout, malformed CSV: topology, calibration, schedule
# import, calibration samples, sweep input; a calibration value out of its
# range; a model of more than 2^56 parameters); 1 failure (an input file that
# cannot be read, an output that cannot be written, checked before the work,
# search: no layout fits);
# 3 simulate: the run does not fit in memory. trainexec runs under mpirun
# when it was built. Every check names the command, the case, the status
# expected and the status got. Ends with "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nodir=$tmp/no/such/dir  # a directory that does not exist: outputs there cannot be written

# status COMMAND CASE WANT CMD [ARG...]: runs CMD (output kept in
# $tmp/out.txt); one check, passed iff it exits with WANT; a failure shows
# the last lines of what the command printed.
status() {
    local cmd=$1 what=$2 want=$3 got; shift 3
    "$@" >"$tmp/out.txt" 2>&1; got=$?
    if [ "$got" -eq "$want" ]; then ok "$cmd: $what: exit $want, got $got"; return 0; fi
    bad "$cmd: $what: exit $want expected, got $got: $(tail -n 3 "$tmp/out.txt" | tr '\n' ' ')"
    return 1
}

# --- inputs: good and malformed CSV files
topo_header="nodes,gpus_per_node,gpu,intra_node_gbps,intra_node_latency_us,nics_per_node,nic_gbps,nic_latency_us,fabric,levels,oversubscription,switch_latency_us,switch_ports,pods,pod_oversubscription"
printf '%s\n1,8,H100-SXM5-80GB,450,0.6,8,abc,0.6,rail-optimized,3,1,0.13,64,,\n' "$topo_header" >"$tmp/bad-topo.csv"
printf 'gpu,dtype,op\n"CPU,fp32\n' >"$tmp/bad-calib.csv"          # a quoted cell never closed
printf 'gpu,op,dtype,ranks,alpha_ns,gbps,time_ns\nCPU,p2p,fp32,2,5,1e300,\n' >"$tmp/range-calib.csv" # gbps past 1e6
printf '0F0,0B0\n1F0,1X0\n' >"$tmp/bad-sched.csv"                 # unknown action kind
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n' \
    >"$tmp/deadlock-sched.csv"                                    # parses, does not validate
{
    echo "kind,name,dtype,m,n,k,batch,bytes,ranks,rep,time_ns"
    echo "gemm,gemm,fp32,64,64,64,1,,1,0,10000"
    echo "launch,launch,fp32,,,,,,1,0,5000"
} >"$tmp/mb.csv"
printf 'kind,m,n,k,bytes,ranks,time_ns\nwarp,1,1,1,,1,5\n' >"$tmp/bad-mb.csv"     # unknown sample kind
printf 'kind,m,n,k,bytes,ranks,time_ns\ngemm,64,64,64,,0,5\n' >"$tmp/range-mb.csv" # ranks 0: out of range
printf 'model,gpus\nmegatron-1.7b,8\n' >"$tmp/sweep.csv"
printf 'model,gpus\nmegatron-1.7b,8,3\n' >"$tmp/bad-sweep.csv"   # a row longer than the header
printf 'model,gpuz\nmegatron-1.7b,8\n' >"$tmp/badcol-sweep.csv"  # a column that is not a flag
printf 'model,gpus,tensor-model-parallel-size\nmegatron-1.7b,8,3\n' >"$tmp/layout-sweep.csv"

# --- simulate
M=(--model megatron-1.7b --gpus 8)
status simulate "success" 0 "$T" simulate "${M[@]}"
status simulate "unknown flag --gpuz" 2 "$T" simulate "${M[@]}" --gpuz 8
status simulate "out of range: --seq-length 0" 2 "$T" simulate "${M[@]}" --seq-length 0
status simulate "inconsistent layout: --gpus 8 != 2 x 2 x 3" 2 "$T" simulate "${M[@]}" -t 2 -p 2 -d 3
status simulate "malformed topology CSV" 2 "$T" simulate "${M[@]}" --topology "$tmp/bad-topo.csv"
status simulate "malformed calibration CSV" 2 "$T" simulate "${M[@]}" --calibration "$tmp/bad-calib.csv"
status simulate "unreadable topology" 1 "$T" simulate "${M[@]}" --topology "$tmp/none.csv"
status simulate "calibration value out of range: gbps 1e300" 2 "$T" simulate "${M[@]}" --calibration "$tmp/range-calib.csv"
check_sh "simulate: calibration out of range: FILE:LINE, column and range named" \
    'grep -q "range-calib.csv:2: column .gbps.: 1e300 is out of range (expected a number in \[0.001, 1e+06\])" "$tmp/out.txt"'
# 100000 layers of h = 2^24: the parameter count passes int64 (it used to reach the engine, exit 1)
BIG=(--num-layers 100000 --hidden-size 16777216 --num-attention-heads 1 --seq-length 1 --ffn-hidden-size 67108864)
status simulate "parameter count past int64" 2 "$T" simulate "${BIG[@]}" --micro-batch-size 1 --gpus 1
check_sh "simulate: parameter count past int64: said so, naming the flags" \
    'grep -q "more than 9.2e18 (past int64) parameters (--num-layers 100000, --hidden-size 16777216" "$tmp/out.txt"'
status simulate "unreadable calibration" 1 "$T" simulate "${M[@]}" --calibration "$tmp/none.csv"
status simulate "unwritable --csv" 1 "$T" simulate "${M[@]}" --csv "$nodir/x.csv"
status simulate "unwritable --trace" 1 "$T" simulate "${M[@]}" --trace "$nodir/x.json"
status simulate "does not fit: megatron-1t on 64 GPUs, p 8, no recomputation" 3 \
    "$T" simulate --model megatron-1t --gpus 64 -p 8 --recompute-granularity none
check_sh "simulate: does not fit: the report's first line says so" 'head -n 1 "$tmp/out.txt" | grep -q "^DOES NOT FIT"'

# --- schedule
status schedule "success" 0 "$T" schedule -p 2 -m 4 --validate-only
status schedule "unknown flag --timeline-widht" 2 "$T" schedule --timeline-widht 5
status schedule "out of range: --timeline-width 0" 2 "$T" schedule --timeline-width 0
status schedule "inconsistent layout: 30 layers on 4 stages" 2 "$T" schedule -p 4 --num-layers 30
status schedule "--import with a generating flag" 2 "$T" schedule --import "$tmp/bad-sched.csv" -p 2
status schedule "--import of a malformed CSV" 2 "$T" schedule --import "$tmp/bad-sched.csv"
status schedule "--import of a schedule that deadlocks" 2 "$T" schedule --import "$tmp/deadlock-sched.csv"
status schedule "--import of an unreadable file" 1 "$T" schedule --import "$tmp/none.csv"
status schedule "unwritable --export" 1 "$T" schedule -p 2 -m 4 --export "$nodir/x.csv"
check_sh "schedule: unwritable --export refused before the schedule is built (no timeline printed)" \
    '[ "$(wc -l <"$tmp/out.txt")" -eq 1 ] && grep -q "^trainsim schedule: --export $nodir/x.csv: cannot create" "$tmp/out.txt"'

# --- search (restricted to one layout family: quick)
S=(--model megatron-1.7b --gpus 8 --top 1 --quiet --max-tensor-model-parallel-size 1
   --max-pipeline-model-parallel-size 1 --micro-batch-sizes 1 --schedules 1f1b)
status search "success" 0 "$T" search "${S[@]}"
status search "unknown flag --topz" 2 "$T" search "${S[@]}" --topz 1
status search "out of range: --memory-margin -1" 2 "$T" search "${S[@]}" --memory-margin -1
status search "bad list value: --schedules 1f1b,bogus" 2 "$T" search --model megatron-1.7b --gpus 8 --schedules 1f1b,bogus
status search "malformed topology CSV" 2 "$T" search "${S[@]}" --topology "$tmp/bad-topo.csv"
status search "malformed calibration CSV" 2 "$T" search "${S[@]}" --calibration "$tmp/bad-calib.csv"
status search "calibration value out of range" 2 "$T" search "${S[@]}" --calibration "$tmp/range-calib.csv"
status search "unreadable calibration" 1 "$T" search "${S[@]}" --calibration "$tmp/none.csv"
status search "hidden size 100 not divisible by 3 heads" 2 "$T" search "${S[@]}" --hidden-size 100 --num-attention-heads 3
check_sh "search: hidden size not divisible: the message names both flags" \
    'grep -q "hidden-size 100 is not divisible by --num-attention-heads 3" "$tmp/out.txt"'
# 100000 layers of h = 2^20 (search's largest): about 1.3e18 parameters, past the 2^56 bound
status search "parameter count over 2^56" 2 "$T" search "${S[@]}" --num-layers 100000 --hidden-size 1048576 \
    --num-attention-heads 1 --seq-length 1
check_sh "search: parameter count over 2^56: said so" 'grep -q "parameters (--num-layers 100000.*at most 2^56" "$tmp/out.txt"'
status search "unreadable topology" 1 "$T" search "${S[@]}" --topology "$tmp/none.csv"
status search "unwritable --out" 1 "$T" search "${S[@]}" --out "$nodir/x.csv"
status search "no layout fits: megatron-1t on 8 GPUs without model parallelism" 1 \
    "$T" search --model megatron-1t --gpus 8 --top 1 --quiet --max-tensor-model-parallel-size 1 \
    --max-pipeline-model-parallel-size 1 --micro-batch-sizes 1 --schedules 1f1b

# --- sweep (one row)
status sweep "success" 0 "$T" sweep "$tmp/sweep.csv" --out "$tmp/sweep.out.csv" --quiet
status sweep "unknown flag --threadz" 2 "$T" sweep "$tmp/sweep.csv" --out "$tmp/s1.csv" --threadz 1
status sweep "out of range: --threads 0" 2 "$T" sweep "$tmp/sweep.csv" --out "$tmp/s2.csv" --threads 0
status sweep "malformed input CSV: a row longer than the header" 2 "$T" sweep "$tmp/bad-sweep.csv" --out "$tmp/s3.csv"
status sweep "malformed input CSV: a column that is no flag" 2 "$T" sweep "$tmp/badcol-sweep.csv" --out "$tmp/s4.csv"
status sweep "unreadable input" 1 "$T" sweep "$tmp/none.csv" --out "$tmp/s5.csv"
status sweep "unwritable --out" 1 "$T" sweep "$tmp/sweep.csv" --out "$nodir/x.csv"
# an inconsistent layout in a row is that row's result, not the sweep's status
status sweep "inconsistent layout in a row: recorded, the sweep goes on" 0 \
    "$T" sweep "$tmp/layout-sweep.csv" --out "$tmp/s6.csv" --quiet
check_sh "sweep: inconsistent layout in a row: its error column names the flag" \
    'grep -q ",error,.*tensor-model-parallel" "$tmp/s6.csv"'

# --- config (reads files, writes none)
status config "success" 0 "$T" config "${M[@]}"
status config "unknown flag --gpuz" 2 "$T" config "${M[@]}" --gpuz 8
status config "out of range: --seq-length 0" 2 "$T" config "${M[@]}" --seq-length 0
status config "inconsistent layout: --gpus 8 != 2 x 2 x 3" 2 "$T" config "${M[@]}" -t 2 -p 2 -d 3
status config "malformed topology CSV" 2 "$T" config "${M[@]}" --topology "$tmp/bad-topo.csv"
status config "unreadable topology" 1 "$T" config "${M[@]}" --topology "$tmp/none.csv"
status config "unreadable --megatron-script" 1 "$T" config --megatron-script "$tmp/none.sh"

# --- calibrate
status calibrate "success" 0 "$T" calibrate --microbench "$tmp/mb.csv" -o "$tmp/cal.csv"
status calibrate "unknown flag --dtypez" 2 "$T" calibrate --microbench "$tmp/mb.csv" -o "$tmp/c1.csv" --dtypez fp32
status calibrate "bad value: --dtype fp8" 2 "$T" calibrate --microbench "$tmp/mb.csv" -o "$tmp/c2.csv" --dtype fp8
status calibrate "malformed samples CSV: unknown kind" 2 "$T" calibrate --microbench "$tmp/bad-mb.csv" -o "$tmp/c3.csv"
status calibrate "malformed samples CSV: ranks 0 out of range" 2 \
    "$T" calibrate --microbench "$tmp/range-mb.csv" -o "$tmp/c4.csv"
status calibrate "unreadable samples" 1 "$T" calibrate --microbench "$tmp/none.csv" -o "$tmp/c5.csv"
status calibrate "unwritable --output" 1 "$T" calibrate --microbench "$tmp/mb.csv" -o "$nodir/x.csv"
check "calibrate: nothing written on a failure" test ! -e "$tmp/c3.csv" -a ! -e "$tmp/c4.csv" -a ! -e "$tmp/c5.csv"

# --- trainexec under mpirun (tests/cli/trainexec.sh runs it the same way)
if [ -x "${TRAINEXEC:-}" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    X=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64
       --micro-batch-size 1 --global-batch-size 2 --iterations 1 --warmup 0)
    mp() { timeout 120 mpirun --oversubscribe -np "$@"; }
    status trainexec "success" 0 mp 1 "$TRAINEXEC" "${X[@]}"
    status trainexec "unknown flag --num-layerz" 2 mp 1 "$TRAINEXEC" "${X[@]}" --num-layerz 3
    status trainexec "out of range: --iterations 0" 2 mp 1 "$TRAINEXEC" "${X[@]}" --iterations 0
    status trainexec "inconsistent layout: p 4 on 2 ranks" 2 mp 2 "$TRAINEXEC" "${X[@]}" -p 4
    status trainexec "malformed --schedule-csv" 2 mp 2 "$TRAINEXEC" "${X[@]}" -p 2 --schedule-csv "$tmp/bad-sched.csv"
    status trainexec "malformed topology CSV" 2 mp 1 "$TRAINEXEC" "${X[@]}" --topology "$tmp/bad-topo.csv"
    status trainexec "unreadable --topology" 1 mp 1 "$TRAINEXEC" "${X[@]}" --topology "$tmp/none.csv"
    status trainexec "unreadable --schedule-csv" 1 mp 2 "$TRAINEXEC" "${X[@]}" -p 2 --schedule-csv "$tmp/none.csv"
    status trainexec "unreadable --megatron-script" 1 mp 1 "$TRAINEXEC" "${X[@]}" --megatron-script "$tmp/none.sh"
    status trainexec "unwritable --trace" 1 mp 1 "$TRAINEXEC" "${X[@]}" --trace "$nodir/t.json"
    check_sh "trainexec: unwritable --trace refused before the run (no iteration)" \
        '! grep -q "iteration 1/1" "$tmp/out.txt" && grep -q -- "--trace $nodir/t.json: cannot create" "$tmp/out.txt"'
    status trainexec "unwritable --report-csv" 1 mp 2 "$TRAINEXEC" "${X[@]}" --report-csv "$nodir/r.csv"
    check_sh "trainexec: unwritable --report-csv refused before the run (no iteration)" '! grep -q "iteration 1/1" "$tmp/out.txt"'
    status trainexec "unwritable --ops-csv" 1 mp 1 "$TRAINEXEC" "${X[@]}" --ops-csv "$nodir/o.csv"
    status trainexec "unwritable --pid-file" 1 mp 1 "$TRAINEXEC" "${X[@]}" --pid-file "$nodir/pid"
    status trainexec "unwritable --microbench" 1 mp 1 "$TRAINEXEC" --microbench "$nodir/mb.csv"
else
    echo "trainexec not built (no MPI): its statuses skipped"
fi

finish
