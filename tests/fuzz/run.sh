#!/usr/bin/env bash
# Runs the libFuzzer harnesses built in $FUZZ_BUILD (make fuzz), each for
# $FUZZ_SECONDS seconds (-max_total_time), two at a time ($FUZZ_JOBS), and
# prints per harness: inputs run, coverage (cov: edges, ft: features, from
# libFuzzer's last status line), corpus size and crashes.
#   usage: tests/fuzz/run.sh fuzz_csvio fuzz_topo ...
# Each harness works on a copy of tests/fuzz/corpus/<target>/ (target = the
# name without fuzz_), so the repository's corpus changes only with
# FUZZ_UPDATE=1, where new inputs are merged back (-merge=1: only those
# adding coverage). A crash, leak, timeout (-timeout, s) or out-of-memory
# saves the input under $FUZZ_BUILD/crashes/<target>/, names it and fails.
set -u
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-2}
FUZZ_UPDATE=${FUZZ_UPDATE:-}
# The shipped catalogues (GPUs, Megatron-LM flags) wherever the binaries are.
export TRAINSIM_DATA_DIR="$PWD/topologies"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run_one() { # $1 harness name: fuzz the copy of its corpus, log to $work/NAME.log
    local name=$1 target=${1#fuzz_}
    local corpus="$work/corpus-$target" crashes="$FUZZ_BUILD/crashes/$target"
    mkdir -p "$corpus" "$crashes"
    if [ -d "tests/fuzz/corpus/$target" ]; then cp -r "tests/fuzz/corpus/$target/." "$corpus/"; fi
    # Every 10 s the status line; -print_final_stats for the run count.
    "$FUZZ_BUILD/$name" "$corpus" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -max_len=4096 -print_final_stats=1 -artifact_prefix="$crashes/" >"$work/$name.log" 2>&1
    echo $? >"$work/$name.rc"
    if [ "${FUZZ_UPDATE:-}" = 1 ]; then
        mkdir -p "tests/fuzz/corpus/$target"
        "$FUZZ_BUILD/$name" -merge=1 "tests/fuzz/corpus/$target" "$corpus" >>"$work/$name.merge.log" 2>&1
    fi
}
export -f run_one
export FUZZ_BUILD FUZZ_SECONDS FUZZ_UPDATE work

echo "== fuzzing: ${FUZZ_SECONDS} s per harness, $FUZZ_JOBS at a time ($# harnesses)"
printf '%s\n' "$@" | xargs -P "$FUZZ_JOBS" -I{} bash -c 'run_one {}'

failed=0
printf '  %-18s %10s %8s %8s %8s  %s\n' harness runs cov ft corpus result
for name in "$@"; do
    log="$work/$name.log" rc=$(cat "$work/$name.rc" 2>/dev/null || echo 1)
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -n 1)
    cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
    ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
    corp=$(echo "$last" | grep -oE 'corp: [0-9]+' | grep -oE '[0-9]+')
    artifact=$(grep -oE 'Test unit written to [^ ]+' "$log" | sed 's/Test unit written to //' | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        result="no crash"
    else
        failed=$((failed + 1))
        result="CRASH (exit $rc): reproducer ${artifact:-none written}"
    fi
    printf '  %-18s %10s %8s %8s %8s  %s\n' "$name" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
    if [ "$rc" -ne 0 ]; then
        grep -E 'ERROR: |SUMMARY: |runtime error' "$log" | head -n 5 | sed 's/^/      /'
        echo "      replay: $FUZZ_BUILD/$name ${artifact:-}  (save it under tests/fuzz/regressions/${name#fuzz_}/)"
    fi
done
if [ "$FUZZ_UPDATE" = 1 ]; then echo "corpus merged into tests/fuzz/corpus/ (FUZZ_UPDATE=1)"; fi
echo "$(($# - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
