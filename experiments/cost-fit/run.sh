#!/usr/bin/env bash
# Grid search of the A100 cost-model constants (sim/model/cost.c) against the
# calibration set; prints one line per grid point, best last.
#   bash experiments/cost-fit/run.sh        (after `make`; ~2 s per point)
# Each point recompiles sim/model/cost.c with the constants overridden (-D) and
# links experiments/cost-fit/fit.c against it and build/libtrainsim.a.
set -euo pipefail
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I."
LIBS="-lgsl -lopenblas -lcsv -lm -lpthread"
for eg in 0.64 0.66 0.68 0.70 0.72; do
  for ih in 10 22.8 40; do
    for em in 0.75 0.80 0.85 0.90; do
      for sg in 0.5 1.0; do
        cc $CFLAGS -DA100_E_GEMM=$eg -DA100_I_HALF=$ih -DA100_E_MEM=$em -DA100_B_HALF=2e6 \
           -DA100_OVERLAP_SLOWDOWN=$sg -c sim/model/cost.c -o "$tmp/cost.o"
        cc $CFLAGS experiments/cost-fit/fit.c "$tmp/cost.o" "$BUILD/libtrainsim.a" $LIBS -o "$tmp/fit"
        echo "E_gemm $eg I_half $ih E_mem $em sigma $sg $("$tmp/fit")"
      done
    done
  done
done | sort -k10 -g -r
