// What a CUDA graph's fork to a second stream costs the chain of kernels it leaves, in isolation.
//
// A data-parallel step forks each gradient bucket's sum off the compute stream during backward and joins
// it before the optimizer. On an H200 that structure cost 0.5 ms of a 34 ms ResNet-50 step even with
// nothing to send (a one-rank group; bench/results/gradient-exchange). This program rebuilds the
// structure with synthetic kernels, so each suspect can be timed alone:
//
//   linear      --layers kernels in one stream: the reference
//   events      the same, forked at --forks points (event record, wait on the side stream) and joined at
//               the end, with nothing on the side stream
//   tiny        a one-warp empty kernel on the side stream at each fork
//   ctas        --side-ctas blocks spinning --side-us on the side stream at each fork (a collective's
//               thread blocks, holding SMs)
//   external    no fork in the graph: external event records at the fork points (cudaEventRecordExternal),
//               and the side kernels of `ctas` launched outside the graph, waiting on those events
//
// The layers alternate two kinds: "spin" (two waves of blocks that each spin --work-us, as a convolution
// fills the GPU) and "persistent" (one wave sized to the whole GPU with a grid-wide barrier in the middle,
// as cuDNN's semi-persistent batch-norm kernels are: a block that cannot be resident holds up all others).
// Each variant's graph is launched --reps times; the median per launch and the difference to `linear`
// are printed.
//
//   graph_fork_cost [--layers N] [--forks F] [--work-us U] [--side-us S] [--side-ctas C] [--reps R]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "graph_fork_cost: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ void spin_cycles(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// A block's worth of busy time: the shape of a layer that fills the GPU in waves.
__global__ void spin_kernel(long long cycles) { spin_cycles(cycles); }

// One wave sized to the GPU, with a grid-wide barrier halfway: every block must be resident at once, or the
// resident ones wait at the barrier until the rest are scheduled. `arrived` is zeroed before each launch.
__global__ void persistent_kernel(long long cycles, unsigned* arrived) {
  spin_cycles(cycles / 2);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(arrived, 1u);
    while (atomicAdd(arrived, 0u) < gridDim.x) {
    }
  }
  __syncthreads();
  spin_cycles(cycles / 2);
}

__global__ void empty_kernel() {}

