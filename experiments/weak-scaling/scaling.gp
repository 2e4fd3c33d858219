# Weak scaling (scaling.csv from run.sh; published points from ../calibration/published.csv)
set datafile separator ','
set title 'Weak scaling of the Megatron GPT family on A100 80GB (full recomputation)'
set xlabel 'GPUs'
set ylabel 'TFLOP/s per GPU'
set logscale x 2
set xrange [24:4096]
set yrange [0:330]
set grid
set key bottom right
set arrow from graph 0, first 312 to graph 1, first 312 nohead dt 2
plot 'scaling.csv' every ::1 using 2:3 with linespoints lw 2 pt 7 title 'trainsim (Megatron FLOP count)', \
     'scaling.csv' every ::1 using 2:4 with linespoints lw 2 pt 5 dt 2 title 'trainsim (model FLOPs)', \
     'scaling.csv' every ::1 using 2:3:(sprintf('%s', strcol(1))) with labels left rotate by 35 offset 0.5,0.8 font ',8' notitle, \
     '< grep -v "^#" ../calibration/published.csv' every ::1 using 3:7 with points pt 9 ps 2 lc rgb '#000000' title 'published (Narayanan et al. 2021)'
