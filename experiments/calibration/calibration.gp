# Calibration set: published vs predicted (comparison.csv from run.sh)
set datafile separator ','
set title 'Calibration set (Narayanan et al. 2021 Table 1, A100): TFLOP/s per GPU, Megatron FLOP count'
set ylabel 'TFLOP/s per GPU'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set yrange [0:200]
set grid ytics
set key top left
plot 'comparison.csv' every ::1 using 6:xtic(1) title 'published' lc rgb '#4e79a7', \
     '' every ::1 using 7 title 'trainsim' lc rgb '#f28e2b', \
     '' every ::1 using ($0 - 1.0/6):($6 + 5):6 with labels notitle, \
     '' every ::1 using ($0 + 1.0/6):($7 + 5):7 with labels notitle