struct Options {
  int layers = 200, forks = 9, reps = 20, side_ctas = 24;
  double work_us = 100, side_us = 100;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "graph_fork_cost: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    const char* value = argv[++i];
    char* end = nullptr;
    const double v = std::strtod(value, &end);
    if (end == value || *end != '\0' || v <= 0) {
      std::fprintf(stderr, "graph_fork_cost: %s %s: must be a positive number\n", flag.c_str(), value);
      std::exit(2);
    }
    if (flag == "--layers")
      o.layers = static_cast<int>(v);
    else if (flag == "--forks")
      o.forks = static_cast<int>(v);
    else if (flag == "--reps")
      o.reps = static_cast<int>(v);
    else if (flag == "--side-ctas")
      o.side_ctas = static_cast<int>(v);
    else if (flag == "--work-us")
      o.work_us = v;
    else if (flag == "--side-us")
      o.side_us = v;
    else {
      std::fprintf(stderr, "graph_fork_cost: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  if (o.forks >= o.layers) {
    std::fprintf(stderr, "graph_fork_cost: --forks %d must be below --layers %d\n", o.forks, o.layers);
    std::exit(2);
  }
  return o;
}

enum class Side { none, events, tiny, ctas, external };
const char* side_name(Side s) {
  switch (s) {
    case Side::none:
      return "linear";
    case Side::events:
      return "events";
    case Side::tiny:
      return "tiny";
    case Side::ctas:
      return "ctas";
    case Side::external:
      return "external";
  }
  return "?";
}

struct Setup {
  Options o;
  int sms = 0, persistent_blocks = 0;
  long long work_cycles = 0, side_cycles = 0;
  cudaStream_t compute = nullptr, side = nullptr;
  unsigned* arrived = nullptr;  // one counter per layer
  std::vector<cudaEvent_t> fork_events;
  cudaEvent_t joined = nullptr;
};

bool is_fork(const Setup& s, int layer) {
  // Evenly spread, never at layer 0: forks happen once backward has produced gradients.
  const int every = s.o.layers / (s.o.forks + 1);
  return layer > 0 && layer % every == 0 && layer / every <= s.o.forks;
}

void launch_layer(const Setup& s, int layer) {
  if (layer % 2 == 0) {
    spin_kernel<<<2 * s.persistent_blocks, 256, 0, s.compute>>>(s.work_cycles);
  } else {
    check(cudaMemsetAsync(s.arrived + layer, 0, sizeof(unsigned), s.compute), "memset");
    persistent_kernel<<<s.persistent_blocks, 256, 0, s.compute>>>(s.work_cycles, s.arrived + layer);
  }
  check(cudaGetLastError(), "layer launch");
}

void launch_side_work(const Setup& s, Side side) {
  if (side == Side::tiny) empty_kernel<<<1, 32, 0, s.side>>>();
  if (side == Side::ctas || side == Side::external)
    spin_kernel<<<s.o.side_ctas, 512, 0, s.side>>>(s.side_cycles);
  check(cudaGetLastError(), "side launch");
}

// The graph of one variant. `external`: the forks are external event records, the side work is not in it.
cudaGraphExec_t record(Setup& s, Side side) {
  check(cudaStreamBeginCapture(s.compute, cudaStreamCaptureModeThreadLocal), "begin capture");
  int fork = 0;
  bool forked = false;
  for (int layer = 0; layer < s.o.layers; ++layer) {
    launch_layer(s, layer);
    if (side == Side::none || !is_fork(s, layer)) continue;
    cudaEvent_t e = s.fork_events[fork++];
    if (side == Side::external) {
      check(cudaEventRecordWithFlags(e, s.compute, cudaEventRecordExternal), "external record");
      continue;
    }
    check(cudaEventRecord(e, s.compute), "fork record");
    check(cudaStreamWaitEvent(s.side, e, 0), "fork wait");
    launch_side_work(s, side);
    forked = true;
  }
  if (forked) {
    check(cudaEventRecord(s.joined, s.side), "join record");
    check(cudaStreamWaitEvent(s.compute, s.joined, 0), "join wait");
  }
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(s.compute, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphDestroy(graph), "graph destroy");
  return exec;
}

// One step: the graph, and for `external` the side work enqueued behind it, joined before the next step.
void run_step(Setup& s, cudaGraphExec_t exec, Side side) {
  check(cudaGraphLaunch(exec, s.compute), "graph launch");
  if (side != Side::external) return;
  for (int f = 0; f < s.o.forks; ++f) {
    check(cudaStreamWaitEvent(s.side, s.fork_events[f], 0), "external wait");
    launch_side_work(s, side);
  }
  check(cudaEventRecord(s.joined, s.side), "external join record");
  check(cudaStreamWaitEvent(s.compute, s.joined, 0), "external join wait");
}

double median_step_ms(Setup& s, Side side) {
  cudaGraphExec_t exec = record(s, side);
  run_step(s, exec, side);  // warm-up
  check(cudaStreamSynchronize(s.compute), "warm-up");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<float> ms;
  for (int r = 0; r < s.o.reps; ++r) {
    check(cudaEventRecord(a, s.compute), "record a");
    run_step(s, exec, side);
    check(cudaEventRecord(b, s.compute), "record b");
    check(cudaEventSynchronize(b), "sync b");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  check(cudaEventDestroy(a), "event destroy");
  check(cudaEventDestroy(b), "event destroy");
  check(cudaGraphExecDestroy(exec), "exec destroy");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  s.o = parse(argc, argv);
  int device = 0, clock_khz = 0;
  check(cudaGetDevice(&device), "device");
  check(cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device), "clock rate");
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, 256, 0), "occupancy");
  s.persistent_blocks = s.sms * per_sm;
  s.work_cycles = static_cast<long long>(s.o.work_us * clock_khz / 1e3);
  s.side_cycles = static_cast<long long>(s.o.side_us * clock_khz / 1e3);
  check(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&s.side, cudaStreamNonBlocking), "stream");
  check(cudaMalloc(&s.arrived, sizeof(unsigned) * s.o.layers), "malloc");
  s.fork_events.resize(static_cast<size_t>(s.o.forks));
  for (auto& e : s.fork_events) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&s.joined, cudaEventDisableTiming), "event");

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "properties");
  std::printf(
      "graph_fork_cost on %s (%d SMs, %d persistent blocks of 256): %d layers of %.0f us, %d forks, "
      "side work %d blocks x %.0f us, median of %d steps\n",
      prop.name, s.sms, s.persistent_blocks, s.o.layers, s.o.work_us, s.o.forks, s.o.side_ctas, s.o.side_us,
      s.o.reps);
  std::printf("%-10s %12s %14s %16s\n", "variant", "step (ms)", "vs linear (ms)", "per fork (us)");
  double linear = 0;
  for (Side side : {Side::none, Side::events, Side::tiny, Side::ctas, Side::external}) {
    const double ms = median_step_ms(s, side);
    if (side == Side::none) linear = ms;
    std::printf("%-10s %12.3f %14.3f %16.1f\n", side_name(side), ms, ms - linear,
                side == Side::none ? 0.0 : (ms - linear) * 1e3 / s.o.forks);
  }
  return 0;
}
