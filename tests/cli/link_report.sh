#!/usr/bin/env bash
# trainsim simulate --link-report: the per-link CSV against the closed form
# of a ring all-reduce, the ten hottest links printed, the same figures in
# --full, and misuse refused before the simulation.
set -u
TRAINSIM=${TRAINSIM:-build/trainsim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# Data parallelism only (t 1, p 1, d 8) on one DGX A100 (no NVLink SHARP):
# the one communication is the gradient all-reduce over the 8 GPUs, a ring
# through the NVSwitch. Each of the 2 phases (reduce-scatter, all-gather)
# moves (n-1)/n S over every GPU's uplink and downlink at the link's
# bandwidth B, so per link: bytes = 2 (n-1)/n S, busy = 2 ceil((n-1)/n S / B)
# ns, peak utilisation 1; no other link carries anything.
DP8=(--model gpt3-175b --num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
     --micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 1
     --pipeline-model-parallel-size 1 --gpus 8 --gpu A100-SXM4-80GB)

"$TRAINSIM" simulate "${DP8[@]}" --network-flows --link-report "$tmp/sym.csv" >"$tmp/sym.txt" 2>"$tmp/sym.err"
check "--network-flows --link-report exits 0" test $? -eq 0
"$TRAINSIM" simulate "${DP8[@]}" --full --link-report "$tmp/full.csv" >"$tmp/full.txt" 2>&1
check "--full --link-report exits 0" test $? -eq 0
# S: the gradient buffer (fp32 with bf16) the all-reduce carries, from the CSV report
S=$("$TRAINSIM" simulate "${DP8[@]}" --csv - 2>/dev/null | awk -F, '$1 == "rank 0" && $2 == "memory_at_peak_gradients" { print $3 }')
check "gradient bytes read from --csv" test -n "$S" -a "${S:-0}" -gt 0

check "header" test "$(head -1 "$tmp/sym.csv")" = "link,bw_gbps,bytes,busy_ns,peak_utilisation"
n_links=$(tail -n +2 "$tmp/sym.csv" | wc -l)
# 48 rows inside the node and its cables (GPU-NVSwitch, GPU-NIC, NIC-leaf, each
# direction), the rest between the switches of the fabric as designed
n_node=$(tail -n +2 "$tmp/sym.csv" | cut -d, -f1 | grep -vc '^sw[0-9.]*-sw')
check "one row per directed link (48 in the DGX A100 node and its NIC cables)" test "$n_node" -eq 48
check "the switch-to-switch links of the fabric come in both directions" test $(((n_links - n_node) % 2)) -eq 0 -a "$n_links" -gt 48
# every GPU <-> NVSwitch link, both directions: the closed form
bad_rows=$(awk -F, -v S="$S" 'NR > 1 && $1 ~ /^(gpu0\.[0-7]-nvs0|nvs0-gpu0\.[0-7])$/ {
        n++; x = 7 / 8 * S; b = 2 * x; t = 2 * int(x / $2 + 0.999999); # ceil for a non-integral x/B
        if ($3 != b || $4 != t || $5 != 1) { print $0 " (want bytes " b ", busy " t ", peak 1)"; bad++ } }
    END { if (n != 16) print "found " n " GPU-NVSwitch rows, want 16" }' "$tmp/sym.csv")
check_sh "GPU-NVSwitch links: bytes 2 (n-1)/n S, busy 2 ceil((n-1)/n S / B), peak 1" '[ -z "$bad_rows" ]' \
    || echo "$bad_rows" | head -5
check "the other 64 links carry nothing" test "$(awk -F, 'NR > 1 && $3 != 0' "$tmp/sym.csv" | wc -l)" -eq 16
# conservation: what the GPUs send into the switch is what it sends out
check_sh "bytes into the NVSwitch = bytes out of it" \
    '[ "$(awk -F, '"'"'$1 ~ /-nvs0$/ { s += $3 } END { print s }'"'"' "$tmp/sym.csv")" = "$(awk -F, '"'"'$1 ~ /^nvs0-/ { s += $3 } END { print s }'"'"' "$tmp/sym.csv")" ]'
check "--full gives the same link report" cmp -s "$tmp/sym.csv" "$tmp/full.csv"

check "ten hottest printed" test "$(sed -n '/^hottest links (16 of [0-9]* links carried traffic/,$p' "$tmp/sym.txt" | grep -c '^  gpu0\.\|^  nvs0-')" -eq 10
check "the hottest is the lowest id of the saturated links" grep -q '^  gpu0.0-nvs0  *1.0000 ' "$tmp/sym.txt"

# a larger case: t 8, p 2, d 2 on 32 H100s, the report stays deterministic
SMALL=(--model gpt3-175b --num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
       --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 8
       --pipeline-model-parallel-size 2 --gpus 32 --gpu H100-SXM5-80GB --schedule 1f1b)
"$TRAINSIM" simulate "${SMALL[@]}" --full --link-report "$tmp/a.csv" >"$tmp/a.txt" 2>&1
"$TRAINSIM" simulate "${SMALL[@]}" --full --link-report "$tmp/b.csv" >/dev/null 2>&1
check "reruns give byte-identical link reports" cmp -s "$tmp/a.csv" "$tmp/b.csv"
check_sh "peak utilisation within [0, 1]" \
    '[ -z "$(awk -F, '"'"'NR > 1 && ($5 < 0 || $5 > 1 + 1e-9)'"'"' "$tmp/a.csv")" ]'
check_sh "links between servers carried traffic (pipeline sends)" \
    '[ -n "$(awk -F, '"'"'NR > 1 && $1 ~ /^nic/ && $3 > 0'"'"' "$tmp/a.csv")" ]'

expect_error 2 "--link-report needs --network-flows or --full" \
    "$TRAINSIM" simulate "${DP8[@]}" --link-report "$tmp/x.csv"
expect_error 1 "--link-report" "$TRAINSIM" simulate "${DP8[@]}" --network-flows --link-report "$tmp/nodir/x.csv"
check "no file left by the refused runs" test ! -e "$tmp/x.csv"

finish
