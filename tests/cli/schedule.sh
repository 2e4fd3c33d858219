#!/usr/bin/env bash
# trainsim schedule: help, timeline (golden), timing numbers, export/import,
# and bad input answered with a message and a non-zero exit (never a crash).
# Ends "N passed, N failed".
set -u
T=${TRAINSIM:-build/trainsim}
G=tests/golden/sched
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_ok "ARGS" "substring of the output": schedule ARGS exits 0 and prints it
expect_ok() { expect_output "$2" $T schedule $1; }
# expect_err "ARGS" EXIT "substring of stderr"
expect_err() { expect_error "$2" "$3" $T schedule $1; }

# --- help lists every flag with unit and default
expect_ok "--help" "--pipeline-model-parallel-size"
expect_ok "--help" "--time-comm"
expect_ok "--help" "ms"
expect_ok "--help" "gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v"
$T --help | grep -qF "schedule" && ok || bad "trainsim --help does not list schedule"

# --- timelines, byte for byte (the Megatron-LM paper's figure 4 setting)
while read -r name args; do
    if $T schedule $args >"$tmp/out.txt" && cmp -s "$tmp/out.txt" "$G/timeline_$name.txt"; then ok
    else bad "timeline for '$args' differs from $G/timeline_$name.txt"; diff "$tmp/out.txt" "$G/timeline_$name.txt" | head -5; fi
done <<'LIST'
interleaved_p4_m8_v2 --schedule interleaved -p 4 -m 8 -v 2
1f1b_p4_m8 --schedule 1f1b -p 4 -m 8
zb-h2_p4_m8 --schedule zb-h2 -p 4 -m 8
zb-v_p4_m8 --schedule zb-v -p 4 -m 8
dualpipev_p4_m8 --schedule dualpipev -p 4 -m 8
dualpipe_p4_m8 --schedule dualpipe -p 4 -m 8
LIST
$T schedule --schedule 1f1b -p 4 -m 8 --no-timeline | grep -q "rank 0 |" && bad "--no-timeline printed a timeline" || ok

# --- scaled timelines: op times with no small common divisor (1 ns here) used
# to exit 2 ("too wide to print"); now a column becomes a round time and the
# timeline fits --timeline-width columns (default 120)
out=$($T schedule -p 4 -m 8 --time-f 1.234567 --time-b 2.345678 --time-w 0.9 2>&1); rc=$?
check_sh "odd op times: exit 0, scale in the header" \
    '[ $rc -eq 0 ] && [[ "$out" == *"one column = 500 µs, scaled to fit 120 columns"* ]]'
# 49.28 ms makespan / 500 µs = 99 columns of 3 characters ("F0 ") after "rank 0 | "
check_sh "odd op times: every rank line within 120 columns" \
    '[ "$(grep "^rank" <<<"$out" | awk "{ if (length(\$0) > m) m = length(\$0) } END { print m }")" -le $((9 + 120 * 3)) ]'
check_sh "odd op times: every op kind and the last micro-batch show" \
    '[[ "$out" == *"F7"* && "$out" == *"B7"* && "$out" == *"bubble rate     0.272727"* ]]'
expect_ok "-p 4 -m 8 --time-f 1.234567 --time-b 2.345678 --time-w 0.9 --timeline-width 40" "one column = 2 ms, scaled to fit 40 columns"
# the exact timeline is kept byte for byte while it fits (33 columns here)
$T schedule -p 4 -m 8 --timeline-width 33 | cmp -s - "$G/timeline_1f1b_p4_m8.txt" && ok || bad "--timeline-width 33 changed the exact 1f1b timeline"
expect_ok "-p 4 -m 8 --timeline-width 32" "one column = 2 time units (T_F = T_B = T_W = 1), scaled to fit 32 columns"
expect_ok "-p 4 -m 8 --timeline-width 32" "rank 3 | .  F0 B0 F1 B1 B2 F3 B3 B4 F5 B5 B6 F7 B7"
expect_ok "--help" "--timeline-width"

