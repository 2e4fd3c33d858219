#!/usr/bin/env bash
# trainsim simulate: golden summaries (text + CSV) for a few configurations,
# byte-identical reruns, a loadable trace, help and error handling.
# Goldens live in tests/golden/sim/; regenerate them only deliberately (after
# a change of the cost model or the engine that you have checked):
#   UPDATE_GOLDEN=1 TRAINSIM=build/trainsim bash tests/cli/simulate.sh
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
G=tests/golden/sim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# name, then the flags
golden() {
    local name=$1; shift
    if ! "$TRAINSIM" simulate "$@" --csv "$tmp/$name.csv" >"$tmp/$name.txt" 2>"$tmp/$name.err"; then
        bad "$name: exit status $? ($(head -c 300 "$tmp/$name.err"))"; return
    fi
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
        if mkdir -p "$G" && cp "$tmp/$name.txt" "$G/$name.txt" && cp "$tmp/$name.csv" "$G/$name.csv"; then
            ok "$name: golden regenerated"
        else bad "$name: cannot write $G"; fi
        return
    fi
    for ext in txt csv; do
        if cmp -s "$tmp/$name.$ext" "$G/$name.$ext"; then ok "$name.$ext matches the golden"
        else bad "$name.$ext differs from $G/$name.$ext:"; diff "$G/$name.$ext" "$tmp/$name.$ext" | head -n 20; fi
    done
}

golden default
golden megatron-1.7b --model megatron-1.7b
golden small-zb-h1 --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 \
    --gpus 16 -t 2 -p 4 --micro-batch-size 1 --global-batch-size 32 --schedule zb-h1 \
    --recompute-granularity none --sequence-parallel=false --bf16 --padded-vocab-size 51200
golden small-1f1b-distopt --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 \
    --gpus 32 -t 2 -p 4 --micro-batch-size 2 --global-batch-size 64 --schedule 1f1b \
    --recompute-granularity full --use-distributed-optimizer --overlap-grad-reduce --train-tokens 1e9 --bf16 --padded-vocab-size 51200 --sequence-parallel
# a mixture of experts: Mixtral 8x7B's preset (EP 8 inside a node, alltoall dispatcher, Zipf skew 0.3)
golden mixtral-8x7b --model mixtral-8x7b --gpu H100-SXM5-80GB

# the same run twice gives the same bytes
"$TRAINSIM" simulate --model megatron-1.7b --csv "$tmp/a.csv" >"$tmp/a.txt" 2>/dev/null
"$TRAINSIM" simulate --model megatron-1.7b --csv "$tmp/b.csv" >"$tmp/b.txt" 2>/dev/null
if cmp -s "$tmp/a.csv" "$tmp/b.csv" && cmp -s "$tmp/a.txt" "$tmp/b.txt"; then ok "two runs are byte-identical"
else bad "two runs differ"; fi

# no command runs simulate on the built-in default
if "$TRAINSIM" >"$tmp/nocmd.txt" 2>&1 && cmp -s "$tmp/nocmd.txt" "$tmp/default.txt"; then ok "no command = simulate default"
else bad "trainsim with no command differs from 'trainsim simulate'"; fi

# the trace: valid JSON with metadata, complete events and the memory counter
trace_flags=(--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --gpus 8 -t 2 -p 4
             --micro-batch-size 1 --global-batch-size 8 --schedule 1f1b)
if "$TRAINSIM" simulate "${trace_flags[@]}" --trace "$tmp/t.json" >/dev/null 2>"$tmp/t.err"; then
    if head -c 40 "$tmp/t.json" | grep -q '"traceEvents"\|displayTimeUnit' &&
       grep -q '"ph": "X"' "$tmp/t.json" && grep -q '"ph": "C"' "$tmp/t.json" &&
       grep -q '"thread_name"' "$tmp/t.json"; then ok "trace has M, X and C events"
    else bad "trace lacks M/X/C events"; fi
    if command -v python3 >/dev/null; then
        if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d["traceEvents"], list) and d["traceEvents"]' "$tmp/t.json"; then
            ok "trace is valid JSON"
        else bad "trace is not valid JSON"; fi
    fi
