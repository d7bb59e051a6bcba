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
set ytics ("resnet20 dlbench fp16 1 GPU  (8.6 ms)" 0, "resnet50 dlbench bf16 1 GPU  (36.6 ms)" 1, "resnet50 dlbench bf16 2 GPUs nccl-threads  (39.7 ms)" 2, "resnet50 dlbench bf16 2 GPUs mpi-nccl  (37.9 ms)" 3, "resnet50 dlbench fp16 1 GPU  (36.5 ms)" 4, "resnet50 dlbench fp16 2 GPUs nccl-threads  (37.6 ms)" 5, "resnet50 dlbench fp16 2 GPUs mpi-nccl  (37.6 ms)" 6, "resnet50 dlbench fp32 1 GPU  (249.2 ms)" 7, "resnet50 dlbench fp32 2 GPUs nccl-threads  (249.3 ms)" 8, "resnet50 dlbench fp32 2 GPUs mpi-nccl  (249.5 ms)" 9, "resnet50 dlbench tf32 1 GPU  (67.2 ms)" 10, "resnet50 dlbench tf32 2 GPUs nccl-threads  (67.9 ms)" 11, "resnet50 dlbench tf32 2 GPUs mpi-nccl  (68.3 ms)" 12, "resnet50 pytorch fp16 1 GPU  (45.2 ms)" 13, "resnet50 pytorch fp16 2 GPUs  (47.8 ms)" 14, "resnet50 pytorch fp32 1 GPU  (242.0 ms)" 15, "resnet50 pytorch fp32 2 GPUs  (246.9 ms)" 16, "resnet50 pytorch tf32 1 GPU  (81.8 ms)" 17, "resnet50 pytorch tf32 2 GPUs  (86.5 ms)" 18, "resnet50 pytorch (compiled) fp16 1 GPU  (39.5 ms)" 19)
set ytics font ',9'
set grid noytics xtics
unset key
set xlabel "step time, % of the point's median"
set format x '%g%%'
set xrange [91.5906798:126.872295]
set yrange [19.6:-0.6]
set style fill solid 0.35 border
set errorbars 1.5
plot 'step_times.dat' index 0 using 4:1:2:6 with xerrorbars lt 1 ps 0 title 'p5-p95', \
     '' index 0 using 4:1:3:5:($1-0.28):($1+0.28) with boxxyerror lt 1 title 'p25-p75', \
     '' index 0 using 4:($1-0.34):(0):(0.68) with vectors nohead lw 3 lc rgb '#1d2433' title 'median', \
     '' index 1 using 4:1:2:6 with xerrorbars lt 2 ps 0 title 'p5-p95 (only p5 and p95 known)', \
     '' index 1 using 4:($1-0.34):(0):(0.68) with vectors nohead lw 3 lc rgb '#1d2433' notitle
