# Time to train and GPU-hours vs GPU count (capacity.csv from run.sh)
set datafile separator ','
set multiplot layout 1,2 title 'GPT-3 175B, 300B tokens, B = 1536: best layout found by trainsim search'
set logscale xy
set xlabel 'GPUs'
set grid
set key top right
set xtics (512, 1024, 2048, 4096)
set xrange [400:5000]
sel(g) = sprintf('< awk -F, ''$1 == "%s"'' capacity.csv', g)
set ylabel 'days to train'
plot sel('A100-SXM4-80GB') using 2:6 with linespoints lw 2 pt 7 title 'A100 80GB', \
     sel('H100-SXM5-80GB') using 2:6 with linespoints lw 2 pt 5 title 'H100', \
     sel('H200-SXM-141GB') using 2:6 with linespoints lw 2 pt 9 title 'H200'
set ylabel 'GPU-hours'
set key top left
plot sel('A100-SXM4-80GB') using 2:7 with linespoints lw 2 pt 7 title 'A100 80GB', \
     sel('H100-SXM5-80GB') using 2:7 with linespoints lw 2 pt 5 title 'H100', \
     sel('H200-SXM-141GB') using 2:7 with linespoints lw 2 pt 9 title 'H200'
unset multiplot
