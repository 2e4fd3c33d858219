#!/usr/bin/env bash
# Command-line tests of trainexec (the reference executor): help, bad input,
# a tiny 2-rank pipeline run and its outputs (trace JSON, ops CSV, report).
# Ends with "N passed, N failed". Needs mpirun; says so and counts nothing
# when trainexec was not built (no MPI).
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -x "${TRAINEXEC:-}" ] || ! command -v mpirun >/dev/null; then
    echo "trainexec not built (no MPI): skipped"; finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { timeout 120 mpirun --oversubscribe -np "$@"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$(run 1 "$TRAINEXEC" --help 2>&1)
check_sh "--help lists flags with units and defaults" \
    '[[ "$out" == *--num-layers* && "$out" == *--schedule* && "$out" == *--microbench* && "$out" == *sequences* ]]'

out=$(run 1 "$TRAINEXEC" --num-layerz 2 2>&1); rc=$?
check_sh "unknown flag: exit 2 and the nearest name" '[ $rc -eq 2 ] && [[ "$out" == *--num-layers* ]]'

# (standard error only: there the line cannot interleave with the help text or another rank's)
out=$(run 2 "$TRAINEXEC" --log-interval 10 --data-path a b 2>&1 >/dev/null); rc=$?
check_sh "Megatron-LM flags it ignores: named once (rank 0), on one line, then the resolution goes on" \
    '[ $rc -eq 2 ] && [ "$(grep -c "^ignored (cannot change performance): --log-interval, --data-path$" <<<"$out")" -eq 1 ] && [[ "$out" == *"Megatron-LM requires"* ]]'

out=$(run 2 "$TRAINEXEC" --moe-apply-probs-on-input 2>&1); rc=$?
check_sh "a Megatron-LM flag it refuses: exit 2 with the reason, once" \
    '[ $rc -eq 2 ] && [ "$(grep -c -- "--moe-apply-probs-on-input: not modelled: mixture of experts" <<<"$out")" -eq 1 ]'

small="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64 --micro-batch-size 1"
out=$(run 2 "$TRAINEXEC" $small --qk-layernorm -t 2 --global-batch-size 2 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "--qk-layernorm trains (t = 2): the q/k norms named in the model line" '[ $rc -eq 0 ] && [[ "$out" == *qk-norm* ]]'
moe="--num-experts 4 --moe-router-topk 2 --disable-bias-linear"
out=$(run 2 "$TRAINEXEC" $small $moe --moe-layer-recompute --expert-model-parallel-size 2 --global-batch-size 2 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "--moe-layer-recompute trains (ep = 2): named in the mode line" '[ $rc -eq 0 ] && [[ "$out" == *"recompute selective core_attn moe"* ]]'
out=$(run 1 "$TRAINEXEC" $small $moe --recompute-granularity selective --recompute-modules moe mlp --global-batch-size 1 2>&1); rc=$?
check_sh "--recompute-modules mlp: exit 2, naming the modules the executor recomputes" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--recompute-modules: the executor recomputes the attention core"* ]]'
out=$(run 1 "$TRAINEXEC" 2>&1); rc=$?
check_sh "no shape: exit 2 naming the flags Megatron-LM requires" \
    '[ $rc -eq 2 ] && [[ "$out" == *"Megatron-LM requires"* && "$out" == *"missing: --num-layers"* ]]'

moe="--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --moe-ffn-hidden-size 64"
out=$(run 2 "$TRAINEXEC" $small $moe --expert-model-parallel-size 2 --iterations 2 --warmup 1 2>&1); rc=$?
check_sh "MoE layers, --expert-model-parallel-size 2 (d=2): runs, the header and each rank's expert rows and time" \
    '[ $rc -eq 0 ] && [[ "$out" == *"in 4 MoE layers (E=4 top-2 expert ffn=64, dropless, ep=2 edp=1)"* && "$out" == *"iteration 3/3"* ]] &&
     [ "$(grep -cE "^  MoE rank [01] .*ep rank [01]\): expert rows [0-9.]+ per iteration, expert GEMMs [0-9.]+ ms" <<<"$out")" -eq 2 ] &&
     [[ "$out" == *"MoE load check against the simulator'"'"'s load factor: every expert group matches"* ]]'
out=$(run 4 "$TRAINEXEC" $small $moe --expert-model-parallel-size 2 --moe-router-force-load-balancing \
      --moe-layer-freq 2 --pipeline-model-parallel-size 2 --global-batch-size 4 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "MoE, forced balance, ep=2 on p=2 x d=2: each pipeline rank's expert group at load factor 1, as simulated" \
    '[ $rc -eq 0 ] && [[ "$out" == *"in 2 MoE layers"* ]] &&
     [ "$(grep -c "forced balance, the simulator'"'"'s load factor 1: matches" <<<"$out")" -eq 2 ]'
out=$(run 2 "$TRAINEXEC" $small $moe --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel \
      --expert-tensor-parallel-size 1 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "MoE, ep=2 over the two tensor ranks (t=2, sp, etp=1): runs" \
    '[ $rc -eq 0 ] && [[ "$out" == *"ep=2 edp=1"* && "$out" == *"every expert group matches"* ]]'
out=$(run 2 "$TRAINEXEC" $small $moe --bf16 --expert-model-parallel-size 2 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "MoE layers with flash attention (--bf16), ep=2: runs" \
    '[ $rc -eq 0 ] && [[ "$out" == *"ep=2 edp=1"* && "$out" == *"flash attention"* && "$out" == *"every expert group matches"* ]]'
out1=$(run 1 "$TRAINEXEC" $small $moe --bf16 --global-batch-size 1 --iterations 1 --warmup 0 2>&1)
out=$(run 2 "$TRAINEXEC" $small $moe --bf16 --context-parallel-size 2 --expert-model-parallel-size 2 \
      --global-batch-size 1 --iterations 1 --warmup 0 2>&1); rc=$?
l1=$(grep -o "iteration 1/1: loss [0-9.]*" <<<"$out1"); l2=$(grep -o "iteration 1/1: loss [0-9.]*" <<<"$out")
check_sh "MoE with context parallelism (cp=2, ep=2 over the two cp ranks): the 1-rank loss ($l1)" \
    '[ $rc -eq 0 ] && [ -n "$l1" ] && [ "$l1" = "$l2" ] && [[ "$out" == *" cp=2 "* && "$out" == *"ep=2 edp=1"* ]] &&
     [[ "$out" == *"(tp 0 cp 1 pp 0 dp 0, ep rank 1)"* ]]'
out=$(run 2 "$TRAINEXEC" $small $moe --tensor-model-parallel-size 2 --sequence-parallel 2>&1); rc=$?
check_sh "MoE with t=2 and the default expert tensor parallelism (= t): exit 2 naming --expert-tensor-parallel-size" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--expert-tensor-parallel-size 2:"* && "$out" == *"give --expert-tensor-parallel-size 1"* ]]'
out=$(run 2 "$TRAINEXEC" $small $moe --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 2>&1); rc=$?
check_sh "MoE with t=2 without sequence parallelism: exit 2 naming --sequence-parallel" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--sequence-parallel"* ]]'
out=$(run 1 "$TRAINEXEC" $small $moe --recompute-granularity full 2>&1); rc=$?
check_sh "MoE with full recomputation: exit 2 naming it" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--recompute-granularity full with --num-experts"* ]]'
# MoE on --backend cuda: accepted by the configuration check (the layer runs on the backend's MoE ops)
moe1="$small $moe --global-batch-size 1 --iterations 1 --warmup 0"
out=$(run 1 "$TRAINEXEC" $moe1 --backend cuda 2>&1); rc=$?
if [[ "$out" == *"built without CUDA"* ]]; then
    check_sh "MoE on --backend cuda, a build without CUDA: exit 2 naming --backend" \
        '[ $rc -eq 2 ] && [[ "$out" == *"--backend cuda: this trainexec was built without CUDA"* ]]'
elif [[ "$out" == *"no CUDA device"* ]]; then # a CUDA build on a machine without a GPU: the flags pass
    check_sh "MoE on --backend cuda, no GPU: the experts accepted, then no CUDA device, exit 1" \
        '[ $rc -eq 1 ] && [[ "$out" != *"--num-experts"* ]]'
else # bf16 GEMMs on the GPU: the first loss within 2% of the CPU's (as tests/cli/trainexec_backend.sh)
    l_gpu=$(grep -oE "iteration 1/1: loss [0-9.]+" <<<"$out" | awk '{print $4}')
    l_cpu=$(run 1 "$TRAINEXEC" $moe1 2>&1 | grep -oE "iteration 1/1: loss [0-9.]+" | awk '{print $4}')
    check_sh "MoE on --backend cuda: runs, first loss $l_gpu within 2% of the CPU's $l_cpu" \
        '[ $rc -eq 0 ] && [ -n "$l_gpu" ] && [ -n "$l_cpu" ] &&
         awk -v a="$l_gpu" -v b="$l_cpu" "BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }"'
fi
out=$(run 1 "$TRAINEXEC" $small --bf16 --gpu H100-SXM5-80GB --fp8-format e4m3 2>&1); rc=$?
check_sh "FP8: exit 2 naming --fp8-format" '[ $rc -eq 2 ] && [[ "$out" == *"--fp8-format e4m3: the executor"* ]]'
out=$(run 1 "$TRAINEXEC" $small --no-bias-dropout-fusion 2>&1); rc=$?
check_sh "a fusion flag: exit 2, the executor runs its own kernels" \
    '[ $rc -eq 2 ] && [[ "$out" == *"the executor runs its own kernels"* ]]'
out=$(run 1 "$TRAINEXEC" $small --log-num-zeros-in-grad 2>&1); rc=$?
check_sh "--log-num-zeros-in-grad: exit 2, not counted by the executor" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--log-num-zeros-in-grad: the executor"* ]]'

out=$(run 1 "$TRAINEXEC" $small --recompute-granularity selective --recompute-modules mlp 2>&1); rc=$?
check_sh "selective recomputation of the MLP: exit 2, not supported" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--recompute-modules"* ]]'
out=$(run 1 "$TRAINEXEC" $small --recompute-granularity selective --iterations 2 --warmup 0 2>&1); rc=$?
check_sh "selective recomputation (core_attn): runs, the header says so" \
    '[ $rc -eq 0 ] && [[ "$out" == *"recompute selective core_attn"* && "$out" == *"iteration 2/2"* ]]'
out=$(run 2 "$TRAINEXEC" $small --recompute-granularity full --recompute-method block --recompute-num-layers 1 \
      --pipeline-model-parallel-size 2 --global-batch-size 4 --iterations 2 --warmup 0 2>&1); rc=$?
check_sh "full recomputation (block, p=2): runs, the header says so" \
    '[ $rc -eq 0 ] && [[ "$out" == *"recompute full block 1"* && "$out" == *"iteration 2/2"* ]]'

llama="--swiglu --group-query-attention --num-query-groups 2 --normalization RMSNorm --disable-bias-linear \
       --position-embedding-type rope --untie-embeddings-and-output-weights"
out=$(run 2 "$TRAINEXEC" $small $llama --tensor-model-parallel-size 2 --iterations 2 --warmup 0 2>&1); rc=$?
check_sh "Llama-architecture layers (t=2): run, the header names them" \
    '[ $rc -eq 0 ] && [[ "$out" == *"[groups=2 RMSNorm SwiGLU no-bias rope untied]"* && "$out" == *"iteration 2/2"* ]]'
out=$(run 1 "$TRAINEXEC" $small $llama --qk-layernorm --backend cuda 2>&1); rc=$?
# a build without CUDA (the sanitizer build, a machine without the toolkit) refuses --backend cuda first
if [[ "$out" == *"built without CUDA"* ]]; then
    check_sh "Llama-architecture layers on --backend cuda, a build without CUDA: exit 2 naming --backend" \
        '[ $rc -eq 2 ] && [[ "$out" == *"--backend cuda: this trainexec was built without CUDA"* ]]'
elif [[ "$out" == *"no CUDA device"* ]]; then # a CUDA build on a machine without a GPU: the flags pass
    check_sh "Llama-architecture layers on --backend cuda, no GPU: the layers accepted, then no CUDA device, exit 1" \
        '[ $rc -eq 1 ] && [[ "$out" != *"has no kernel"* ]]'
else
    check_sh "Llama-architecture layers and --qk-layernorm on --backend cuda: run, the header names them" \
        '[ $rc -eq 0 ] && [[ "$out" == *"[groups=2 RMSNorm SwiGLU no-bias rope qk-norm untied]"* ]]'
fi
out=$(run 4 "$TRAINEXEC" $small --num-query-groups 2 --group-query-attention --tensor-model-parallel-size 4 \
      2>&1); rc=$?
check_sh "query groups not a multiple of t: exit 2" '[ $rc -eq 2 ] && [[ "$out" == *"--num-query-groups"* ]]'

out=$(run 2 "$TRAINEXEC" $small --use-distributed-optimizer --global-batch-size 2 --iterations 2 --warmup 0 2>&1); rc=$?
check_sh "distributed optimizer (d=2): runs, the header says so" \
    '[ $rc -eq 0 ] && [[ "$out" == *"distributed optimizer"* && "$out" == *"iteration 2/2"* ]]'

out=$(run 4 "$TRAINEXEC" $small --use-distributed-optimizer --pipeline-model-parallel-size 2 2>&1); rc=$?
check_sh "distributed optimizer with the tied output layer on p=2, d=2: exit 2 naming the untie flag" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--untie-embeddings-and-output-weights"* ]]'

out=$(run 1 "$TRAINEXEC" --num-layers 4 --seq-length 16 --micro-batch-size 1 --hidden-size 30 --num-attention-heads 8 2>&1); rc=$?
check_sh "hidden not a multiple of heads: exit 2 naming both flags" \
    '[ $rc -eq 2 ] && [[ "$out" == *--hidden-size* && "$out" == *--num-attention-heads* ]]'

out=$(run 2 "$TRAINEXEC" $small --pipeline-model-parallel-size 4 2>&1); rc=$?
check_sh "2 ranks for p=4: exit 2 with the rank rule" '[ $rc -eq 2 ] && [[ "$out" == *"not a multiple"* ]]'

out=$(run 2 "$TRAINEXEC" $small --schedule interleaved --pipeline-model-parallel-size 2 \
      --num-layers-per-virtual-pipeline-stage 3 2>&1); rc=$?
check_sh "interleaved with layers per virtual stage not dividing: exit 2" \
    '[ $rc -eq 2 ] && [[ "$out" == *--num-layers-per-virtual-pipeline-stage* ]]'

out=$(run 2 "$TRAINEXEC" $small --pipeline-model-parallel-size 2 --global-batch-size 4 \
      --schedule zb-h1 --iterations 2 --warmup 0 --op-trace \
      --trace "$tmp/t.json" --ops-csv "$tmp/ops.csv" --report-csv "$tmp/rep.csv" 2>&1); rc=$?
check_sh "2-rank zb-h1 run succeeds" '[ $rc -eq 0 ] && [[ "$out" == *"iteration 2/2"* ]]'
check_sh "trace is JSON with X events on both ranks" \
    'python3 -c "import json,sys; e=json.load(open(\"$tmp/t.json\"))[\"traceEvents\"]; sys.exit(not {x[\"pid\"] for x in e if x[\"ph\"]==\"X\"}=={0,1})"'
check_sh "ops CSV has I and W actions and GEMM ops" \
    'grep -q ",action,I," "$tmp/ops.csv" && grep -q ",action,W," "$tmp/ops.csv" && grep -q ",op,qkv," "$tmp/ops.csv"'
check_sh "data step: the loading ranks' copy in the ops CSV, its mean per micro-batch printed as --data-loader-ns" \
    'grep -q ",op,data," "$tmp/ops.csv" &&
     [[ "$out" =~ "data step "[0-9.]+" us per micro-batch (rank "[01]": host generation "[0-9.]+" us, copy to the device "[0-9.]+" us; mean of 8): trainsim simulate --data-loader-ns "[0-9]+ ]]'
outr=$(run 1 "$TRAINEXEC" $small --data-loader-ns 1000 2>&1); rc=$?
check_sh "--data-loader-ns refused (the executor measures its own)" \
    '[ $rc -eq 2 ] && [[ "$outr" == *"--data-loader-ns: a measured figure"* ]]'
check_sh "report has one row per rank and positive peaks" \
    '[ $(wc -l < "$tmp/rep.csv") -eq 3 ] && awk -F, "NR>1 && \$9 <= 0 {exit 1}" "$tmp/rep.csv"'
l1=$(echo "$out" | grep -oE 'iteration 1/2: loss [0-9.]+' | awk '{print $4}')
out2=$(run 1 "$TRAINEXEC" $small --global-batch-size 4 --iterations 1 --warmup 0 2>&1)
l2=$(echo "$out2" | grep -oE 'iteration 1/1: loss [0-9.]+' | awk '{print $4}')
check_sh "1-rank and 2-rank pipeline give the same first loss ($l1 vs $l2)" '[ -n "$l1" ] && [ "$l1" = "$l2" ]'

# an uneven pipeline layout (a stage with the embedding only, then 2, 1, 1
# layers; interleaved, v = 2 from the stage count) computes the same loss
out=$(run 2 "$TRAINEXEC" $small -p 2 --global-batch-size 4 --schedule interleaved \
      --pipeline-model-parallel-layout 'E|t*2|t|tL' --iterations 1 --warmup 0 2>&1); rc=$?
l3=$(echo "$out" | grep -oE 'iteration 1/1: loss [0-9.]+' | awk '{print $4}')
check_sh "2-rank interleaved run of layout E|t*2|t|tL gives the 1-rank loss ($l3 vs $l2)" \
    '[ $rc -eq 0 ] && [ -n "$l3" ] && [ "$l3" = "$l2" ]'

out=$(run 2 "$TRAINEXEC" $small -p 2 --iterations 1 --warmup 0 --trace "$tmp/no/such/dir/t.json" 2>&1); rc=$?
check_sh "unwritable trace path: exit 1 naming the directory, no hang" \
    '[ $rc -ne 0 ] && [[ "$out" == *"$tmp/no/such/dir"* ]]'

printf '0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n' > "$tmp/s.csv"
out=$(run 2 "$TRAINEXEC" $small -p 2 --schedule-csv "$tmp/s.csv" 2>&1); rc=$?
check_sh "--schedule-csv with a mismatching global batch: exit 2 naming the batch" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--global-batch-size 2"* ]]'
out=$(run 2 "$TRAINEXEC" $small -p 2 --schedule-csv "$tmp/s.csv" --global-batch-size 2 \
      --iterations 1 --warmup 0 2>&1)
l3=$(echo "$out" | grep -oE 'iteration 1/1: loss [0-9.]+' | awk '{print $4}')
out2=$(run 1 "$TRAINEXEC" $small --global-batch-size 2 --iterations 1 --warmup 0 2>&1)
l4=$(echo "$out2" | grep -oE 'iteration 1/1: loss [0-9.]+' | awk '{print $4}')
check_sh "compute-only CSV zero-bubble schedule on 2 ranks = 1 rank ($l3 vs $l4)" '[ -n "$l3" ] && [ "$l3" = "$l4" ]'

# Failure handling: every case must end (non-zero) within BOUND_S seconds, not hang. The bound is
# generous against mpirun's start-up (1-3 s on the 2-core reference machine) and the watchdog's 2 s.
BOUND_S=30
# elapsed seconds since $1 (an $EPOCHREALTIME)
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
within() { awk -v e="$1" -v b="$BOUND_S" 'BEGIN { exit !(e < b) }'; }
mpmd() { timeout 120 mpirun --oversubscribe "$@"; }
shape="--hidden-size 32 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64 --micro-batch-size 1"

t0=$EPOCHREALTIME
out=$(mpmd -np 1 "$TRAINEXEC" $small : -np 1 "$TRAINEXEC" $small --bogus-flag 2>&1); rc=$?; el=$(since "$t0")
check_sh "a bad flag on rank 1 only: rank 1 names it, rank 0 names rank 1, exit non-zero in ${el} s < ${BOUND_S} s" \
    '[ $rc -ne 0 ] && within "$el" && [[ "$out" == *"rank 1: unknown flag '"'"'--bogus-flag'"'"'"* && "$out" == *"failed to start (ranks 1)"* ]]'

t0=$EPOCHREALTIME
out=$(mpmd -np 1 "$TRAINEXEC" $small -p 2 --global-batch-size 2 --schedule-csv "$tmp/s.csv" : \
      -np 1 "$TRAINEXEC" $small -p 2 --global-batch-size 2 --schedule-csv "$tmp/missing.csv" 2>&1); rc=$?; el=$(since "$t0")
check_sh "--schedule-csv missing on rank 1 only: rank 1 names the file, exit non-zero in ${el} s < ${BOUND_S} s" \
    '[ $rc -ne 0 ] && within "$el" && [[ "$out" == *"rank 1: --schedule-csv: $tmp/missing.csv"* && "$out" == *"(ranks 1)"* ]]'

t0=$EPOCHREALTIME
out=$(mpmd -np 1 "$TRAINEXEC" $shape --num-layers 4 -p 2 --global-batch-size 4 : \
      -np 1 "$TRAINEXEC" $shape --num-layers 2 -p 2 --global-batch-size 4 2>&1); rc=$?; el=$(since "$t0")
check_sh "--num-layers 4 on rank 0, 2 on rank 1: both configurations shown, exit non-zero in ${el} s < ${BOUND_S} s, no iteration" \
    '[ $rc -ne 0 ] && within "$el" && [[ "$out" == *"rank 1: configuration differs from rank 0'"'"'s: "*"L=2 "* && "$out" == *"rank 0: configuration "*"L=4 "* && "$out" == *"configuration or schedule (ranks 1)"* && "$out" != *iteration\ 1/* ]]'

t0=$EPOCHREALTIME
out=$(mpmd -np 1 "$TRAINEXEC" --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64 --micro-batch-size 1 : \
      -np 1 "$TRAINEXEC" --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --padded-vocab-size 64 --micro-batch-size 1 2>&1); rc=$?; el=$(since "$t0")
check_sh "--hidden-size 32 on rank 0, 64 on rank 1: refused before any collective, exit non-zero in ${el} s < ${BOUND_S} s" \
    '[ $rc -ne 0 ] && within "$el" && [[ "$out" == *"rank 1: configuration differs"*"h=64 "* && "$out" != *corrupted* ]]'

# stop_rank1 PIDFILE READY OUTFILE CMD...: runs CMD in the background (its output in OUTFILE),
# waits until the shell text READY holds (at most 120 s), SIGSTOPs rank 1 (the pid in PIDFILE.1)
# and waits for the job. Sets stopped (the pid), rc, el (seconds from the stop to the job's end:
# the bound counts from the stop, not from mpirun's start-up) and out.
stop_rank1() {
    local pidfile=$1 ready=$2 outfile=$3 job t0
    shift 3
    "$@" >"$outfile" 2>&1 &
    job=$!
    for _ in $(seq 1200); do eval "$ready" && break; sleep 0.1; done
    stopped=$(cat "$pidfile.1" 2>/dev/null)
    t0=$EPOCHREALTIME
    [ -n "$stopped" ] && kill -STOP "$stopped"
    wait "$job"; rc=$?; el=$(since "$t0")
    [ -n "$stopped" ] && kill -KILL "$stopped" 2>/dev/null # only if mpirun left it behind
    out=$(cat "$outfile")
}

# a rank alive but stuck: SIGSTOP rank 1 mid-run (1 s after its pid file appears); rank 0's
# watchdog (--timeout 2) names itself and the wait
stop_rank1 "$tmp/pid" '[ -s "$tmp/pid.1" ] && sleep 1' "$tmp/stop.out" \
    mpmd -np 2 "$TRAINEXEC" $small -p 2 --global-batch-size 4 --iterations 1000000 --warmup 0 --timeout 2 \
    --pid-file "$tmp/pid"
check_sh "SIGSTOP of rank 1 with --timeout 2: rank 0 names the wait, the job aborts ${el} s after the stop < ${BOUND_S} s" \
    '[ -n "$stopped" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$el" && [[ "$out" == *"rank 0: no progress for"*"waiting in "*"--timeout 2.0 s"* ]]'

# the same in --microbench: SIGSTOP rank 1 once the message sweep has begun (rank 0 printed its first
# "messages of" line); rank 0 waits in a ping-pong or collective and its watchdog aborts the job
stop_rank1 "$tmp/mbpid" 'grep -q "microbench: messages of" "$tmp/mbstop.out" 2>/dev/null' "$tmp/mbstop.out" \
    mpmd -np 2 "$TRAINEXEC" --microbench "$tmp/mb-stop.csv" --timeout 2 --pid-file "$tmp/mbpid"
check_sh "--microbench, SIGSTOP of rank 1 in the message sweep with --timeout 2: rank 0's watchdog aborts ${el} s after the stop < ${BOUND_S} s, no CSV" \
    '[ -n "$stopped" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$el" && [[ "$out" == *"rank 0: no progress for"*"waiting in microbench "*"--timeout 2.0 s"* ]] && [ ! -e "$tmp/mb-stop.csv" ]'

t0=$EPOCHREALTIME
out=$(run 2 "$TRAINEXEC" $small --lr 10 --iterations 20 2>&1); rc=$?; el=$(since "$t0")
check_sh "--lr 10: the loss stops being finite, the run stops naming iteration and rank, exit 1 in ${el} s < ${BOUND_S} s" \
    '[ $rc -ne 0 ] && within "$el" && [[ "$out" == *"rank 0: iteration "*"not finite: training diverged"* && "$out" != *"iteration 21/21"* ]]'

# the watchdog counts waits, not compute: a 1-rank iteration of about 0.6 s computes far past --timeout 0.05
out=$(run 1 "$TRAINEXEC" --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 \
      --padded-vocab-size 4096 --micro-batch-size 2 --iterations 1 --warmup 0 --timeout 0.05 2>&1); rc=$?
ms=$(echo "$out" | grep -oE 'iteration 1/1: loss [0-9.]+, [0-9.]+ ms' | awk '{print $5}')
check_sh "--timeout 0.05 does not fire during a ${ms} ms iteration of compute" \
    '[ $rc -eq 0 ] && [ -n "$ms" ] && awk -v m="$ms" "BEGIN { exit !(m > 50) }" && [[ "$out" != *"no progress"* ]]'

out=$(run 1 "$TRAINEXEC" --help 2>&1)
check_sh "--help lists --timeout (s, auto rule), --divergence-factor and --pid-file" \
    '[[ "$out" == *--timeout* && "$out" == *"10 x that iteration"* && "$out" == *--divergence-factor* && "$out" == *--pid-file* ]]'

# one resolver: trainexec and trainsim config read the same flags as the same layout (Megatron-LM's
# defaults: 1F1B, global batch = micro-batch x d with d = ranks / (t x p))
TS=${TRAINSIM:-$(dirname "$TRAINEXEC")/trainsim}
out=$(run 2 "$TRAINEXEC" $small --iterations 1 --warmup 0 2>&1)
cfg=$("$TS" config $small --gpus 2 2>&1)
check_sh "trainexec and trainsim config resolve the same layout (d 2, 1f1b, B = b x d = 2)" \
    '[[ "$out" == *"t=1 p=1 d=2 v=1, 1f1b, unfused attention, b=1 B=2 m=1"* && "$cfg" == *"t=1 p=1 d=2 v=1 (2 GPUs"* && "$cfg" == *"global batch 2 sequences"* ]]'

# rank order: Megatron-core's tp-cp-dp-pp (as trainsim numbers ranks): with p = 2, d = 2 rank 1 is the
# second data-parallel replica of stage 0, rank 2 the first of stage 1
out=$(run 4 "$TRAINEXEC" $small -p 2 --global-batch-size 4 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "p = 2, d = 2: ranks in tp-dp-pp order" \
    '[ $rc -eq 0 ] && [[ "$out" == *"rank 1 (tp 0 pp 0 dp 1)"* && "$out" == *"rank 2 (tp 0 pp 1 dp 0)"* ]]'

# the attention backend as the simulator resolves it: auto is unfused in fp32 (Megatron-LM's default
# precision), flash with --bf16; the executor runs what the same flags mean to trainsim
cfg=$("$TS" config $small --gpus 1 2>&1)
out=$(run 1 "$TRAINEXEC" $small --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "default (fp32): trainsim config and trainexec both unfused" \
    '[ $rc -eq 0 ] && [[ "$cfg" == *"attention:             unfused"* && "$out" == *", unfused attention,"* ]]'
cfg=$("$TS" config $small --gpus 1 --bf16 2>&1)
out=$(run 1 "$TRAINEXEC" $small --bf16 --iterations 1 --warmup 0 2>&1); rc=$?
check_sh "--bf16: trainsim config and trainexec both flash" \
    '[ $rc -eq 0 ] && [[ "$cfg" == *"attention:             flash"* && "$out" == *", flash attention,"* ]]'
loss1=$(grep -o "iteration 1/1: loss [0-9.]*" <<<"$out")
out=$(run 1 "$TRAINEXEC" $small --use-flash-attn 2>&1); rc=$?
check_sh "--use-flash-attn in fp32: exit 2, as trainsim (Transformer Engine refuses fp32)" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--attention-backend flash needs --bf16 or --fp16"* ]]'
out=$(run 1 "$TRAINEXEC" $small --bf16 --backend cuda 2>&1); rc=$?
if [[ "$out" == *"built without CUDA"* ]]; then
    check_sh "flash attention on --backend cuda, a build without CUDA: exit 2 naming --backend" \
        '[ $rc -eq 2 ] && [[ "$out" == *"--backend cuda: this trainexec was built without CUDA"* ]]'
elif [[ "$out" == *"no CUDA device"* ]]; then
    check_sh "flash attention on --backend cuda, no GPU: the flag accepted, then no CUDA device, exit 1" \
        '[ $rc -eq 1 ] && [[ "$out" != *"only the unfused"* ]]'
else
    check_sh "flash attention on --backend cuda: runs flash" '[ $rc -eq 0 ] && [[ "$out" == *", flash attention,"* ]]'
fi

# context parallelism: 2 ranks holding half of every sequence give the 1-rank loss (6 digits printed)
out=$(run 2 "$TRAINEXEC" $small --bf16 --context-parallel-size 2 --global-batch-size 1 --iterations 1 --warmup 0 2>&1)
rc=$?
check_sh "cp = 2 (flash): runs on 2 ranks (t x cp x p x d), the 1-rank loss ($loss1)" \
    '[ $rc -eq 0 ] && [[ "$out" == *" cp=2 p=1 d=1"* && "$out" == *"(tp 0 cp 1 pp 0 dp 0)"* && -n "$loss1" && "$out" == *"$loss1"* ]]'
out=$(run 2 "$TRAINEXEC" $small --bf16 --context-parallel-size 2 --global-batch-size 1 --iterations 1 --warmup 0 \
    --backend cuda 2>&1)
rc=$?
if [[ "$out" == *"built without CUDA"* ]]; then
    check_sh "cp = 2 on --backend cuda, a build without CUDA: exit 2 naming --backend" \
        '[ $rc -eq 2 ] && [[ "$out" == *"--backend cuda: this trainexec was built without CUDA"* ]]'
elif [[ "$out" == *"no CUDA device"* ]]; then
    check_sh "cp = 2 on --backend cuda, no GPU: the layout accepted, then no CUDA device, non-zero exit" \
        '[ $rc -ne 0 ] && [[ "$out" != *"context-parallel ring"* ]]'
else
    check_sh "cp = 2 on --backend cuda (ring over MPI, staged through the host): runs on 2 ranks" \
        '[ $rc -eq 0 ] && [[ "$out" == *" cp=2 p=1 d=1"* && "$out" == *"iteration 1/1"* ]]'
fi
out=$(run 2 "$TRAINEXEC" $small --context-parallel-size 2 2>&1); rc=$?
check_sh "cp = 2 with the unfused attention (fp32): exit 2, as trainsim" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--context-parallel-size 2 needs --attention-backend flash"* ]]'
llama1="--swiglu --group-query-attention --num-query-groups 2 --normalization RMSNorm --disable-bias-linear \
        --position-embedding-type rope --bf16 --global-batch-size 1 --iterations 1 --warmup 0"
loss1=$(run 1 "$TRAINEXEC" $small $llama1 2>&1 | grep -o "iteration 1/1: loss [0-9.]*")
out=$(run 2 "$TRAINEXEC" $small $llama1 --context-parallel-size 2 2>&1); rc=$?
check_sh "cp = 2 with Llama layers (rope at each chunk's positions, grouped-query attention): the 1-rank loss ($loss1)" \
    '[ $rc -eq 0 ] && [[ -n "$loss1" && "$out" == *"$loss1"* ]]'

finish
