#!/usr/bin/env bash
# The architecture, checked: every #include of the project's own headers
# goes down the layers, never up or sideways across packages that do not
# know each other. Prints each violation as file:line and exits 1 if any.
#
# Simulator packages, lowest first; a package may include its own headers
# and those of the packages before it (sim/net, sim/infer and sim/search
# sit side by side: none includes another):
#   util < sched < config < model < core < {net, infer, search} < cli
# Executor: exec/core (backend-neutral model and interfaces) may use
# sim/util; exec/cpu and exec/cuda may use exec/core (and kernels/ for
# CUDA); exec/ (the MPI runtime and trainexec) may use all of exec/ and the
# simulator's packages up to model (it reads flags and schedules; trainexec
# compares measured MoE routing with sim/model/moe.h's load factor).
set -u
cd "$(dirname "$0")/../.."

rank() { # package -> its layer; sibling packages share a layer
    case "$1" in
    sim/util) echo 0 ;; sim/sched) echo 1 ;; sim/config) echo 2 ;; sim/model) echo 3 ;;
    sim/core) echo 4 ;; sim/net | sim/infer | sim/search) echo 5 ;; sim/cli) echo 6 ;;
    *) echo -1 ;;
    esac
}

allowed() { # $1 including package, $2 included package
    local from=$1 to=$2
    [ "$from" = "$to" ] && return 0
    case "$from" in
    sim/*)
        local a b
        a=$(rank "$from") b=$(rank "$to")
        [ "$a" -ge 0 ] && [ "$b" -ge 0 ] && [ "$b" -lt "$a" ]
        ;;
    exec/core) [ "$to" = sim/util ] ;;
    exec/cpu) [ "$to" = exec/core ] || [ "$to" = sim/util ] ;;
    exec/cuda | exec/cuda/tools)
        case "$to" in exec/core | exec/cpu | exec/cuda | kernels | sim/util | sim/config | sim/model | sim/sched) return 0 ;; esac
        return 1
        ;;
    exec)
        case "$to" in exec/core | exec/cpu | exec/cuda | sim/util | sim/sched | sim/config | sim/model) return 0 ;; esac
        return 1
        ;;
    kernels) return 1 ;;
    *) return 0 ;; # tests, benchmarks and experiments may use anything
    esac
}

bad=0
while IFS=: read -r file line text; do
    inc=${text#*\"}
    inc=${inc%%\"*}
    from=$(dirname "$file")
    to=$(dirname "$inc")
    if ! allowed "$from" "$to"; then
        echo "$file:$line: $from may not include $inc (the layers are in tests/lint/layers.sh)"
        bad=$((bad + 1))
    fi
done < <(git ls-files 'sim/*' 'exec/*' 'kernels/*' | grep -E '\.(c|h|cu|cuh)$' |
    xargs grep -nE '^#include "(sim|exec|kernels)/')

# Modules (a .h and its .c) must not include each other in a circle either,
# inside a package as across: tsort finds any loop in the include graph.
# A module's private header (X_impl.h) counts as part of module X.
loops=$(git ls-files 'sim/*' 'exec/*' | grep -E '\.(c|h)$' |
    xargs grep -oE '^#include "(sim|exec)/[^"]+\.h"' |
    sed -E 's/^([^:]+)\.[ch]:#include "([^"]+)\.h"$/\1 \2/; s/_impl( |$)/\1/g' |
    awk '$1 != $2' | tsort 2>&1 >/dev/null | grep -v '^tsort: -: input contains a loop:$')
if [ -n "$loops" ]; then
    echo "modules that include each other in a circle:"
    echo "$loops"
    bad=$((bad + 1))
fi

if [ "$bad" -ne 0 ]; then
    echo "layers: $bad include(s) against the architecture"
    exit 1
fi
echo "layers: every include goes down the architecture"
