#!/usr/bin/env bash
# Runs every test of the build in $BUILD and ends with one line
# "N passed, N failed" (N skipped when GPU tests cannot run).
#   unit: Criterion programs build/tests/unit/test_*      (each test case counts)
#   cli:  tests/cli/*.sh but lib.sh (their shared checks), each ending
#         "N passed, N failed" (TRAINSIM, TRAINEXEC, BUILD set)
#   mpi:  build/tests/mpi/test_* under mpirun; the source's "mpirun-np: K" line gives K
#   gpu:  build/tests/gpu/test_* where a GPU answers; otherwise reported as skipped
#   emu:  build/tests/emu/test_* (CUDA kernels run on the CPU; CUDA builds)
#   fuzz: build/tests/fuzz/fuzz_* (the fuzz harnesses with tests/fuzz/replay.c)
#         on every input under tests/fuzz/regressions/<target>/ and its seeds
#         (tests/fuzz/corpus/<target>/ and the repository files
#         tests/fuzz/seeds.txt names): a crash found once stays fixed
set -u
BUILD=${BUILD:-build}
export BUILD TRAINSIM="$PWD/$BUILD/trainsim" TRAINEXEC="$PWD/$BUILD/trainexec"
pass=0 fail=0 skip=0
failed_names=()

add_counts() { # $1 name, $2 passed, $3 failed
    pass=$((pass + $2)); fail=$((fail + $3))
    if [ "$3" -ne 0 ]; then failed_names+=("$1"); fi
}