else bad "trace run failed: $(cat "$tmp/t.err")"; fi

# help lists every flag with its unit and default
"$TRAINSIM" simulate --help >"$tmp/help.txt" 2>&1
miss=""
for f in --train-tokens --csv --trace --calibration --num-layers --tensor-model-parallel-size --schedule --gpus; do
    grep -q -- "$f" "$tmp/help.txt" || miss="$miss $f"
done
if [ -z "$miss" ] && grep -q "unit:" "$tmp/help.txt" && grep -q "default:" "$tmp/help.txt"; then ok "--help lists flags with units and defaults"
else bad "--help misses:$miss"; fi

# A run that does not fit: GPT-3 175B's default layout on 40 GB A100s holds
# 38.9 GiB of tensors, over 40 GiB with the CUDA context, NCCL buffers,
# cuBLAS workspace and fragmentation. It says so on its first line, prints
# the whole report and exits 3.
"$TRAINSIM" simulate --model gpt3-175b --gpu A100-SXM4-40GB >"$tmp/nofit.txt" 2>"$tmp/nofit.err"; rc=$?
check "does not fit: exit 3" test $rc -eq 3
check_sh "does not fit: first line says so with the numbers" \
    'head -n 1 "$tmp/nofit.txt" | grep -qE "^DOES NOT FIT: rank 0 needs [0-9.]+ GiB of 40.00 GiB \(activations.*try --recompute-granularity full"'
check "does not fit: the report follows" grep -q '^iteration time' "$tmp/nofit.txt"
check "does not fit: the per-rank table says NO" grep -qE '^ +0 .* NO$' "$tmp/nofit.txt"
for cat in cuda-context nccl-buffers cublas-workspace allocator-fragmentation; do
    check "breakdown has a $cat line naming its flag" grep -qE "^  $cat +[0-9.]+ GiB .*--" "$tmp/nofit.txt"
done
"$TRAINSIM" simulate --model gpt3-175b --gpu A100-SXM4-40GB --csv - >"$tmp/nofit.csv" 2>"$tmp/nofit.err"; rc=$?
check_sh "does not fit, --csv -: exit 3, CSV on stdout, the line on stderr" \
    '[ $rc -eq 3 ] && head -n 1 "$tmp/nofit.csv" | grep -q "^scope,metric" && grep -q "^iteration,fits,0," "$tmp/nofit.csv" && grep -q "^DOES NOT FIT" "$tmp/nofit.err"'
# every overhead turned off by its flag: the tensors alone fit, as before (flash attention, the
# default for bf16 on A100: the recomputed attention core re-creates no s x s scores)
"$TRAINSIM" simulate --model gpt3-175b --gpu A100-SXM4-40GB --cuda-context-gib 0 --nccl-buffer-mib 0 --cublas-workspace-mib 0 \
    --allocator-fragmentation 0 >"$tmp/off.txt" 2>&1; rc=$?
check_sh "overheads off: exit 0, 38.68 GiB fits" \
    '[ $rc -eq 0 ] && grep -q "^memory peak             38.68 GiB of 40.00 GiB on rank 0 (fits)" "$tmp/off.txt" && ! grep -q "DOES NOT FIT" "$tmp/off.txt"'
# Llama-3-8B at seq 8192, no recomputation, its preset layout (t 2, SP): flash attention (the default
# for bf16) keeps 32 x 576.5 MiB = 18.02 GiB in the layers (test_layer.c derives it) + 2.03 GiB of
# logits and embedding; unfused attention adds 5 GiB a layer of s x s scores
"$TRAINSIM" simulate --model llama3-8b --recompute-granularity none >"$tmp/l8f.txt" 2>&1
"$TRAINSIM" simulate --model llama3-8b --recompute-granularity none --attention-backend unfused >"$tmp/l8u.txt" 2>&1
check_sh "llama3-8b seq 8192 no recompute: 20.05 GiB of activations with flash" \
    'grep -q "^  activations               20.05 GiB" "$tmp/l8f.txt"'
