# step_times: drawn by `dlbench report` from step_times.dat. To draw it again, in this folder:
#   gnuplot step_times.gp > step_times.svg
#   gnuplot -e "output_format='png'" step_times.gp > step_times.png
if (!exists("output_format")) output_format = 'svg'
if (output_format eq 'png') {
  set terminal pngcairo size 900,540
} else {
  set terminal svg size 900,540 dynamic enhanced font 'sans,12'
}
set encoding utf8
set tmargin 5
set label 1 "Step times around each point's median" at screen 0.5, screen 0.955 center noenhanced
set label 2 "whiskers p5-p95, box p25-p75, bar: median; orange: only p5 and p95 known" at screen 0.5, screen 0.915 center font ',10' noenhanced
set border 3
set tics nomirror
set grid ytics lt 1 lc rgb '#dddddd'
set key noenhanced
set linetype 1 lc rgb '#4e79a7' lw 2 pt 7 ps 1.2
set linetype 2 lc rgb '#f28e2b' lw 2 pt 7 ps 1.2
set linetype 3 lc rgb '#e15759' lw 2 pt 7 ps 1.2
set linetype 4 lc rgb '#76b7b2' lw 2 pt 7 ps 1.2
set linetype 5 lc rgb '#59a14f' lw 2 pt 7 ps 1.2
set linetype 6 lc rgb '#edc948' lw 2 pt 7 ps 1.2
set linetype 7 lc rgb '#b07aa1' lw 2 pt 7 ps 1.2
set linetype 8 lc rgb '#ff9da7' lw 2 pt 7 ps 1.2
set linetype 9 lc rgb '#9c755f' lw 2 pt 7 ps 1.2
set linetype 10 lc rgb '#bab0ac' lw 2 pt 7 ps 1.2
set ytics noenhanced
set ytics ("dlbench bf16 1 GPU  (30.3 ms)" 0, "dlbench fp16 1 GPU  (28.4 ms)" 1, "dlbench tf32 1 GPU  (59.4 ms)" 2, "pytorch bf16 1 GPU  (55.4 ms)" 3, "pytorch fp16 1 GPU  (44.3 ms)" 4, "pytorch tf32 1 GPU  (82.1 ms)" 5)
set grid noytics xtics
unset key
set xlabel "step time, % of the point's median"
set format x '%g%%'
set xrange [97.4147343:109.154122]
set yrange [5.6:-0.6]
set style fill solid 0.35 border
set errorbars 1.5
plot 'step_times.dat' index 0 using 4:1:2:6 with xerrorbars lt 1 ps 0 title 'p5-p95', \
     '' index 0 using 4:1:3:5:($1-0.28):($1+0.28) with boxxyerror lt 1 title 'p25-p75', \
     '' index 0 using 4:($1-0.34):(0):(0.68) with vectors nohead lw 3 lc rgb '#1d2433' title 'median'
