#!/usr/bin/env bash
# trainsim search on a small case: output, CSV of every candidate, the same
# results with 1 or 2 threads (and over 2 MPI ranks when trainsim-mpi is
# built), --explain, and clear errors. Ends with "N passed, N failed".
set -u
BUILD=${BUILD:-build}
T=${TRAINSIM:-$BUILD/trainsim}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# unfused attention (s x s scores kept): micro-batch 8 goes over memory, so some layouts are rejected
args=(--model megatron-1.7b --gpus 16 --global-batch-size 64 --micro-batch-sizes 1,8
      --schedules 1f1b,interleaved --max-virtual-pipeline-stages 3
      --max-tensor-model-parallel-size 2 --no-recompute-block --quiet --attention-backend unfused)

"$T" search "${args[@]}" --threads 1 --top 5 --explain --out "$tmp/t1.csv" >"$tmp/t1.out" 2>"$tmp/t1.err"
rc=$?
check "search exits 0" test $rc -eq 0
check "prints the ranking" grep -q '^Best of [0-9]* layouts that fit' "$tmp/t1.out"
check "prints 5 ranked rows" test "$(grep -cE '^ +[1-5] +[0-9.]+ +[0-9.]+ ' "$tmp/t1.out")" -eq 5
check "--explain names the main limit" grep -q 'main limit:' "$tmp/t1.out"
n=$(sed -nE 's/^([0-9]+) candidates:.*/\1/p' "$tmp/t1.out")
check "CSV has a row per candidate" test "$(($(wc -l <"$tmp/t1.csv") - 1))" -eq "${n:-0}"
check "CSV header" grep -q '^index,status,reason,tp,pp,dp,vp,micro_batch_size' "$tmp/t1.csv"
check "CSV gives rejection reasons" grep -q 'not divisible by micro-batch' "$tmp/t1.csv"
check "CSV ranks exactly one first" test "$(grep -c ',1$' "$tmp/t1.csv")" -eq 1

"$T" search "${args[@]}" --threads 2 --top 5 --explain --out "$tmp/t2.csv" >"$tmp/t2.out" 2>&1
check "2 threads: same CSV byte for byte" cmp -s "$tmp/t1.csv" "$tmp/t2.csv"
check "2 threads: same ranking" diff <(grep -E '^ +[0-9]+ ' "$tmp/t1.out") <(grep -E '^ +[0-9]+ ' "$tmp/t2.out")

MPI_BIN=$BUILD/trainsim-mpi
if [ -x "$MPI_BIN" ] && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    # OpenMPI keeps process-lifetime allocations; leak reports from it are not ours.
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} timeout 300 mpirun --oversubscribe -np 2 "$MPI_BIN" search "${args[@]}" --threads 1 --out "$tmp/mpi.csv" >"$tmp/mpi.out" 2>&1
    check "mpirun -np 2 trainsim-mpi search exits 0" test $? -eq 0
    check "MPI split: same CSV as one process" cmp -s "$tmp/t1.csv" "$tmp/mpi.csv"
    check "MPI split: printed once" test "$(grep -c '^Best of' "$tmp/mpi.out")" -eq 1
else
    echo "(MPI part skipped: $MPI_BIN or mpirun missing)"
fi

"$T" search --model gpt3-175b --gpus 8 --global-batch-size 8 --quiet --out "$tmp/none.csv" >"$tmp/none.out" 2>&1
rc=$?
check "nothing fits: exit 1" test $rc -eq 1
check "nothing fits: says so" grep -q 'no layout fits' "$tmp/none.out"
check "nothing fits: CSV still written with reasons" grep -q 'memory lower bound' "$tmp/none.csv"

"$T" search --model megatron-1.7b --gpus 32 --schedules 1f1b,zz >"$tmp/bad.out" 2>&1
rc=$?
check "bad --schedules: exit 2" test $rc -eq 2
check "bad --schedules: lists valid names" grep -q 'zb-h1' "$tmp/bad.out"
"$T" search --model no-such-model --gpus 32 >"$tmp/bad2.out" 2>&1
rc=$?
check "unknown --model: exit 2" test $rc -eq 2
check "unknown --model: names the flag" grep -q -- '--model' "$tmp/bad2.out"
"$T" search --micro-batch-sizes 1,x >"$tmp/bad3.out" 2>&1
check "bad --micro-batch-sizes: exit 2" test $? -eq 2
"$T" search --help >"$tmp/help.out" 2>&1
check "--help lists --explain and --top" grep -q -- '--explain' "$tmp/help.out"
check "--help documents --memory-margin and the overhead flags" \
    grep -q -- '--memory-margin' "$tmp/help.out" && grep -q -- '--cuda-context-gib' "$tmp/help.out"