# Read the last "N passed, N failed" line of a log; count a crash as one failure.
count_plain() { # $1 name, $2 log, $3 exit code
    local line p f
    line=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    if [ -z "$line" ]; then
        echo "  $1: no 'N passed, N failed' line (exit $3) — counted as 1 failure"
        add_counts "$1" 0 1; return
    fi
    p=$(echo "$line" | sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    add_counts "$1" "$p" "$f"
}

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

# Sanitizer build: OpenMPI keeps process-lifetime allocations in components it
# dlopens and unloads before LeakSanitizer runs, so their stacks end in
# "<unknown module>" and cannot be suppressed by name. Every rank launched by
# mpirun (from this script or from a tests/cli script) therefore runs with leak
# detection off, through an mpirun wrapper first on PATH; address and UB
# checks stay on. Programs not launched by mpirun keep leak detection.
if [ "${SANITIZE:-}" = 1 ] && command -v mpirun >/dev/null; then
    real_mpirun=$(command -v mpirun)
    mkdir -p "$logdir/bin"
    printf '#!/bin/sh\nexec %s -x ASAN_OPTIONS=detect_leaks=0 "$@"\n' "$real_mpirun" >"$logdir/bin/mpirun"
    chmod +x "$logdir/bin/mpirun"
    export PATH="$logdir/bin:$PATH" MPIRUN="$logdir/bin/mpirun"
fi

if [ "${HAVE_CRITERION:-}" = 1 ]; then
    echo "== unit tests (Criterion)"
    for t in "$BUILD"/tests/unit/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t"); log="$logdir/$name.log"
        "$t" --jobs 2 >"$log" 2>&1; rc=$?
        syn=$(grep -E 'Synthesis: Tested' "$log" | tail -n 1)
        if [ -z "$syn" ]; then
            echo "  $name: crashed (exit $rc)"; tail -n 20 "$log"; add_counts "$name" 0 1; continue
        fi
        p=$(echo "$syn" | sed -E 's/.*Passing: ([0-9]+).*/\1/')
        f=$(echo "$syn" | sed -E 's/.*Failing: ([0-9]+).*/\1/')
        c=$(echo "$syn" | sed -E 's/.*Crashing: ([0-9]+).*/\1/')
        printf '  %-32s %s passed, %s failed\n' "$name" "$p" "$((f + c))"
        if [ $((f + c)) -ne 0 ] || [ $rc -ne 0 ]; then grep -vE '^\[----\]|Synthesis' "$log" | tail -n 40; fi
        add_counts "$name" "$p" "$((f + c))"
    done
else
    echo "== unit tests skipped: Criterion not installed (./install.sh)"
fi

echo "== command-line tests"
for t in tests/cli/*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh); log="$logdir/cli-$name.log"
    [ "$name" = lib ] && continue   # the scripts' shared checks, not a test
    bash "$t" >"$log" 2>&1; rc=$?
    before=$fail; count_plain "$name" "$log" $rc
    printf '  %-32s %s\n' "$name" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)"
    if [ $fail -ne $before ]; then grep -E 'FAIL|error' "$log" | head -n 40; fi
done

if [ "${HAVE_MPI:-}" = 1 ]; then
    echo "== MPI tests"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    for t in "$BUILD"/tests/mpi/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t"); log="$logdir/mpi-$name.log"
        np=$(grep -oE 'mpirun-np: *[0-9]+' "tests/mpi/$name.c" | grep -oE '[0-9]+' | head -n 1)
        timeout 900 ${MPIRUN:-mpirun} --oversubscribe -np "${np:-2}" "$t" >"$log" 2>&1; rc=$?
        before=$fail; count_plain "$name" "$log" $rc
        printf '  %-32s np=%s %s\n' "$name" "${np:-2}" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)"
        if [ $fail -ne $before ]; then tail -n 40 "$log"; fi
    done
else
    echo "== MPI tests skipped: no MPI found at build time"
fi

gpu_tests=$(ls "$BUILD"/tests/gpu/test_* 2>/dev/null)
if [ "${HAVE_CUDA:-}" = 1 ] && [ -n "$gpu_tests" ] && nvidia-smi -L >/dev/null 2>&1; then
    echo "== GPU tests"
    for t in $gpu_tests; do
        name=$(basename "$t"); log="$logdir/gpu-$name.log"
        "$t" >"$log" 2>&1; rc=$?
        count_plain "$name" "$log" $rc
        printf '  %-32s %s\n' "$name" "$(grep -E '[0-9]+ passed' "$log" | tail -n 1)"
    done
else
    n=$(ls tests/gpu/test_*.c 2>/dev/null | wc -l)
    skip=$((skip + n))
    echo "== GPU tests SKIPPED ($n programs): $( [ "${HAVE_CUDA:-}" = 1 ] && echo 'no GPU answers nvidia-smi on this machine' || echo 'built without CUDA')"
fi

emu_tests=$(ls "$BUILD"/tests/emu/test_* 2>/dev/null)
if [ -n "$emu_tests" ]; then # CUDA kernels run on the CPU (tests/emu): no GPU needed
    echo "== CUDA kernels under host emulation"
    for t in $emu_tests; do
        name=$(basename "$t"); log="$logdir/emu-$name.log"
        "$t" >"$log" 2>&1; rc=$?
        before=$fail; count_plain "$name" "$log" $rc
        printf '  %-32s %s\n' "$name" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)"
        if [ $fail -ne $before ]; then grep FAIL "$log" | head -n 20; fi
    done
fi

echo "== fuzz regressions and seed corpora (tests/fuzz, replayed without libFuzzer)"
. tests/fuzz/seeds.sh
for t in "$BUILD"/tests/fuzz/fuzz_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t"); target=${name#fuzz_}; log="$logdir/fuzz-$name.log"
    files=()
    [ -d "tests/fuzz/regressions/$target" ] &&
        while IFS= read -r f; do files+=("$f"); done < <(find "tests/fuzz/regressions/$target" -type f | sort)
    while IFS= read -r f; do files+=("$f"); done < <(fuzz_seed_files "$target") # tests/fuzz/seeds.sh
    TRAINSIM_DATA_DIR="$PWD/topologies" timeout 600 "$t" "${files[@]}" >"$log" 2>&1; rc=$?
    before=$fail; count_plain "$name" "$log" $rc
    printf '  %-32s %s\n' "$name" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)"
    if [ $fail -ne $before ]; then tail -n 30 "$log"; fi
done

if [ ${#failed_names[@]} -gt 0 ]; then echo "failing: ${failed_names[*]}"; fi
if [ $skip -gt 0 ]; then
    echo "$pass passed, $fail failed, $skip skipped"
else
    echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
