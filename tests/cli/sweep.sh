#!/usr/bin/env bash
# trainsim sweep: output of a clean run; kill -9 once mid-sweep (made
# certain, see below), then at random moments, and restart until done,
# which must give the clean run's file byte for byte; a torn last line is
# cut and redone; a finished sweep skips every row; a bad row is recorded
# with its error; a foreign output header is refused.
# Ends with "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 16 rows of GPT-3 175B layouts on 1024 GPUs (tens of ms each), one bad row.
{
    echo "model,gpus,tensor-model-parallel-size,pipeline-model-parallel-size,micro-batch-size,--recompute-granularity,schedule"
    for pp in 8 16; do
        for b in 1 2; do
            for rc in selective full; do
                for s in 1f1b zb-h1; do echo "gpt3-175b,1024,8,$pp,$b,$rc,$s"; done
            done
        done
    done
    echo "gpt3-175b,1024,3,8,1,full,1f1b"
} >"$tmp/in.csv"
rows=$(($(wc -l <"$tmp/in.csv") - 1))

t0=$(date +%s%N)
"$T" sweep "$tmp/in.csv" --out "$tmp/clean.csv" --threads 2 >"$tmp/clean.out" 2>&1
check "clean run exits 0" test $? -eq 0
clean_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "clean run: one line per row plus the header" test "$(wc -l <"$tmp/clean.csv")" -eq $((rows + 1))
check "header: key, inputs, status, results, error" \
    grep -q '^key,model,gpus,tensor-model-parallel-size,.*,status,iteration_s,.*,error$' "$tmp/clean.csv"
check "ok rows" test "$(grep -c ',ok,' "$tmp/clean.csv")" -eq $((rows - 1))
check "bad row recorded with its error" grep -q ',error,.*tensor-model-parallel' "$tmp/clean.csv"

# rows_in CSV: data rows (lines below the header) in CSV; 0 when absent.
rows_in() {
    local n=0
    if [ -f "$1" ]; then n=$(wc -l <"$1"); fi
    if [ "$n" -gt 0 ]; then n=$((n - 1)); fi
    echo "$n"
}

