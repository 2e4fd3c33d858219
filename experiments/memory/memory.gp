# Memory per pipeline stage by category (memory.csv from run.sh)
set datafile separator ','
set title 'GPT-3 175B, t = 8, p = 16, b = 1, 1F1B: memory per stage at its peak (stages 0..15 per group)'
set ylabel 'GiB per GPU'
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.8
set key top right horizontal maxrows 2 width -2
set grid ytics
set xtics scale 0 font ',8'
set yrange [0:88]
# label only the first and last stage of each group
lab(c) = (column(c) == 0 || column(c) == 15) ? sprintf('%d', column(c)) : ''
set arrow from graph 0, first 80 to graph 1, first 80 nohead dt 2 lw 2 lc rgb '#cc0000' front
set label '80 GiB' at graph 0.93, first 83 tc rgb '#cc0000' front
v(name) = sprintf('< awk -F, ''$1 == "%s"'' memory.csv', name)
plot newhistogram 'none' lt 1, \
       v('none') u 3:xtic(lab(2)) t 'weights' lc rgb '#4e79a7', '' u 4 t 'gradients' lc rgb '#f28e2b', \
       '' u 5 t 'optimizer' lc rgb '#59a14f', '' u 6 t 'activations' lc rgb '#e15759', '' u 7 t 'p2p' lc rgb '#b07aa1', \
       '' u 8 t 'CUDA, NCCL, cuBLAS, fragmentation' lc rgb '#9c9c9c', \
     newhistogram 'selective' lt 1, \
       v('selective') u 3:xtic(lab(2)) notitle lc rgb '#4e79a7', '' u 4 notitle lc rgb '#f28e2b', \
       '' u 5 notitle lc rgb '#59a14f', '' u 6 notitle lc rgb '#e15759', '' u 7 notitle lc rgb '#b07aa1', '' u 8 notitle lc rgb '#9c9c9c', \
     newhistogram 'full' lt 1, \
       v('full') u 3:xtic(lab(2)) notitle lc rgb '#4e79a7', '' u 4 notitle lc rgb '#f28e2b', \
       '' u 5 notitle lc rgb '#59a14f', '' u 6 notitle lc rgb '#e15759', '' u 7 notitle lc rgb '#b07aa1', '' u 8 notitle lc rgb '#9c9c9c', \
     newhistogram 'none + SP' lt 1, \
       v('none+SP') u 3:xtic(lab(2)) notitle lc rgb '#4e79a7', '' u 4 notitle lc rgb '#f28e2b', \
       '' u 5 notitle lc rgb '#59a14f', '' u 6 notitle lc rgb '#e15759', '' u 7 notitle lc rgb '#b07aa1', '' u 8 notitle lc rgb '#9c9c9c', \
     newhistogram 'selective + SP' lt 1, \
       v('selective+SP') u 3:xtic(lab(2)) notitle lc rgb '#4e79a7', '' u 4 notitle lc rgb '#f28e2b', \
       '' u 5 notitle lc rgb '#59a14f', '' u 6 notitle lc rgb '#e15759', '' u 7 notitle lc rgb '#b07aa1', '' u 8 notitle lc rgb '#9c9c9c', \
     newhistogram 'full + SP' lt 1, \
       v('full+SP') u 3:xtic(lab(2)) notitle lc rgb '#4e79a7', '' u 4 notitle lc rgb '#f28e2b', \
       '' u 5 notitle lc rgb '#59a14f', '' u 6 notitle lc rgb '#e15759', '' u 7 notitle lc rgb '#b07aa1', '' u 8 notitle lc rgb '#9c9c9c'
