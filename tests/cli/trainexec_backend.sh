#!/usr/bin/env bash
# trainexec --backend: cpu (the default) unchanged; cuda answers a build
# without CUDA ("built without CUDA", exit 2) and a machine where no GPU
# answers ("no CUDA device", exit 1) with a message and a non-zero exit,
# never a crash or a hang, on one rank and on two. Where a GPU answers, the
# no-GPU cases are skipped (not counted) and a tiny run on the GPU is compared
# with the CPU's loss instead. Ends "N passed, N failed".
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -x "${TRAINEXEC:-}" ] || ! command -v mpirun >/dev/null; then
    echo "trainexec not built (no MPI): skipped"; finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { timeout 120 mpirun --oversubscribe -np "$@"; }
small="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64 --micro-batch-size 1"
first_loss() { grep -oE 'iteration 1/1: loss [0-9.]+' | awk '{print $4}'; }
# no crash: exit below 128 (not a signal), no sanitizer / signal report
no_crash() { [ "$1" -gt 0 ] && [ "$1" -lt 124 ] && ! grep -qE 'Segmentation|signal|Sanitizer|core dumped' <<<"$2"; }

# What --backend cuda must say here: HAVE_CUDA (set by make test) tells how
# trainexec was built; run on its own, either message is accepted.
if [ -z "${HAVE_CUDA+x}" ]; then want="(built without CUDA|no CUDA device)"
elif [ "$HAVE_CUDA" = 1 ]; then want="no CUDA device"
else want="built without CUDA"; fi
have_gpu=0
if [ "${HAVE_CUDA:-}" = 1 ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    have_gpu=1
fi

out=$(run 1 "$TRAINEXEC" --help 2>&1)
check_sh "--help lists --backend with cpu|cuda and default cpu" \
    '[[ "$out" == *"--backend NAME"* && "$out" == *"[cpu|cuda]"* ]] && grep -A3 -- "--backend NAME" <<<"$out" | grep -q "default: cpu"'

out=$(run 1 "$TRAINEXEC" $small --backend gpu 2>&1); rc=$?
check_sh "--backend gpu: exit 2 listing cpu|cuda" '[ $rc -eq 2 ] && [[ "$out" == *"cpu|cuda"* ]]'

out=$(run 1 "$TRAINEXEC" $small --global-batch-size 2 --iterations 1 --warmup 0 2>&1); rc=$?
l_def=$(first_loss <<<"$out")
out=$(run 1 "$TRAINEXEC" $small --global-batch-size 2 --iterations 1 --warmup 0 --backend cpu 2>&1); rc=$?
l_cpu=$(first_loss <<<"$out")
check_sh "--backend cpu = the default ($l_cpu vs $l_def), exit 0, says fp32 cpu" \
    '[ $rc -eq 0 ] && [ -n "$l_cpu" ] && [ "$l_cpu" = "$l_def" ] && [[ "$out" == *"fp32 cpu"* ]]'

out=$(run 1 "$TRAINEXEC" --microbench "$(mktemp -u)" --backend cuda 2>&1); rc=$?
check_sh "--microbench --backend cuda: exit 2 (CPU only; names cudacal, or no CUDA build)" \
    '[ $rc -eq 2 ] && [[ "$out" == *cudacal* || "$out" == *"built without CUDA"* ]]'

if [ $have_gpu = 0 ]; then
    out=$(run 1 "$TRAINEXEC" $small --backend cuda --iterations 1 --warmup 0 2>&1); rc=$?
    check_sh "--backend cuda, 1 rank, no GPU: non-zero exit (rc $rc), no crash, says why" \
        'no_crash $rc "$out" && grep -qE "$want" <<<"$out" && [[ "$out" != *"iteration 1"* ]]'
    out=$(run 2 "$TRAINEXEC" $small -p 2 --backend cuda --iterations 1 --warmup 0 2>&1); rc=$?
    check_sh "--backend cuda, 2 ranks, no GPU: non-zero exit (rc $rc), no hang, one message" \
        'no_crash $rc "$out" && [ "$(grep -cE "$want" <<<"$out")" -eq 1 ]'
else
    out=$(run 1 "$TRAINEXEC" $small --global-batch-size 2 --iterations 1 --warmup 0 --backend cuda 2>&1); rc=$?
    l_gpu=$(first_loss <<<"$out")
    check_sh "--backend cuda on a GPU: exit 0, first loss $l_gpu within 2% of the CPU's $l_cpu (bf16 GEMMs)" \
        '[ $rc -eq 0 ] && [ -n "$l_gpu" ] && awk -v a="$l_gpu" -v b="$l_cpu" "BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }"'
fi

finish