check_sh "llama3-8b seq 8192 no recompute: 180.04 GiB of activations unfused" \
    'grep -q "^  activations              180.04 GiB" "$tmp/l8u.txt"'
mfus=$(grep "^MFU conventions" "$tmp/l8f.txt" | grep -oE "[0-9.]+%" | tr -d % | tr '\n' ' ')
check_sh "flash: MFU in both conventions, the causal one lower ($mfus)" \
    'awk -v a="${mfus%% *}" -v b="$(cut -d" " -f2 <<<"$mfus")" "BEGIN { exit !(b > 0 && a > b) }"'
# the flags change the line they name: 8 channels halve the NCCL buffers
"$TRAINSIM" simulate --model megatron-1.7b --nccl-channels 8 >"$tmp/ch8.txt" 2>&1
check "--nccl-channels 8 shows in the breakdown" grep -qE '^  nccl-buffers .* x 8 channels x 2 peers' "$tmp/ch8.txt"
for f in --cuda-context-gib --nccl-buffer-mib --nccl-channels --cublas-workspace-mib --allocator-fragmentation; do
    check "--help documents $f" grep -q -- "$f" "$tmp/help.txt"
done
"$TRAINSIM" simulate --allocator-fragmentation -1 >/dev/null 2>"$tmp/e4"; rc=$?
check_sh "negative --allocator-fragmentation: exit 2 naming it" '[ $rc -eq 2 ] && grep -q -- "--allocator-fragmentation" "$tmp/e4"'

# errors: a bad flag, an impossible layout, an unwritable output
"$TRAINSIM" simulate --num-layerz 8 >/dev/null 2>"$tmp/e1"; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--num-layerz" "$tmp/e1"; then ok "unknown flag: exit 2 naming it"
else bad "unknown flag: exit $rc, message: $(cat "$tmp/e1")"; fi
"$TRAINSIM" simulate --gpus 1000 >/dev/null 2>"$tmp/e2"; rc=$?
if [ $rc -eq 2 ] && [ -s "$tmp/e2" ]; then ok "impossible layout: exit 2 with a message"
else bad "impossible layout: exit $rc"; fi
"$TRAINSIM" simulate --model megatron-1.7b --csv "$tmp/no/such/dir/x.csv" >/dev/null 2>"$tmp/e3"; rc=$?
if [ $rc -ne 0 ] && grep -q "no/such/dir" "$tmp/e3" && [ ! -e "$tmp/no/such/dir/x.csv" ]; then ok "unwritable --csv: error naming the path"
else bad "unwritable --csv: exit $rc, $(cat "$tmp/e3")"; fi

# --csv and --trace are checked before the simulation: nothing on stdout
"$TRAINSIM" simulate --model megatron-1.7b --trace "$tmp/no/such/dir/t.json" >"$tmp/o4" 2>"$tmp/e4"; rc=$?
check_sh "unwritable --trace: exit 1 naming the flag, before the report" \
    '[ $rc -eq 1 ] && grep -q -- "--trace $tmp/no/such/dir/t.json" "$tmp/e4" && ! [ -s "$tmp/o4" ]'

# SIGINT and SIGTERM while a large trace (about 80 MB, seconds) is written:
# the process dies of the signal and leaves no temporary beside the output.
# A background job of a script starts with SIGINT ignored (and the script
# itself may have started so): env --default-signal gives the command the
# default dispositions, as a foreground command at a terminal has them.
mkdir "$tmp/sig"
for i in 1 2 3 4 5 6 7 8 9 10; do
    if [ $((i % 2)) -eq 1 ]; then sig=INT; num=2; else sig=TERM; num=15; fi
    env --default-signal=INT,TERM "$TRAINSIM" simulate --full --trace "$tmp/sig/big.json" >/dev/null 2>"$tmp/sig.err" &
    pid=$!
    # wait for the "writing the trace" note: the temporary exists from then on
    for _ in $(seq 200); do grep -q "writing the trace" "$tmp/sig.err" && break; sleep 0.05; done
    sleep "0.0$((i * 3 % 5))" # 0 to 40 ms into the write, which takes a few hundred ms
    kill -s $sig $pid
    wait $pid; rc=$?
    left=$(find "$tmp/sig" -name '.*' -type f | wc -l)
    if [ $rc -eq $((128 + num)) ] && [ "$left" -eq 0 ]; then ok "SIG$sig #$i while writing the trace: status $rc, no temporary left"
    else bad "SIG$sig #$i while writing the trace: status $rc (want $((128 + num))), $left temporaries left: $(ls -a "$tmp/sig")"; fi
    rm -f "$tmp/sig/big.json"
