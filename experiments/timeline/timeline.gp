# Per-rank Gantt chart of one iteration (gantt.csv from run.sh). Each rank has
# a compute row (forward / backward / recompute / optimizer) and, below it, a
# thin row per communication stream (tp, pp-send, pp-recv, dp).
set datafile separator ','
set title "Megatron 18.4B on 64 A100: t = 8, p = 4, interleaved 1F1B (v = 2), 8 micro-batches, no recomputation (simulated)"
set xlabel 'time (ms)'
set ylabel 'pipeline rank'
set yrange [3.75:-0.6]
set ytics ('rank 0' 0, 'rank 1' 1, 'rank 2' 2, 'rank 3' 3)
set grid xtics
set key outside bottom center horizontal
set style fill solid 1.0 noborder
# y of a task: the rank, compute stream on top, each comm stream 0.12 lower
y(r, s) = r + (s == 0 ? 0 : 0.22 + 0.12 * s)
h(s) = s == 0 ? 0.2 : 0.05
sel(c) = sprintf('< awk -F, ''NR > 1 && $5 == "%s"'' gantt.csv', c)
plot sel('forward')   using (($3+$4)/2):(y($1,$2)):(($4-$3)/2):(h($2)) with boxxyerror lc rgb '#4e79a7' title 'forward', \
     sel('backward')  using (($3+$4)/2):(y($1,$2)):(($4-$3)/2):(h($2)) with boxxyerror lc rgb '#f28e2b' title 'backward', \
     sel('optimizer') using (($3+$4)/2):(y($1,$2)):(($4-$3)/2):(h($2)) with boxxyerror lc rgb '#59a14f' title 'optimizer', \
     sel('tp')        using (($3+$4)/2):(y($1,$2)):(($4-$3)/2):(h($2)) with boxxyerror lc rgb '#b07aa1' title 'TP comm', \
     sel('pp')        using (($3+$4)/2):(y($1,$2)):(($4-$3)/2):(h($2)) with boxxyerror lc rgb '#e15759' title 'PP comm', \
     sel('dp')        using (($3+$4)/2):(y($1,$2)):(($4-$3)/2):(h($2)) with boxxyerror lc rgb '#76b7b2' title 'DP comm'
