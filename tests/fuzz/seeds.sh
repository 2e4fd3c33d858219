# shellcheck shell=bash
# tests/fuzz/seeds.sh — the seed inputs of a fuzz target: sourced by
# tests/fuzz/run.sh and tests/run.sh (run from the repository root).
#
#   fuzz_seed_files TARGET
#       Prints, one a line and sorted, every file of tests/fuzz/corpus/TARGET/
#       and every repository file tests/fuzz/seeds.txt names for TARGET
#       (directories expanded to their files, patterns to their matches).
#   fuzz_repo_seed_files TARGET
#       The same, the seeds.txt files only.

fuzz_repo_seed_files() {
    local target=$1 t p f
    while read -r t p; do
        case $t in '' | '#'*) continue ;; esac
        [ "$t" = "$target" ] || continue
        for f in $p; do # the pattern expands here
            if [ -d "$f" ]; then find "$f" -type f; elif [ -f "$f" ]; then echo "$f"; fi
        done
    done <tests/fuzz/seeds.txt | sort
}

fuzz_seed_files() {
    {
        [ -d "tests/fuzz/corpus/$1" ] && find "tests/fuzz/corpus/$1" -type f
        fuzz_repo_seed_files "$1"
    } | sort
}
