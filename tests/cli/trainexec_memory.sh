#!/usr/bin/env bash
# trainexec's measured memory per rank against `trainsim simulate` for the
# same flags: weights, gradients, optimizer state and activations at the
# peak (trainexec --report-csv, trainsim --csv's memory_at_peak_*), for no,
# selective and full recomputation, unfused and flash attention, the
# distributed optimizer, a pipeline (1F1B and the zero-bubble ZB-H1 and ZB-V,
# whose split backward keeps each linear layer's input and output gradient
# from I to W), the query / key norms (--qk-layernorm: their input saved,
# also under selective recomputation) and context parallelism. One iteration
# of a 4-layer GPT (h 64, 4 heads, s 64, V 256, b 2, no dropout: the
# executor has none, so the simulator is told --attention-dropout 0
# --hidden-dropout 0). Ends with "N passed, N failed". Needs mpirun.
#
# The executor computes in fp32. The simulator is told so (--fp32) where it
# can be: the unfused attention. Flash attention needs --bf16 in the
# simulator (Transformer Engine refuses fp32), so the executor's flash
# activations are compared with C - 2 (B - A): C the simulator's fp32 unfused
# run, B and A its bf16 unfused and flash runs; B - A is what flash saves in
# bf16 (the s x s scores, 2 bytes, less the fp32 log-sum-exp), doubled to
# fp32 (which counts the log-sum-exp twice: L x b a s x 4 bytes, < 0.4% of
# the total here). Under context parallelism the simulator has no fp32 or
# unfused run at all: its bf16 weights (2 bytes), gradients (4: Megatron's
# fp32 main grads) and optimizer (12: fp32 master weights and Adam moments)
# are converted to the executor's 4, 4 and 8 bytes, and the activations
# compared through the simulator's ratio of cp = 2 to cp = 1 applied to the
# executor's cp = 1 flash run.
#
# Weights, gradients and optimizer must match exactly. Activations within 1%
# (ACT_TOL): the executor keeps what the simulator does not count, the
# LayerNorm mean and 1/std (2 floats per row per norm) and the per-token
# losses, 19 floats per row here against >= 16 h = 1024 of a layer (0.3% of
# the total measured). Named allowances on top, where the two differ by
# design:
# - full recomputation (uniform): 2 N h floats (N rows): the executor keeps
#   the final norm's input (the last layer's output) to the micro-batch's
#   end where the simulator frees it after the output layer's backward, and
#   its group workspace has room for the group's recomputed output, which
#   Megatron's checkpoint re-creates too but the simulator's saved-tensor
#   list does not hold (it is the next layer's input);
# - context parallelism: the ring's buffers, 4 kv (kv = K and V of the
#   rank's block, 2 N h floats), live during an attention backward. The
#   backward frees the output layer's tensors before the last layer's ring
#   buffers are allocated: in the simulator (bf16) the buffers (4 kv x 2
#   bytes) are smaller than what that frees (the fp32 logits alone are
#   N V x 4), so its peak is the forward's end; in the executor (fp32) they
#   are larger (4 kv x 4 bytes) than what its head frees by then (the
#   probabilities and losses, the final norm's input, output and mean and
#   1/std: (N V + N + 2 N h + 2 N) x 4 bytes), so its peak is in the last
#   layer's attention backward, that difference above its forward's end.
#   The allowance is that difference, exactly.
# - --qk-layernorm: the q/k norms' mean and 1/std, per query and key head
#   (2 a here) and row, L N 2 (2 a) floats on one rank (LayerNorm; the
#   simulator counts the norms' input only, docs/cost-model.md "QK
#   layernorm"); 1% of the total here, so named. RMSNorm keeps half (1/rms
#   only), within ACT_TOL on the pipeline's ranks. Tensor parallelism is not
#   compared: the executor's embedding and output layer are not
#   vocabulary-parallel (gpt.h), the simulator's are.
# - a MoE layer recomputed (--recompute-modules moe, --moe-layer-recompute):
#   the peak is in the last layer's backward, its MoE forward rerun. There
#   the executor's MoE state (exec/core/moe.c's moe_saved) holds, beyond
#   what the simulator counts, three [N k, h] fp32 row buffers (the
#   all-to-all's send and receive staging, which it keeps for the
#   backward's exchanges, and the returned expert outputs) and its routing
#   tensors (logits N E floats; kept weights, experts, keep flags, send
#   order and places in it N k x 5 4-byte words; the received rows' expert
#   order N k ints on one rank): MOE_X, exactly, measured here with
#   k = 2 and unchanged by the expert ffn size. With the attention core
#   recomputed too, the simulator counts that layer's recomputed scores
#   (b a s^2 floats) as activations where the executor holds them in its
#   stage-wide buffer (gpt_stage's s_att, "buffers"): the allowance is
#   that much less. (Without recomputation the executor keeps the whole
#   MoE state per layer and micro-batch, staging buffers included: 20%
#   above the simulator here, not compared.)
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -x "${TRAINEXEC:-}" ] || ! command -v mpirun >/dev/null; then
    echo "trainexec not built (no MPI): skipped"; finish
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ACT_TOL=0.01
L=4 H=64 A=4 S=64 V=256 B=2
M="--num-layers $L --hidden-size $H --num-attention-heads $A --seq-length $S --padded-vocab-size $V \
   --micro-batch-size $B --attention-dropout 0 --hidden-dropout 0"