done

# a temporary left by a dead writer (PID in its name, older than this run)
# is removed by the next run writing that output; a live one is kept
dead=$( (sh -c 'echo $$') ); live=$$
: >"$tmp/sig/.r.csv.$dead.abcdef"; touch -d '1 hour ago' "$tmp/sig/.r.csv.$dead.abcdef"
: >"$tmp/sig/.r.csv.$live.ghijkl"; touch -d '1 hour ago' "$tmp/sig/.r.csv.$live.ghijkl"
"$TRAINSIM" simulate --model megatron-1.7b --csv "$tmp/sig/r.csv" >/dev/null 2>&1
check_sh "a dead writer's temporary is cleaned, a live one's kept" \
    '[ -s "$tmp/sig/r.csv" ] && ! [ -e "$tmp/sig/.r.csv.$dead.abcdef" ] && [ -e "$tmp/sig/.r.csv.$live.ghijkl" ]'

# the data loader's step (sim/model/dataload.h): on the first and the last stage, 8
# micro-batches each; a measured figure replaces it, no mask in the batch shrinks it
dl=(--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --gpus 8 -t 2 -p 4
    --micro-batch-size 1 --global-batch-size 8)
"$TRAINSIM" simulate "${dl[@]}" --csv "$tmp/dl.csv" >"$tmp/dl.txt" 2>/dev/null
check_sh "data loader: 3 tensors + the 1 MiB mask copied (28672 + 1048576 bytes), tokens, mask, position ids broadcast (8192 + 1048576 + 8192)" \
    'grep -q "^iteration,data_loader_first_h2d_bytes,1077248,bytes" "$tmp/dl.csv" &&
     grep -q "^iteration,data_loader_first_broadcast_bytes,1064960,bytes" "$tmp/dl.csv" &&
     grep -q "^data loader .* on the last (first stage: 1.077 MB to the GPU in 5 copies, 1.065 MB in 3 TP broadcasts)" "$tmp/dl.txt"'
"$TRAINSIM" simulate "${dl[@]}" --data-loader-ns 1000000 --csv "$tmp/dlm.csv" >"$tmp/dlm.txt" 2>/dev/null
check_sh "--data-loader-ns 1e6: 1 ms per micro-batch, 8 ms on a loading rank, said measured" \
    'grep -q "^data loader  *1.000 ms per micro-batch on the first stage, 1.000 ms on the last (--data-loader-ns, measured); 8.000 ms per iteration" "$tmp/dlm.txt" &&
     grep -q "^iteration,data_loader_rank_max,8000000,ns" "$tmp/dlm.csv" && grep -q "^iteration,time_data,4000000,ns" "$tmp/dlm.csv"'
"$TRAINSIM" simulate "${dl[@]}" --no-create-attention-mask-in-dataloader --csv "$tmp/dln.csv" >"$tmp/dln.txt" 2>/dev/null
check_sh "--no-create-attention-mask-in-dataloader: no mask copied or named" \
    'grep -q "^iteration,data_loader_first_h2d_bytes,28672,bytes" "$tmp/dln.csv" && ! grep -q "attention mask" "$tmp/dln.txt"'
out=$("$TRAINSIM" simulate "${dl[@]}" --data-loader-ns -5 2>&1); rc=$?
check_sh "--data-loader-ns -5: exit 2 naming the flag" '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q -- "--data-loader-ns"'

finish
