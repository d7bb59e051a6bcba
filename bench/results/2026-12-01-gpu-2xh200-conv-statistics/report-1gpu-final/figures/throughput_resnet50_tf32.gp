# throughput_resnet50_tf32: drawn by `dlbench report` from throughput_resnet50_tf32.dat. To draw it again, in this folder:
#   gnuplot throughput_resnet50_tf32.gp > throughput_resnet50_tf32.svg
#   gnuplot -e "output_format='png'" throughput_resnet50_tf32.gp > throughput_resnet50_tf32.png
if (!exists("output_format")) output_format = 'svg'
if (output_format eq 'png') {
  set terminal pngcairo size 900,540
} else {
  set terminal svg size 900,540 dynamic enhanced font 'sans,12'
}
set encoding utf8
set title "resnet50 tf32: throughput" noenhanced
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
set xtics noenhanced
set xtics ("1 GPU" 0)
set key outside below center horizontal
set ylabel 'images/s (all GPUs together)'
set xrange [-0.6:0.6]
set yrange [0:4802.40203]
set boxwidth 0.306 absolute
set style fill solid 0.9 noborder
plot 'throughput_resnet50_tf32.dat' index 0 using 1:2 with boxes lt 1 title "dlbench" noenhanced, \
     'throughput_resnet50_tf32.dat' index 1 using 1:2 with boxes lt 2 title "pytorch" noenhanced
