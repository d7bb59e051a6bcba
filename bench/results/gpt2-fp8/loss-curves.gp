# gnuplot loss-curves.gp > loss-curves.svg  (reads loss-curves.dat beside it)
set terminal svg size 900,720 font 'sans,12' background rgb 'white'
array run[4] = ['bf16', 'fp8', 'fp8, fast accumulation forward', 'fp8, fast accumulation everywhere']
set multiplot layout 2,1
set grid ytics lc rgb '#dddddd'
set key top right
set title "gpt2 on fortunes: training loss of every step (steps 30-300)"
set yrange [2.45:2.95]
set xrange [30:300]
set ylabel 'loss (nats per byte)'
plot for [i=0:3] 'loss-curves.dat' using 1:(column(2+2*i)) with lines lw 1.2 lc i+1 title run[i+1]
set title "the same runs minus bf16, a 10-step mean of the differences"
set yrange [-0.02:0.02]
set xrange [1:300]
set xlabel 'step'
set ylabel 'loss - bf16 loss'
plot for [i=1:3] 'loss-curves.dat' using 1:(column(3+2*i)) with lines lw 1.5 lc i+1 title run[i+1], 0 with lines lc rgb '#555555' notitle
unset multiplot
