// Peer-to-peer copies between GPU 0 and GPU 1 at a fixed period, on the copy engines (no SMs taken).
//
// Why: on a 2x H200 host at its 700 W cap, a data-parallel ResNet-50 step ran at an 1875 MHz median SM
// clock where the same GPUs alone (or both at once, independently) ran at 1950-1965 MHz, at the same
// power, whatever the exchange sent (25 MiB buckets in FP32 or one FP16 bucket after backward). Something
// draws power in data parallel that does not depend on how much is sent. Run this beside two independent
// single-GPU runs: if their clocks drop the same way, keeping the GPU-to-GPU link active is what costs the
// power, not the collectives' kernels.
//
//   peer_copy_load [--bytes B] [--period-us P] [--seconds S]
//
// Every P microseconds (host-timed), B bytes go from GPU 0 to GPU 1 and B bytes back, both directions at
// once, each on its own stream. Prints the copies made and their mean time.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "peer_copy_load: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Options {
  size_t bytes = size_t{4} << 10;
  long period_us = 1000;
  double seconds = 10;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "peer_copy_load: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    const char* value = argv[++i];
    char* end = nullptr;
    const double v = std::strtod(value, &end);
    if (end == value || *end != '\0' || v <= 0) {
      std::fprintf(stderr, "peer_copy_load: %s wants a positive number, got '%s'\n", flag.c_str(), value);
      std::exit(2);
    }
    if (flag == "--bytes")
      o.bytes = static_cast<size_t>(v);
    else if (flag == "--period-us")
      o.period_us = static_cast<long>(v);
    else if (flag == "--seconds")
      o.seconds = v;
    else {
      std::fprintf(stderr, "peer_copy_load: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "device count");
  if (devices < 2) {
    std::fprintf(stderr, "peer_copy_load: needs 2 GPUs, found %d\n", devices);
    return 1;
  }
  void* buffer[2];
  cudaStream_t stream[2];
  for (int d = 0; d < 2; ++d) {
    check(cudaSetDevice(d), "set device");
    int can = 0;
    check(cudaDeviceCanAccessPeer(&can, d, 1 - d), "can access peer");
    if (!can) {
      std::fprintf(stderr, "peer_copy_load: GPU %d cannot access GPU %d directly\n", d, 1 - d);
      return 1;
    }
    check(cudaDeviceEnablePeerAccess(1 - d, 0), "enable peer access");
    check(cudaMalloc(&buffer[d], 2 * o.bytes), "malloc");
    check(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking), "stream");
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto period = std::chrono::microseconds(o.period_us);
  auto next = start;
  long copies = 0;
  double busy_us = 0;
  while (std::chrono::duration<double>(clock::now() - start).count() < o.seconds) {
    const auto t0 = clock::now();
    // Each GPU pushes the first half of its buffer into the second half of the other's.
    for (int d = 0; d < 2; ++d) {
      check(cudaMemcpyPeerAsync(static_cast<char*>(buffer[1 - d]) + o.bytes, 1 - d, buffer[d], d, o.bytes,
                                stream[d]),
            "peer copy");
    }
    for (int d = 0; d < 2; ++d) check(cudaStreamSynchronize(stream[d]), "synchronize");
    busy_us += std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    ++copies;
    next += period;
    std::this_thread::sleep_until(next);
  }
  std::printf("peer_copy_load: %ld rounds of %zu bytes each way, every %ld us, %.1f us each on average\n",
              copies, o.bytes, o.period_us, copies ? busy_us / static_cast<double>(copies) : 0.0);
  return 0;
}
