#!/usr/bin/env bash
# trainsim sweep: output of a clean run; kill -9 at random moments and
# restart until done, which must give the clean run's file byte for byte;
# a torn last line is cut and redone; a finished sweep skips every row; a
# bad row is recorded with its error; a foreign output header is refused.
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

# Kill -9 once right after the first row is written, then at pseudo-random
# moments (10% to 60% of the clean run's time after the start) until a run
# finishes on its own; every restart resumes from what the killed ones wrote.
seed=7 kills=0 finished=0 midrun=0
for try in $(seq 1 40); do
    "$T" sweep "$tmp/in.csv" --out "$tmp/killed.csv" --threads 2 >/dev/null 2>&1 &
    pid=$!
    if [ $kills -eq 0 ]; then
        # First kill: as soon as one row is on disk, so that at least one kill
        # lands mid-run however fast this machine runs the sweep.
        while kill -0 "$pid" 2>/dev/null && [ "$(cat "$tmp/killed.csv" 2>/dev/null | wc -l)" -lt 2 ]; do
            sleep 0.005
        done
    else
        seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
        ms=$(( clean_ms * (10 + seed % 51) / 100 + 20 ))
        sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    fi
    if kill -9 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null
        kills=$((kills + 1))
        # A kill before the last row was written left the sweep unfinished.
        done_rows=$(($(cat "$tmp/killed.csv" 2>/dev/null | wc -l) - 1))
        [ "$done_rows" -lt "$rows" ] && midrun=1
    else
        wait "$pid" && finished=1
        break
    fi
done
[ $finished = 1 ] || "$T" sweep "$tmp/in.csv" --out "$tmp/killed.csv" --threads 2 >/dev/null 2>&1
# How many kills land depends on the machine's load; one that left the sweep
# unfinished is what the resume test needs.
check "killed $kills times, at least once mid-run" test $kills -ge 1 -a $midrun = 1
check "after the kills: the clean run's file byte for byte" cmp -s "$tmp/clean.csv" "$tmp/killed.csv"
"$T" sweep "$tmp/in.csv" --out "$tmp/killed.csv" --threads 2 >"$tmp/last.out" 2>&1
check "a finished sweep skips every row" grep -q "$rows already in" "$tmp/last.out"
check "a finished sweep leaves the file as it was" cmp -s "$tmp/clean.csv" "$tmp/killed.csv"

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
printf 'model,no-such-flag\ngpt3-175b,1\n' >"$tmp/badflag.csv"
"$T" sweep "$tmp/badflag.csv" --out "$tmp/badflag.out.csv" --quiet >/dev/null 2>&1
check "unknown flag column: row error names it" grep -q 'no-such-flag' "$tmp/badflag.out.csv"

finish
