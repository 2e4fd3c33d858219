# Bubble fraction vs micro-batches (bubble.csv from run.sh)
set datafile separator ','
set title 'Pipeline bubble vs micro-batches (p = 8, T_F = T_B = T_W; trainsim schedule timing)'
set xlabel 'micro-batches per iteration m'
set ylabel 'bubble fraction of the iteration'
set logscale x 2
set xrange [7:150]
set xtics (8, 16, 32, 64, 128)
set yrange [-0.01:0.5]
set grid
set key top right
sel(k) = sprintf('< awk -F, ''$1 == "%s"'' bubble.csv', k)
plot sel('gpipe')       using 4:5 with linespoints lw 4 pt 7 ps 1.3 lc rgb '#bbbbbb' title 'GPipe', \
     sel('1f1b')        using 4:5 with linespoints lw 2 pt 5 dt 2 lc rgb '#4e79a7' title '1F1B (same bubble as GPipe)', \
     sel('interleaved') using 4:5 with linespoints lw 2 pt 9 lc rgb '#f28e2b' title 'interleaved 1F1B (v = 2)', \
     sel('zb-h1')       using 4:5 with linespoints lw 2 pt 11 lc rgb '#59a14f' title 'ZB-H1', \
     sel('zb-h2')       using 4:5 with linespoints lw 4 pt 13 ps 1.3 lc rgb '#e15759' title 'ZB-H2', \
     sel('zb-v')        using 4:5 with linespoints lw 2 pt 15 dt 2 lc rgb '#000000' title 'ZB-V (v = 2)'