# --- timing: closed forms with uniform times
expect_ok "--schedule 1f1b -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "bubble rate     0.272727"
expect_ok "--schedule gpipe -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "longest span    33.000000 ms"
expect_ok "--schedule interleaved -p 4 -m 8 -v 2 --time-f 1 --time-b 1 --time-w 1" "longest span    28.500000 ms"
expect_ok "--schedule zb-h1 -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "longest span    27.000000 ms"
expect_ok "--schedule zb-h2 -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "bubble rate     0.000000"
expect_ok "--schedule zb-v -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "bubble rate     0.000000"
# DualPipeV: bubble (PP/2-1)(F&B+B-3W) with PP = 8 stages and chunk times
# F = B = W = 0.5 ms: 3 x (1.5 + 1 - 1.5) = 3 ms over the ideal 24 ms
expect_ok "--schedule dualpipev -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "longest span    27.000000 ms"
expect_ok "--schedule dualpipev -p 4 -m 8" "peak activations in flight per rank (micro-batch chunks): 9 9 9 9"
expect_ok "--schedule dualpipev -p 2 -m 4 --validate-only --export $tmp/dpv.csv" "valid: dualpipev p=2 m=4 v=2"
cmp -s "$tmp/dpv.csv" "$G/dualpipev_p2_m4.csv" && ok || bad "exported dualpipev CSV differs from $G/dualpipev_p2_m4.csv"
# all-to-all of 1 ms after every F and B of a stage (0.5 ms per chunk op): hidden
# inside dualpipev's F&B pairs, paid in full by zb-v
expect_ok "--schedule dualpipev -p 4 -m 16 --time-f 1 --time-b 1 --time-w 0.5 --time-a2a-f 1 --time-a2a-b 1" "longest span    54.250000 ms"
expect_ok "--schedule zb-v -p 4 -m 16 --time-f 1 --time-b 1 --time-w 0.5 --time-a2a-f 1 --time-a2a-b 1" "longest span    76.500000 ms"
expect_ok "--help" "--time-a2a-f"
# DualPipe (two copies): bubble (PP/2-1)(F&B+B-3W) = 1 x (3 + 2 - 3) = 2 ms at p = 4
expect_ok "--schedule dualpipe -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1" "longest span    26.000000 ms"
expect_ok "--schedule dualpipe -p 4 -m 8" "peak activations in flight per rank (micro-batch chunks): 5 5 5 5"
expect_err "--schedule dualpipe -p 3 -m 8" 2 "DualPipe needs p even, m even and m >= 2p"
expect_err "--schedule dualpipe -p 4 -m 8 --export $tmp/dp.csv" 2 "DualPipe's two model copies do not fit it"
out=$($T simulate --model megatron-7.5b --num-layers 32 -p 4 --schedule dualpipe 2>&1); rc=$?
check_sh "simulate --schedule dualpipe: not modelled, exit 2" '[ $rc -eq 2 ] && [[ "$out" == *"is not modelled by simulate"* ]]'
expect_err "--schedule dualpipev -p 4 -m 6" 2 "DualPipeV needs m >= 2p = 8"
expect_err "--schedule dualpipev -p 4 -m 8 -v 3" 2 "dualpipev: chunks per rank v = 3; it runs exactly 2"
out=$($T simulate --model megatron-7.5b --num-layers 32 -p 4 -t 2 --schedule dualpipev --global-batch-size 128 \
    --micro-batch-size 1 2>&1); rc=$?
check_sh "simulate --schedule dualpipev runs (8 micro-batches, v = 2)" \
    '[ $rc -eq 0 ] && [[ "$out" == *"v=2, micro-batch 1, global batch 128 (8 micro-batches per pipeline), schedule dualpipev"* ]]'
out=$($T simulate --model megatron-7.5b --num-layers 32 -p 4 -t 2 --schedule dualpipev --global-batch-size 64 \
    --micro-batch-size 1 2>&1); rc=$?