# exec NP FLAGS...: one line per rank "weights gradients optimizer activations"
exec_mem() {
    local np=$1; shift
    timeout 300 mpirun --oversubscribe -np "$np" "$TRAINEXEC" $M "$@" --iterations 1 --warmup 0 --threads 1 \
        --report-csv "$tmp/r.csv" </dev/null >"$tmp/x.out" 2>&1 || { echo "trainexec failed: $(tail -3 "$tmp/x.out")" >&2; return 1; }
    awk -F, 'NR > 1 { print $1, $10, $11, $12, $13 }' "$tmp/r.csv"
}
# sim NP FLAGS...: "rank weights gradients optimizer activations" for the ranks the simulator reports
sim_mem() {
    local np=$1 rc; shift
    "$TRAINSIM" simulate $M --gpus "$np" "$@" --csv "$tmp/s.csv" >/dev/null 2>"$tmp/s.err"; rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 3 ] || { echo "trainsim failed: $(cat "$tmp/s.err")" >&2; return 1; }
    awk -F, '$1 ~ /^rank / && $2 ~ /^memory_at_peak_(weights|gradients|optimizer|activations)$/ {
            r = substr($1, 6) + 0; v[r, substr($2, 16)] = $3; if (!(r in seen)) { seen[r] = 1; order[n++] = r } }
        END { for (i = 0; i < n; i++) { r = order[i]
            print r, v[r, "weights"], v[r, "gradients"], v[r, "optimizer"], v[r, "activations"] } }' "$tmp/s.csv"
}

