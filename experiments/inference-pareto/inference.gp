# Output tokens/s per GPU against end-to-end latency: the Pareto front of
# trainsim search --inference (pareto.csv from run.sh)
set datafile separator ','
set multiplot layout 1,2 title 'Inference on 8 GPUs, 60 tokens in, 20 out: Pareto front (trainsim search --inference)'
set xlabel 'end-to-end latency of the batch (ms)'
set ylabel 'output tokens/s per GPU'
set logscale xy
set grid
set key bottom right
sel(g, m) = sprintf('< awk -F, ''$1 == "%s" && $2 == "%s"'' pareto.csv', g, m)
do for [g in 'A100-SXM4-80GB H100-SXM5-80GB'] {
    set title g
    plot sel(g, 'GPT-3 175B') u 9:10 w lp pt 7 lc rgb '#4e79a7' t 'GPT-3 175B', \
         sel(g, 'GPT-3 40B') u 9:10 w lp pt 5 lc rgb '#f28e2b' t 'GPT-3 40B', \
         sel(g, 'GPT-3 20B') u 9:10 w lp pt 9 lc rgb '#59a14f' t 'GPT-3 20B'
}
unset multiplot