# freeze PID: sends SIGSTOP and waits (10 s at most) until /proc shows every
# thread of PID stopped ("T"). Status 0: frozen; 1: PID has exited (or did
# not stop). A thread inside write(2) or fsync(2) finishes it before it stops.
freeze() {
    local pid=$1 end=$((SECONDS + 10)) stat line all
    kill -STOP "$pid" 2>/dev/null || return 1
    while [ $SECONDS -lt $end ]; do
        all=1
        for stat in /proc/"$pid"/task/*/stat; do
            read -r line 2>/dev/null <"$stat" || { all=0; continue; }
            line=${line##*) }                  # the state follows "(comm) "
            case ${line%% *} in
                T) ;;
                Z|X) return 1 ;;
                *) all=0 ;;
            esac
        done
        [ -d /proc/"$pid" ] || return 1
        [ $all = 1 ] && return 0
        sleep 0.001
    done
    return 1
}

# catch_mid_sweep PID ROWS OUT: steps the sweep PID (2 ms running, then
# frozen while OUT is read) until OUT holds a row. Status 0: PID is frozen
# and OUT holds 1 to ROWS-1 rows; 1: the sweep got to its end first (PID is
# then running again, to be waited for). Bounded: 120 s.
catch_mid_sweep() {
    local pid=$1 want=$2 out=$3 end=$((SECONDS + 120)) n
    while [ $SECONDS -lt $end ] && freeze "$pid"; do
        n=$(rows_in "$out")
        if [ "$n" -ge 1 ]; then
            if [ "$n" -lt "$want" ]; then return 0; fi
            break
        fi
        kill -CONT "$pid"
        sleep 0.002
    done
    kill -CONT "$pid" 2>/dev/null
    return 1
}

# Kill -9 once mid-sweep (at least one row written, not all), then at
# pseudo-random moments (10% to 60% of the clean run's time after the start)
# until a run finishes on its own; every restart resumes from what the killed
# ones wrote, and the result must be the clean run's file.
#
# Why the first kill cannot miss: a kill sent right after seeing a row on
# disk may arrive after the sweep has written its last row (on a fast disk
# the whole sweep takes a few tens of ms), and then no kill lands mid-run.
# So the sweep is frozen (SIGSTOP, every thread stopped) before its output
# is read, and SIGKILL is sent only while it is frozen with 1 to rows-1 rows
# on disk. A stopped process writes nothing, and each row is one write(2),
# so those rows are exactly what the kill leaves: the kill is mid-sweep by
# construction, whatever the machine's speed or load; done_rows, read again
# after the process is gone, confirms it. If the sweep ends within one 2 ms
# step before it can be caught, that attempt is not counted as a kill: the
# test starts over on a sweep 2, 4, then 8 times as long (the rows repeated,
# compared with their own clean run). Only if none of them is caught does
# "at least once mid-run" fail; it never passes without a mid-run kill.
kill_in=$tmp/in.csv ref=$tmp/clean.csv krows=$rows kill_ms=$clean_ms
seed=7 kills=0 finished=0 midrun=0
for mult in 1 2 4 8; do
    if [ $mult -gt 1 ]; then
        echo "the sweep ended before it could be caught mid-run: again with $mult times the rows"
        { head -n 1 "$tmp/in.csv"; for _ in $(seq $mult); do tail -n +2 "$tmp/in.csv"; done; } >"$tmp/kin.csv"
        kill_in=$tmp/kin.csv ref=$tmp/kclean.csv krows=$((rows * mult))
        rm -f "$ref"
        t0=$(date +%s%N)
        "$T" sweep "$kill_in" --out "$ref" --threads 2 >/dev/null 2>&1
        kill_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    fi
    rm -f "$tmp/killed.csv"
    "$T" sweep "$kill_in" --out "$tmp/killed.csv" --threads 2 >/dev/null 2>&1 &
    pid=$!
    if catch_mid_sweep "$pid" "$krows" "$tmp/killed.csv"; then
        kill -9 "$pid"
        wait "$pid" 2>/dev/null
        kills=1
        done_rows=$(rows_in "$tmp/killed.csv")
        echo "killed mid-sweep with $done_rows of $krows rows written"
        [ "$done_rows" -ge 1 ] && [ "$done_rows" -lt "$krows" ] && midrun=1
        break
    fi
    wait "$pid" 2>/dev/null
done
if [ $kills -eq 1 ]; then
    for _ in $(seq 2 40); do
        "$T" sweep "$kill_in" --out "$tmp/killed.csv" --threads 2 >/dev/null 2>&1 &
        pid=$!
        seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
        ms=$(( kill_ms * (10 + seed % 51) / 100 + 20 ))
        sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
        if kill -9 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null
            kills=$((kills + 1))
            # A kill before the last row was written left the sweep unfinished.
            done_rows=$(rows_in "$tmp/killed.csv")
            [ "$done_rows" -lt "$krows" ] && midrun=1
        else
            wait "$pid" && finished=1
            break
        fi
    done
else
    echo "the sweep was never caught mid-run, even at $krows rows"
fi
[ $finished = 1 ] || "$T" sweep "$kill_in" --out "$tmp/killed.csv" --threads 2 >/dev/null 2>&1
# How many kills land depends on the machine's load; one that left the sweep
# unfinished is what the resume test needs.
check "killed $kills times, at least once mid-run" test $kills -ge 1 -a $midrun = 1
check "after the kills: the clean run's file byte for byte" cmp -s "$ref" "$tmp/killed.csv"
"$T" sweep "$kill_in" --out "$tmp/killed.csv" --threads 2 >"$tmp/last.out" 2>&1
check "a finished sweep skips every row" grep -q "$krows already in" "$tmp/last.out"
check "a finished sweep leaves the file as it was" cmp -s "$ref" "$tmp/killed.csv"

# A torn last line (as a kill mid-write on a full disk would leave).
head -n 10 "$tmp/clean.csv" >"$tmp/torn.csv"
printf '10-0123456789abcdef,gpt3-175b,10' >>"$tmp/torn.csv"
"$T" sweep "$tmp/in.csv" --out "$tmp/torn.csv" --threads 1 >"$tmp/torn.out" 2>&1
check "torn line: exit 0" test $? -eq 0
check "torn line: reported" grep -q 'torn last line' "$tmp/torn.out"
check "torn line: same file as the clean run" cmp -s "$tmp/clean.csv" "$tmp/torn.csv"

# Another input into the same output is refused.
printf 'model,gpus\ngpt3-175b,1024\n' >"$tmp/other.csv"
"$T" sweep "$tmp/other.csv" --out "$tmp/clean.csv" >"$tmp/other.out" 2>&1
check "foreign header: exit 2" test $? -eq 2
check "foreign header: says so" grep -q 'header differs' "$tmp/other.out"
"$T" sweep "$tmp/in.csv" >"$tmp/noout.out" 2>&1
check "missing --out: exit 2" test $? -eq 2
# A row that does not fit in memory is recorded with fits = 0 and the sweep
# goes on to the next row and exits 0 (GPT-3 175B's default layout holds
# 38.9 GiB of tensors: over 40 GiB on an A100 40GB with the overheads, fits
# without them, and on 80 GB).
printf 'model,gpu,cuda-context-gib,nccl-buffer-mib,cublas-workspace-mib,allocator-fragmentation\n' >"$tmp/fit.csv"
printf 'gpt3-175b,A100-SXM4-40GB,,,,\ngpt3-175b,A100-SXM4-40GB,0,0,0,0\ngpt3-175b,A100-SXM4-80GB,,,,\n' >>"$tmp/fit.csv"
"$T" sweep "$tmp/fit.csv" --out "$tmp/fit.out.csv" --quiet >/dev/null 2>&1
check "a row over memory: sweep exits 0" test $? -eq 0
check "a row over memory: every row done" test "$(wc -l <"$tmp/fit.out.csv")" -eq 4
check "fits column: 0, then 1 without the overheads, 1 on 80 GB" \
    test "$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "fits") c = i } NR > 1 { printf "%s", $c }' "$tmp/fit.out.csv")" = 011
check "a row over memory is status ok, not an error" test "$(grep -c ',ok,' "$tmp/fit.out.csv")" -eq 3

# A column that is no flag stops the sweep before any row runs (exit 2), with
# the column and the nearest valid name; no output is written.
printf 'model,gpus,tensor-paralel-size\ngpt3-175b,1024,8\ngpt3-175b,1024,4\n' >"$tmp/badflag.csv"
out=$("$T" sweep "$tmp/badflag.csv" --out "$tmp/badflag.out.csv" --quiet 2>&1); rc=$?
check_sh "unknown column: exit 2" '[ $rc -eq 2 ]'
check_sh "unknown column: named with its place" '[[ "$out" == *"badflag.csv:1: column 3 '"'"'tensor-paralel-size'"'"': not a flag a row can set"* ]]'
check_sh "unknown column: the nearest valid name" '[[ "$out" == *"did you mean tensor-model-parallel-size?"* ]]'
check "unknown column: no output written" test ! -e "$tmp/badflag.out.csv"
printf 'model,--gpus,--pipline-model-parallel-size\ngpt3-175b,1024,8\n' >"$tmp/badflag2.csv"
expect_error 2 "column 3 '--pipline-model-parallel-size': not a flag a row can set; did you mean pipeline-model-parallel-size?" \
    "$T" sweep "$tmp/badflag2.csv" --out "$tmp/badflag2.out.csv" --quiet
# train-tokens and calibration are columns too (not shared flags)
printf 'model,gpus,train-tokens\ngpt3-175b,1024,3e11\n' >"$tmp/own.csv"
expect_output "1 simulated (0 failed" "$T" sweep "$tmp/own.csv" --out "$tmp/own.out.csv" --quiet

# Two sweeps on one --out: the second refuses at once naming the first's
# PID (the first is stopped with SIGSTOP while it holds the lock).
{
    echo "model,gpus,tensor-model-parallel-size,pipeline-model-parallel-size,micro-batch-size"
    for i in $(seq 40); do echo "gpt3-175b,1024,8,$((i % 2 ? 8 : 16)),$((i % 4 + 1))"; done
} >"$tmp/long.csv"
"$T" sweep "$tmp/long.csv" --out "$tmp/lk.csv" --threads 1 --quiet >/dev/null 2>&1 &
first=$!
for _ in $(seq 200); do [ -s "$tmp/lk.csv.lock" ] && break; sleep 0.02; done
kill -STOP $first
"$T" sweep "$tmp/long.csv" --out "$tmp/lk.csv" --quiet >"$tmp/lk.out" 2>&1; rc=$?
kill -CONT $first
wait $first; rc1=$?
check_sh "a second sweep on one --out: exit 1 naming the holder's PID" \
    '[ $rc -eq 1 ] && grep -q "another trainsim sweep (PID $first" "$tmp/lk.out"'
check_sh "the first sweep finishes alone: every row once, lock removed" \
    '[ $rc1 -eq 0 ] && [ "$(wc -l <"$tmp/lk.csv")" -eq 41 ] && ! [ -e "$tmp/lk.csv.lock" ]'

# a lock file left by a sweep that died is taken over with a note
dead=$( (sh -c 'echo $$') )
echo "$dead 1" >"$tmp/own.out.csv.lock"
expect_output "left by sweep PID $dead, which is no longer running" "$T" sweep "$tmp/own.csv" --out "$tmp/own.out.csv" --quiet

# a row written twice (the result of two sweeps at once) stops a resume,
# naming the key and its lines
cp "$tmp/clean.csv" "$tmp/dup.csv"
sed -n 3p "$tmp/clean.csv" >>"$tmp/dup.csv"
key=$(sed -n 3p "$tmp/clean.csv" | cut -d, -f1)
expect_error 2 "key $key appears 2 times (lines 3, $((rows + 2)))" "$T" sweep "$tmp/in.csv" --out "$tmp/dup.csv" --quiet

finish
