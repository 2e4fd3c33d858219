# Bubble fraction vs micro-batches (bubble.csv from run.sh)
set datafile separator ','
set title 'Pipeline bubble vs micro-batches (p = 8, T_F = T_B = T_W; trainsim schedule timing)'
set xlabel 'micro-batches per iteration m'
set ylabel 'bubble fraction of the iteration'
set logscale x 2
set xtics (8, 16, 32, 64, 128)
set yrange [0:0.5]
set grid
set key top right
sel(k) = sprintf('< awk -F, ''$1 == "%s"'' bubble.csv', k)
plot sel('gpipe')       using 4:5 with linespoints lw 2 pt 7 title 'GPipe', \
     sel('1f1b')        using 4:5 with linespoints lw 2 pt 5 dt 2 title '1F1B', \
     sel('interleaved') using 4:5 with linespoints lw 2 pt 9 title 'interleaved 1F1B (v = 2)', \
     sel('zb-h1')       using 4:5 with linespoints lw 2 pt 11 title 'ZB-H1', \
     sel('zb-h2')       using 4:5 with linespoints lw 2 pt 13 title 'ZB-H2', \
     sel('zb-v')        using 4:5 with linespoints lw 2 pt 15 title 'ZB-V'
