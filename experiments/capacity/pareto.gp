# Cost/time Pareto front (capacity.csv from run.sh)
set datafile separator ','
set title 'GPT-3 175B, 300B tokens: GPU-hours vs days; the Pareto front joins the points nothing beats on both'
set xlabel 'days to train'
set ylabel 'GPU-hours'
set logscale xy
set xrange [1.5:60]
set format y '%.0f'
set grid
set key top right
sel(g) = sprintf('< awk -F, ''$1 == "%s"'' capacity.csv', g)
plot '< awk -F, ''NR > 1 && $NF == 1'' capacity.csv | sort -t, -k6,6g' using 6:7 with lines lw 3 lc rgb '#999999' title 'Pareto front', \
     sel('A100-SXM4-80GB') using 6:7:(sprintf('%d', $2)) with labels point pt 7 ps 1.5 lc rgb '#4e79a7' offset 0,0.9 font ',8' title 'A100 80GB', \
     sel('H100-SXM5-80GB') using 6:7:(sprintf('%d', $2)) with labels point pt 5 ps 1.5 lc rgb '#f28e2b' offset 0,0.9 font ',8' title 'H100', \
     sel('H200-SXM-141GB') using 6:7:(sprintf('%d', $2)) with labels point pt 9 ps 1.5 lc rgb '#59a14f' offset 0,-0.9 font ',8' title 'H200'