# --memory-margin: kept free on top of the modelled peak. A larger margin
# rejects more layouts for memory, each reason naming it, and every layout
# left fits with the margin to spare.
fits_count() { sed -nE 's/.* ([0-9]+) simulated \(([0-9]+) over memory.*/\1 \2/p' "$1" | awk '{print $1 - $2}'; }
"$T" search "${args[@]}" --threads 2 --memory-margin 0 --out "$tmp/m0.csv" >"$tmp/m0.out" 2>&1
check "--memory-margin 0: exit 0" test $? -eq 0
"$T" search "${args[@]}" --threads 2 --memory-margin 70 --out "$tmp/m70.csv" >"$tmp/m70.out" 2>&1
check "--memory-margin 70: exit 0" test $? -eq 0
check_sh "a larger margin leaves fewer layouts" '[ "$(fits_count "$tmp/m70.out")" -lt "$(fits_count "$tmp/m0.out")" ]'
check "rejections name the margin" grep -q 'memory lower bound [0-9.]* GiB + margin 70.0 GiB > 80.0 GiB per GPU' "$tmp/m70.csv"
check "what fits leaves the margin free" \
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "peak_mem_gib") c = i }
             NR > 1 && $2 == "simulated" && $c + 70 > 80 { bad = 1 } END { exit bad }' "$tmp/m70.csv"
check "the default margin (2 GiB) is in the reasons" grep -q 'margin 2.0 GiB' "$tmp/t1.csv"
"$T" search "${args[@]}" --memory-margin 80 >"$tmp/m80.out" 2>&1; rc=$?
check_sh "a margin of the whole GPU: exit 2 naming the flag" '[ $rc -eq 2 ] && grep -q -- "--memory-margin" "$tmp/m80.out"'

# --out in a directory that cannot be written: refused before the search
# runs (no candidate count, no table printed). Root writes into a mode-555
# directory, so then a path under a regular file stands for it.
mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
ro="$tmp/ro"
if touch "$ro/probe" 2>/dev/null; then rm -f "$ro/probe"; : >"$tmp/plain"; ro="$tmp/plain"; fi
"$T" search "${args[@]}" --out "$ro/t.csv" >"$tmp/ro.out" 2>&1; rc=$?
check_sh "--out unwritable: exit 1 naming the flag and the path, before the search" \
    '[ $rc -eq 1 ] && grep -q -- "--out $ro/t.csv: cannot create a file" "$tmp/ro.out" && ! grep -q "candidates" "$tmp/ro.out"'
chmod 755 "$tmp/ro"

# flash attention (the default for bf16 on A100) keeps no s x s scores: the memory pruning and the
# "without recomputation it needs" advice use its activations, and its selective variant re-runs
# mlp and layernorm (core_attn would drop only the log-sum-exp)
"$T" search --model llama3-8b --gpus 64 --quiet --top 3 --explain --max-tensor-model-parallel-size 2 \
    --max-pipeline-model-parallel-size 2 --schedules 1f1b --out "$tmp/fl.csv" >"$tmp/fl.out" 2>&1
check "flash search: exit 0" test $? -eq 0
check "flash search: selective re-runs mlp and layernorm" grep -q 'selective-mlp+layernorm' "$tmp/fl.csv"
"$T" search --model llama3-8b --gpus 64 --quiet --top 3 --explain --max-tensor-model-parallel-size 2 \
    --max-pipeline-model-parallel-size 2 --schedules 1f1b --attention-backend unfused --out "$tmp/un.csv" >"$tmp/un.out" 2>&1
check "unfused search: selective is core_attn" grep -q ',selective,' "$tmp/un.csv"
check_sh "flash keeps fewer layouts over memory than unfused" \
    '[ "$(grep -c "memory" "$tmp/fl.csv")" -lt "$(grep -c "memory" "$tmp/un.csv")" ]'

# a mixture of experts: ep, etp and the dispatcher are searched; each expert fold that does not
# divide the GPUs is a rejected row with its reason; the same CSV on 1 and 2 threads
moe=(--model qwen3-30b-a3b --gpus 16 --global-batch-size 64 --micro-batch-sizes 1 --schedules 1f1b
     --max-tensor-model-parallel-size 2 --max-pipeline-model-parallel-size 2 --no-recompute-block
     --gpu H100-SXM5-80GB --quiet)
