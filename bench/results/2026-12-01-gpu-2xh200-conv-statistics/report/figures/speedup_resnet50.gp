# speedup_resnet50: drawn by `dlbench report` from speedup_resnet50.dat. To draw it again, in this folder:
#   gnuplot speedup_resnet50.gp > speedup_resnet50.svg
#   gnuplot -e "output_format='png'" speedup_resnet50.gp > speedup_resnet50.png
if (!exists("output_format")) output_format = 'svg'
if (output_format eq 'png') {
  set terminal pngcairo size 900,540
} else {
  set terminal svg size 900,540 dynamic enhanced font 'sans,12'
}
set encoding utf8
set title "resnet50: speedup over one GPU" noenhanced
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
set xtics ("1" 1, "2" 2)
set key top left
set xlabel 'GPUs'
set ylabel 'speedup over one GPU'
set xrange [0.8:2.1]
set yrange [0:2.2]
plot 'speedup_resnet50.dat' index 0 using 1:2 with lines dt 2 lw 1.5 lc rgb '#777777' title 'ideal (linear)', \
     '' index 1 using 1:2 with linespoints lt 1 pt 9 title "dlbench mpi-nccl fp16" noenhanced, \
     '' index 2 using 1:2 with linespoints lt 2 pt 9 title "dlbench nccl-threads fp16" noenhanced, \
     '' index 3 using 1:2 with linespoints lt 3 pt 9 title "pytorch fp16" noenhanced