# compare NAME EXEC SIM ALLOW_BYTES [SCALE_W SCALE_G SCALE_O]: per rank the simulator reports, exact
# weights / gradients / optimizer (times the scales), activations within ACT_TOL of the simulator's
# once an excess of up to ALLOW_BYTES is taken off
compare() {
    local name=$1 ex=$2 sm=$3 allow=$4 sw=${5:-1} sg=${6:-1} so=${7:-1} res
    res=$(awk -v ex="$ex" -v tol="$ACT_TOL" -v allow="$allow" -v sw="$sw" -v sg="$sg" -v so="$so" '
        BEGIN { n = split(ex, e, "\n"); for (i = 1; i <= n; i++) { split(e[i], f, " "); x[f[1]] = e[i] } }
        { r = $1; if (!(r in x)) { print "rank " r ": no executor row"; bad = 1; next }
          split(x[r], f, " ")
          w = int($2 * sw + 0.5); g = int($3 * sg + 0.5); o = int($4 * so + 0.5)
          if (f[2] != w || f[3] != g || f[4] != o) {
              printf "rank %d: weights/gradients/optimizer %s %s %s, simulator %s %s %s\n", r, f[2], f[3], f[4],
                     w, g, o; bad = 1 }
          x5 = f[5] - $5 # the excess over the simulator: within [0, allow] counts as none
          d = (x5 > allow ? x5 - allow : x5 < 0 ? x5 : 0) / $5
          printf "rank %d activations %d, simulator %d (+ up to %d): %+.2f%% (excess %d)\n", r, f[5], $5, allow,
                 100 * d, x5
          if (d > tol || d < -tol) bad = 1; k++ }
        END { if (!k) { print "no rank compared"; bad = 1 } exit bad }' <<<"$sm")
    local rc=$?
    [ $rc -eq 0 ] && ok "$name: $(tr '\n' ';' <<<"$res")" || bad "$name: $res"
}

N=$((B * S)) # rows of a micro-batch on one rank
FULL="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
BLOCK="--recompute-granularity full --recompute-method block --recompute-num-layers 2"
SEL="--recompute-granularity selective"
QKS=$((L * N * 2 * 2 * A * 4)) # the q/k norms' mean and 1/std (LayerNorm), fp32
# MoE layers (every layer: E experts, top-k, ffn FE; no biases: the executor's experts have none)
E=4 K=2 FE=128
MOE="--num-experts $E --moe-router-topk $K --moe-ffn-hidden-size $FE --disable-bias-linear"
MOE_X=$((3 * N * K * H * 4 + N * E * 4 + N * K * 24)) # see the header

# unfused attention: the simulator in fp32, directly
while IFS='|' read -r name np flags allow; do
    ex=$(exec_mem "$np" $flags) && sm=$(sim_mem "$np" $flags --fp32 --attention-backend unfused) &&
        compare "unfused, $name" "$ex" "$sm" "$allow" || bad "unfused, $name: a run failed"
done <<EOF
no recomputation|1|--global-batch-size 2|0
selective recomputation|1|--global-batch-size 2 $SEL|0
full recomputation, uniform 1|1|--global-batch-size 2 $FULL|$((2 * N * H * 4))
full recomputation, block 2|1|--global-batch-size 2 $BLOCK|0
distributed optimizer, d = 2|2|--global-batch-size 4 --use-distributed-optimizer|0
1F1B, p = 2, m = 4|2|--global-batch-size 8 -p 2|0
ZB-H1, p = 2, m = 4|2|--global-batch-size 8 -p 2 --schedule zb-h1|0
ZB-V, p = 2, m = 4|2|--global-batch-size 8 -p 2 --schedule zb-v|0
q/k norms|1|--global-batch-size 2 --qk-layernorm|$QKS
q/k norms, selective recomputation|1|--global-batch-size 2 --qk-layernorm $SEL|$QKS
q/k norms, RMSNorm, ZB-H1, p = 2, m = 4|2|--global-batch-size 8 --qk-layernorm --normalization RMSNorm -p 2 --schedule zb-h1|0
MoE layers recomputed (--recompute-modules moe)|1|--global-batch-size 2 $MOE --recompute-granularity selective --recompute-modules moe|$MOE_X
MoE layers and attention core recomputed (--moe-layer-recompute)|1|--global-batch-size 2 $MOE --moe-layer-recompute|$((MOE_X - B * A * S * S * 4))
EOF

# flash attention: the simulator's fp32 unfused run less twice what flash saves in bf16
flash_none=
while IFS='|' read -r name np flags allow; do
    if ex=$(exec_mem "$np" $flags --bf16) && c=$(sim_mem "$np" $flags --fp32 --attention-backend unfused) &&
        b=$(sim_mem "$np" $flags --bf16 --attention-backend unfused) && a=$(sim_mem "$np" $flags --bf16); then
        [ "$name" = "no recomputation" ] && flash_none=$ex
        sm=$(paste -d' ' <(echo "$c") <(echo "$b") <(echo "$a") |
            awk '{ print $1, $2, $3, $4, $5 - 2 * ($10 - $15) }')
        compare "flash, $name" "$ex" "$sm" "$allow"
    else
        bad "flash, $name: a run failed"
    fi
done <<EOF
no recomputation|1|--global-batch-size 2|0
selective recomputation|1|--global-batch-size 2 $SEL|0
full recomputation, uniform 1|1|--global-batch-size 2 $FULL|$((2 * N * H * 4))
q/k norms|1|--global-batch-size 2 --qk-layernorm|$QKS
EOF

# the executor's flash attention keeps fewer activations than its unfused one, by L b a (s^2 - s) floats
ex_u=$(exec_mem 1 --global-batch-size 2 | awk '{ print $5 }')
ex_f=$(awk '{ print $5 }' <<<"$flash_none")
check_sh "flash saves L b a (s^2 - s) x 4 bytes of activations (unfused $ex_u, flash $ex_f)" \
    '[ -n "$ex_f" ] && [ $((ex_u - ex_f)) -eq $((L * B * A * (S * S - S) * 4)) ]'

# context parallelism (flash, bf16 in the simulator): dtype-converted weights / gradients / optimizer
# (x 2, x 1, x 2/3), activations through the simulator's cp 2 / cp 1 ratio
NC=$((B * S / 2))                                        # rows of a rank's block at cp = 2
KV=$((2 * NC * H))                                       # K and V of a rank's block, elements
CP_ALLOW=$((4 * KV * 4 - (NC * V + NC + 2 * NC * H + 2 * NC) * 4)) # the ring's fp32 buffers less the head's frees
a1=$(sim_mem 1 --global-batch-size 2 --bf16 | awk '{ print $5 }')
for dopt in "" "--use-distributed-optimizer"; do
    if ex=$(exec_mem 2 --global-batch-size 2 --bf16 --context-parallel-size 2 $dopt) &&
        a2=$(sim_mem 2 --global-batch-size 2 --bf16 --context-parallel-size 2 $dopt) && [ -n "$flash_none" ]; then
        fa=$(awk '{ print $5 }' <<<"$flash_none")
        sm=$(awk -v fa="$fa" -v a1="$a1" '{ printf "%s %s %s %s %.0f\n", $1, $2, $3, $4, fa * $5 / a1 }' <<<"$a2")
        compare "context parallelism, cp = 2${dopt:+, distributed optimizer (over d x cp)}" "$ex" "$sm" \
            "$CP_ALLOW" 2 1 0.6666666666666666
    else
        bad "context parallelism $dopt: a run failed"
    fi
done
finish
