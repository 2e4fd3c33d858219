#!/usr/bin/env bash
# Runs the libFuzzer harnesses built in $FUZZ_BUILD (make fuzz), each for
# $FUZZ_SECONDS seconds (-max_total_time), two at a time ($FUZZ_JOBS), and
# prints per harness: inputs run, coverage (cov: edges, ft: features, from
# libFuzzer's last status line), corpus size and crashes.
#   usage: tests/fuzz/run.sh fuzz_csvio fuzz_topo ...
# Each harness works on a copy of its seeds (tests/fuzz/seeds.sh: the files
# of tests/fuzz/corpus/<target>/, target = the name without fuzz_, and the
# repository files tests/fuzz/seeds.txt names), so the repository's corpus
# changes only with FUZZ_UPDATE=1, where new inputs are merged back
# (-merge=1: only those adding coverage; never a copy of a seeds.txt file).
# A crash, leak, timeout (-timeout, s) or out-of-memory saves the input
# under $FUZZ_BUILD/crashes/<target>/, names it and fails.
# Reproducible: every harness runs with libFuzzer's -seed=$FUZZ_SEED (fixed,
# default 1, printed), so the same seed, seeds and build generate the same
# inputs in the same order; a time-bounded run stops wherever the time ends,
# and FUZZ_RUNS=N (-runs=N, the "runs" count printed) replays exactly the
# first N inputs of a campaign. Each harness's line ends with that command.
# Exact only with address-space randomisation off (below; said in the
# first line).
set -u
cd "$(dirname "$0")/../.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-2}
FUZZ_UPDATE=${FUZZ_UPDATE:-}
FUZZ_SEED=${FUZZ_SEED:-1}
FUZZ_RUNS=${FUZZ_RUNS:-}
case $FUZZ_SEED in '' | *[!0-9]*) echo "run.sh: FUZZ_SEED must be a number (got '$FUZZ_SEED')" >&2; exit 2 ;; esac
case $FUZZ_RUNS in *[!0-9]*) echo "run.sh: FUZZ_RUNS must be a number (got '$FUZZ_RUNS')" >&2; exit 2 ;; esac
. tests/fuzz/seeds.sh
# Address-space randomisation off where the system allows it (setarch -R):
# libFuzzer takes the operands of the code's comparisons, pointers included,
# as mutation material, so with random addresses the same seed does not
# give the same inputs (fuzz_mscript diverged within 3000 inputs).
FUZZ_NORAND=
if setarch "$(uname -m)" -R true 2>/dev/null; then FUZZ_NORAND="setarch $(uname -m) -R"; fi
# The shipped catalogues (GPUs, Megatron-LM flags) wherever the binaries are.
export TRAINSIM_DATA_DIR="$PWD/topologies"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run_one() { # $1 harness name: fuzz the copy of its corpus, log to $work/NAME.log
    local name=$1 target=${1#fuzz_}
    local corpus="$work/corpus-$target" crashes="$FUZZ_BUILD/crashes/$target"
    mkdir -p "$corpus" "$crashes"
    local f
    while IFS= read -r f; do cp "$f" "$corpus/$(echo "$f" | tr / _)"; done < <(fuzz_seed_files "$target")
    # Every 10 s the status line; -print_final_stats for the run count.
    # -reload=0: one process per harness, and the periodic (timed) re-read of
    # the corpus directory would make the inputs differ from run to run
    $FUZZ_NORAND "$FUZZ_BUILD/$name" "$corpus" -seed="$FUZZ_SEED" ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} -reload=0 \
        -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -max_len=4096 -print_final_stats=1 -artifact_prefix="$crashes/" >"$work/$name.log" 2>&1
    echo $? >"$work/$name.rc"
    if [ "${FUZZ_UPDATE:-}" = 1 ]; then
        mkdir -p "tests/fuzz/corpus/$target"
        "$FUZZ_BUILD/$name" -merge=1 "tests/fuzz/corpus/$target" "$corpus" >>"$work/$name.merge.log" 2>&1
        # the repository's own seed files stay where they are: no copies
        local seeds
        seeds=$(fuzz_repo_seed_files "$target" | xargs -r sha1sum | cut -d' ' -f1)
        for f in "tests/fuzz/corpus/$target"/*; do
            [ -f "$f" ] && grep -qx "$(sha1sum "$f" | cut -d' ' -f1)" <<<"$seeds" && rm -f "$f"
        done
    fi
}
export -f run_one fuzz_seed_files fuzz_repo_seed_files
export FUZZ_BUILD FUZZ_SECONDS FUZZ_UPDATE FUZZ_SEED FUZZ_RUNS FUZZ_NORAND work

echo "== fuzzing: ${FUZZ_SECONDS} s per harness${FUZZ_RUNS:+ or $FUZZ_RUNS inputs}, $FUZZ_JOBS at a time ($# harnesses), seed $FUZZ_SEED, fixed addresses: $([ -n "$FUZZ_NORAND" ] && echo yes || echo "no (setarch -R refused: not exactly reproducible)")"
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
    echo "      reproduce: FUZZ_SEED=$FUZZ_SEED FUZZ_RUNS=${runs:-N} FUZZ_BUILD=$FUZZ_BUILD bash tests/fuzz/run.sh $name"
    if [ "$rc" -ne 0 ]; then
        grep -E 'ERROR: |SUMMARY: |runtime error' "$log" | head -n 5 | sed 's/^/      /'
        echo "      replay: $FUZZ_BUILD/$name ${artifact:-}  (save it under tests/fuzz/regressions/${name#fuzz_}/)"
    fi
done
if [ "$FUZZ_UPDATE" = 1 ]; then echo "corpus merged into tests/fuzz/corpus/ (FUZZ_UPDATE=1)"; fi
echo "$(($# - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
