#!/usr/bin/env bash
# --qk-layernorm through the command line (layer.h layer_shape.qk_norm): the
# Qwen3 presets set it and trainsim config says so; with it a run is never
# faster and never takes less memory than without (a dense Llama-like model
# and the Qwen3-30B-A3B preset; trainsim infer's prefill too); with multi-latent attention it changes
# nothing (MLA's own q and kv norms); it is modelled, no longer refused;
# the executor refuses it. Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
. "$(dirname "$0")/lib.sh"

# "iteration_time memory_peak" of a simulate run
run() { "$T" simulate "$@" --csv - 2>/dev/null |
    awk -F, '$1 == "iteration" && $2 == "iteration_time" { t = $3 } $1 == "iteration" && $2 == "memory_peak" { m = $3 }
             END { print t, m }'; }

expect_output "RMSNorm (and over each head's query and key)" "$T" config --model qwen3-30b-a3b
expect_output "RMSNorm (and over each head's query and key)" "$T" config --model qwen3-235b-a22b
out=$("$T" config --model qwen3-30b-a3b --qk-layernorm=false 2>&1)
check_sh "--qk-layernorm=false turns the preset's off" '[[ "$out" == *"layers:                RMSNorm, "* ]]'
out=$("$T" config --model llama3-8b 2>&1)
check_sh "a preset without it: no q/k norm" '[[ "$out" != *"query and key"* ]]'

dense=(--model llama3-8b --gpu H100-SXM5-80GB --gpus 8 -t 2 -p 1 --global-batch-size 16)
read -r t0 m0 < <(run "${dense[@]}")
read -r t1 m1 < <(run "${dense[@]}" --qk-layernorm)
check_sh "dense: a step and a memory peak with and without ($t0, $t1 ns)" '[ -n "$t0" ] && [ -n "$t1" ] && [ -n "$m0" ] && [ -n "$m1" ]'
check "dense: with the q/k norms slower ($t1 > $t0 ns)" test "${t1:-0}" -gt "${t0:-0}"
check "dense: with the q/k norms more memory ($m1 > $m0 bytes)" test "${m1:-0}" -gt "${m0:-0}"
read -r t0 m0 < <(run "${dense[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
read -r t1 m1 < <(run "${dense[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
    --qk-layernorm)
check "full recompute: slower ($t1 > $t0 ns)" test "${t1:-0}" -gt "${t0:-0}"
check "full recompute: not less memory ($m1 >= $m0 bytes)" test "${m1:-0}" -ge "${m0:-0}"

q=(--model qwen3-30b-a3b --gpu H100-SXM5-80GB)
read -r t0 m0 < <(run "${q[@]}" --qk-layernorm=false)
read -r t1 m1 < <(run "${q[@]}")
check "qwen3-30b-a3b: the preset (with) slower than without ($t1 > $t0 ns)" test "${t1:-0}" -gt "${t0:-0}"
check "qwen3-30b-a3b: the preset (with) more memory ($m1 > $m0 bytes)" test "${m1:-0}" -gt "${m0:-0}"

mla=(--model deepseek-v3 --gpu H100-SXM5-80GB --num-layers 8 --moe-layer-freq 1 --gpus 64 -p 1
    --global-batch-size 64)
a=$(run "${mla[@]}")
b=$(run "${mla[@]}" --qk-layernorm)
check_sh "MLA: --qk-layernorm names the q and kv norms MLA has already ($a = $b)" '[[ "$a" =~ ^[0-9]+\ [0-9]+$ ]] && [ "$a" = "$b" ]'

i0=$("$T" infer --model llama2-7b --fp16 --batch-size 64 --input-len 512 --output-len 128 --csv - 2>/dev/null |
    awk -F, '$2 == "ttft" { print $3 }')
i1=$("$T" infer --model llama2-7b --fp16 --batch-size 64 --input-len 512 --output-len 128 --qk-layernorm --csv - \
    2>/dev/null | awk -F, '$2 == "ttft" { print $3 }')
check "infer: the q/k norms lengthen the prefill ($i1 > $i0 ns)" test "${i1:-0}" -gt "${i0:-1}"

out=$("$T" config --megatron-flags)
check_sh "config --megatron-flags: --qk-layernorm modelled" '[[ "$out" =~ --qk-layernorm\ +modelled ]]'
check_sh "config --megatron-flags: --qk-l2-norm still refused" '[[ "$out" =~ --qk-l2-norm\ +refused ]]'

if [ -x "${TRAINEXEC:-}" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    A=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 128
        --micro-batch-size 1 --qk-layernorm)
    out=$(timeout 120 mpirun --oversubscribe -np 1 "$TRAINEXEC" "${A[@]}" 2>&1)
    rc=$?
    check_sh "trainexec: --qk-layernorm runs (exit 0)" '[ $rc -eq 0 ] && [[ "$out" == *"peak"* ]]'
    out=$(timeout 120 mpirun --oversubscribe -np 1 "$TRAINEXEC" "${A[@]}" --inference 2>&1)
    rc=$?
    check_sh "trainexec: --qk-layernorm with --inference refused (exit 2, named)" \
        '[ $rc -ne 0 ] && [[ "$out" == *"--qk-layernorm with --inference"* ]]'
else
    echo "trainexec not built (no MPI): its check skipped"
fi
finish