check_sh "simulate --schedule dualpipev with m = 4 < 2p: exit 2" '[ $rc -eq 2 ] && [[ "$out" == *"m >= 2p = 8"* ]]'
expect_ok "--schedule gpipe -p 4 -m 8 --time-f 1 --time-b 1 --time-w 1 --time-comm 0.5" "longest span    36.000000 ms"
expect_ok "--schedule 1f1b -p 4 -m 8" "peak activations in flight per rank (micro-batch chunks): 4 3 2 1"
expect_ok "--schedule interleaved -p 4 -m 8" "peak activations in flight per rank (micro-batch chunks): 11 9 7 5"
expect_ok "--schedule 1f1b -p 4 -m 8 --num-layers 30 --decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7" "30 layers"
expect_ok "--schedule interleaved -p 4 -m 6 -v 2" "valid"

# --- export, import, round trip; golden CSV
expect_ok "--schedule zb-v -p 2 -m 4 --validate-only --export $tmp/zbv.csv" "valid: zb-v p=2 m=4 v=2"
cmp -s "$tmp/zbv.csv" "$G/zb-v_p2_m4.csv" && ok || bad "exported zb-v CSV differs from $G/zb-v_p2_m4.csv"
expect_ok "--import $tmp/zbv.csv --export $tmp/zbv2.csv --time-f 2 --time-b 2 --time-w 2" "custom: p=2 m=4 v=2"
cmp -s "$tmp/zbv.csv" "$tmp/zbv2.csv" && ok || bad "CSV -> import -> export is not the identity"
ls -a "$tmp" | grep -q '^\.zbv' && bad "temporary file left behind" || ok

# --- bad input
expect_err "--schedule zb-h3" 2 "zb-h3"
expect_err "-p 0" 2 "-p"
expect_err "--schedule 1f1b -v 2" 2 "v = 2"
expect_err "--schedule interleaved -p 4 -m 2 -v 2" 2 "[p, m] = [4, 2]"
expect_err "--schedule interleaved -p 8 -m 9 -v 3" 2 "cannot run"
expect_err "--num-layers 30" 2 "evenly"
expect_err "--time-f -1" 2 "--time-f"
expect_err "--time-f 0" 2 "at least one op time"
expect_err "--timeline-width 0" 2 "valid: 1 to 100000 columns"
expect_err "--pipline-model-parallel-size 4" 2 "did you mean --pipeline-model-parallel-size"
expect_err "--import $tmp/nope.csv" 1 "nope.csv: cannot open"
printf '0F0,0B0\n1F0,1X0\n' >"$tmp/bad.csv"
expect_err "--import $tmp/bad.csv" 2 "bad.csv:2:2: '1X0': unknown action kind"
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n' >"$tmp/dl.csv"
expect_err "--import $tmp/dl.csv" 2 "dl.csv:1:4: rank 0, action 3 (0SEND_F1): deadlock"
expect_err "--import $tmp/zbv.csv -p 2" 2 "does not go with --import"
expect_err "--export /nonexistent-dir/x.csv" 1 "nonexistent-dir"

# --- numbers that stay in range
# p x m inside the flags' ranges but past --max-memory: refused at once with the estimate
expect_err "-p 1024 -m 65536" 2 "-p 1024 -m 65536 -v 1: the schedule has about 470 million actions and would need about 21.0 GiB, over --max-memory 4 GiB"
expect_err "-p 64 -m 4096 --schedule zb-v --max-memory 0.1" 2 "over --max-memory 0.1 GiB"
expect_ok "--help" "--max-memory"
# schedule-CSV numbers of 2^31 and above are refused with the row and column, never wrapped
printf '0F0,0F2147483648\n' >"$tmp/big.csv"
out=$(timeout 60 $T schedule --import "$tmp/big.csv" 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -qF "big.csv:1:2: '0F2147483648': micro-batch number too large; valid micro-batches are 0 to 2147483646" <<<"$out"
then ok; else bad "import of micro-batch 2^31: exit $rc, $out"; fi
printf '0F0\n2147483648F0\n' >"$tmp/bigst.csv"
out=$(timeout 60 $T schedule --import "$tmp/bigst.csv" 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -qF "bigst.csv:2:1: '2147483648F0': stage number too large" <<<"$out"
then ok; else bad "import of stage 2^31: exit $rc, $out"; fi

finish