"$T" search "${moe[@]}" --threads 1 --top 3 --explain --out "$tmp/moe1.csv" >"$tmp/moe1.out" 2>&1
check "MoE search: exit 0" test $? -eq 0
check "MoE search: the ranking names ep, etp and the dispatcher" grep -qE '^ +1 .* ep=[0-9]+ etp=[0-9]+ (alltoall|flex-deepep)$' "$tmp/moe1.out"
check "MoE search: counts the rejected expert folds" grep -q 'expert folds [1-9]' "$tmp/moe1.out"
check "MoE search: --explain shows the EP all-to-alls" grep -q 'DP [0-9.]*, EP [0-9.]*)' "$tmp/moe1.out"
check "MoE CSV: expert columns" grep -q ',distributed_optimizer,cp,ep,etp,dispatcher,mem_bound_gib,' "$tmp/moe1.csv"
check "MoE CSV: a fold not dividing the GPUs rejected with its reason" \
    grep -q ',experts,16 GPUs not a multiple of p x etp x ep = 2 x 1 x 16' "$tmp/moe1.csv"
check "MoE CSV: ep 16 with t 2 needs sequence parallelism (Megatron-core's rule)" \
    grep -q 'expert-model-parallel-size 16 with --tensor-model-parallel-size 2 needs --sequence-parallel' "$tmp/moe1.csv"
check_sh "MoE CSV: the simulated ep values are divisors of the 128 experts" \
    'awk -F, '"'"'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR > 1 && $2 == "simulated" && 128 % $c["ep"] { bad = 1 } END { exit bad }'"'"' "$tmp/moe1.csv"'
"$T" search "${moe[@]}" --threads 2 --top 3 --explain --out "$tmp/moe2.csv" >"$tmp/moe2.out" 2>&1
check "MoE search, 2 threads: same CSV byte for byte" cmp -s "$tmp/moe1.csv" "$tmp/moe2.csv"
"$T" search "${moe[@]}" --dispatchers alltoall --max-expert-model-parallel-size 4 --no-expert-tensor-parallel \
    --out "$tmp/moe3.csv" >"$tmp/moe3.out" 2>&1
check "--dispatchers alltoall, ep <= 4, etp 1: exit 0" test $? -eq 0
check_sh "--dispatchers alltoall, ep <= 4, etp 1: nothing else tried" \
    'awk -F, '"'"'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR > 1 && $c["ep"] != "" && ($c["ep"] > 4 || $c["etp"] != 1 || ($c["dispatcher"] != "" && $c["dispatcher"] != "alltoall")) { bad = 1 } END { exit bad }'"'"' "$tmp/moe3.csv"'
"$T" search "${moe[@]}" --dispatchers alltoall,bogus >"$tmp/moe4.out" 2>&1; rc=$?
check_sh "bad --dispatchers: exit 2 naming the valid ones" '[ $rc -eq 2 ] && grep -q "valid: alltoall, flex-deepep, allgather" "$tmp/moe4.out"'
"$T" search --model megatron-1.7b --gpus 16 --max-expert-model-parallel-size 4 >"$tmp/moe5.out" 2>&1; rc=$?
check_sh "--max-expert-model-parallel-size on a dense model: exit 2" '[ $rc -eq 2 ] && grep -q "needs a mixture of experts" "$tmp/moe5.out"'
check "--help documents --dispatchers" grep -q -- '--dispatchers' "$tmp/help.out"
# a Megatron-LM MoE launch script as written: its experts are searched
cp "$(dirname "$0")/../data/scripts/mixtral_8x7b.sh" "$tmp/mixtral.sh"
"$T" search --megatron-script "$tmp/mixtral.sh" --gpus 64 --quiet --top 1 --micro-batch-sizes 1 --schedules 1f1b \
    --max-tensor-model-parallel-size 2 --no-recompute-block >"$tmp/moe6.out" 2>&1
check "search --megatron-script with experts: exit 0" test $? -eq 0
check "search --megatron-script with experts: a ranked MoE layout" grep -qE '^ +1 .* ep=[0-9]+ etp=' "$tmp/moe6.out"
# the same script with one multi-token prediction depth (modelled on the last stage, mtp.h):
# every candidate does more work, so the best iteration is slower
sed 's/--num-layers \([0-9]*\)/--num-layers \1 --mtp-num-layers 1/' "$tmp/mixtral.sh" >"$tmp/mixtral_mtp.sh"
"$T" search --megatron-script "$tmp/mixtral_mtp.sh" --gpus 64 --quiet --top 1 --micro-batch-sizes 1 --schedules 1f1b \
    --max-tensor-model-parallel-size 2 --no-recompute-block >"$tmp/moe7.out" 2>&1
check "search --megatron-script with --mtp-num-layers 1: exit 0" test $? -eq 0
it6=$(awk '$1 == "1" { print $2 }' "$tmp/moe6.out"); it7=$(awk '$1 == "1" { print $2 }' "$tmp/moe7.out")
check_sh "--mtp-num-layers 1: the best iteration is slower ($it6 -> $it7 s)" \
    'awk -v a="$it6" -v b="$it7" '"'"'BEGIN { exit !(a > 0 && b > a) }'"'"''
finish
