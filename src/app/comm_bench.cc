#include "app/comm_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/reference/half_float.h"
#include "bench/system_info.h"
#include "core/file_io.h"
#include "core/status.h"
#include "parallel/launch.h"
#include "parallel/placement.h"

namespace dlbench::parallel {

namespace {

// Host bytes of `count` elements of `dtype` holding `value(i)`.
std::vector<std::byte> host_values(DType dtype, int64_t count, const std::function<double(int64_t)>& value) {
  std::vector<std::byte> bytes(static_cast<size_t>(count) * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const double v = value(i);
    if (dtype == DType::f32) {
      const float f = static_cast<float>(v);
      std::memcpy(bytes.data() + i * 4, &f, 4);
    } else {
      const uint16_t h = dtype == DType::f16 ? f16_from_double(v) : bf16_from_double(v);
      std::memcpy(bytes.data() + i * 2, &h, 2);
    }
  }
  return bytes;
}

double host_value(DType dtype, const std::byte* bytes, int64_t i) {
  if (dtype == DType::f32) {
    float f;
    std::memcpy(&f, bytes + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes + i * 2, 2);
  return dtype == DType::f16 ? f16_to_double(h) : bf16_to_double(h);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  int64_t bytes = 0, elements = 0;
  double seconds = 0;         // one all-reduce, launched and waited for alone (median)
  double stream_seconds = 0;  // one of `iters` all-reduces enqueued back to back (as in a step's graph)
  int64_t wrong = 0;          // elements that differed from the expected sum, over all ranks
  std::string first_wrong;
};

// The checked iteration: every rank's values summed once into `x` (on `buffer`) and compared element by
// element; the wrong elements of all ranks, and the first any rank saw, into `row`.
void check_sum(Communicator& comm, Backend& backend, DType dtype, void* buffer, Tensor& x, Row& row,
               int64_t& step) {
  const int n = comm.size(), rank = comm.rank();
  comm.set_step(step++);
  const auto mine = host_values(dtype, row.elements, [&](int64_t i) { return comm_bench_value(rank, i); });
  backend.copy_to_device(buffer, mine.data(), mine.size());
  comm.all_reduce_sum(x);
  comm.wait_all_reduces();
  std::vector<std::byte> result(mine.size());
  backend.copy_to_host(result.data(), buffer, result.size());
  int64_t wrong = 0;
  for (int64_t i = 0; i < row.elements; ++i) {
    double expected = 0;
    for (int r = 0; r < n; ++r) expected += comm_bench_value(r, i);
    const double got = host_value(dtype, result.data(), i);
    if (got != expected && wrong++ == 0) {
      row.first_wrong =
          fmt::format("rank {}: element {} of {} is {}, expected {}", rank, i, row.elements, got, expected);
    }
  }
  row.wrong = static_cast<int64_t>(comm.sum(static_cast<double>(wrong)));
  // Rank 0 reports the first wrong element any rank saw.
  const auto reports = comm.all_gather(row.first_wrong);
  row.first_wrong.clear();
  for (const auto& r : reports) {
    if (row.first_wrong.empty()) row.first_wrong = r;
  }
}

// The timed iterations of one size, each waited for, then back to back; into `row`.
void time_sums(const CommBenchOptions& o, Communicator& comm, Backend& backend, Tensor& x, Row& row,
               int64_t& step) {
  using Clock = std::chrono::steady_clock;
  // Timed iterations, on zeros so that repeated in-place sums stay finite.
  backend.fill(x, 0.0);
  backend.synchronize();
  std::vector<double> times;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    comm.set_step(step++);
    comm.barrier();
    const auto start = Clock::now();
    comm.all_reduce_sum(x);
    comm.wait_all_reduces();
    backend.synchronize();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (it >= o.warmup) times.push_back(seconds);
  }
  // An iteration lasts as long as its slowest rank.
  for (double& t : times) t = comm.max(t);
  row.seconds = median(times);
  // Back to back: what the collective costs once launch and wake-up latencies overlap, as in a graph.
  comm.set_step(step++);
  comm.barrier();
  const auto start = Clock::now();
  for (int it = 0; it < o.iters; ++it) comm.all_reduce_sum(x);
  comm.wait_all_reduces();
  backend.synchronize();
  row.stream_seconds = comm.max(std::chrono::duration<double>(Clock::now() - start).count()) / o.iters;
}

// One rank's whole benchmark.
std::vector<Row> bench_rank(const CommBenchOptions& o, DType dtype, Backend& backend, Communicator& comm) {
  const size_t esize = dtype_size(dtype);
  const int64_t max_elements = std::max<int64_t>(1, o.max_bytes / static_cast<int64_t>(esize));
  const size_t buffer_bytes = static_cast<size_t>(max_elements) * esize;
  // --nccl-symmetric: the communicator's memory (it frees it); otherwise the backend's.
  void* window = o.nccl_symmetric ? comm.allocate_window(buffer_bytes) : nullptr;
  DLB_REQUIRE(window != nullptr || !o.nccl_symmetric, "--nccl-symmetric: the {} communicator has no windows",
              comm.name());
  void* buffer = window ? window : backend.allocate(buffer_bytes);
  struct Free {
    Backend& b;
    void* p;
    ~Free() {
      if (p) b.deallocate(p);
    }
  } free_buffer{backend, window ? nullptr : buffer};

  std::vector<Row> rows;
  int64_t step = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    Row row;
    row.elements = std::max<int64_t>(1, bytes / static_cast<int64_t>(esize));
    row.bytes = row.elements * static_cast<int64_t>(esize);
    Tensor x(buffer, {row.elements}, dtype, Layout::nchw, backend.device());

    check_sum(comm, backend, dtype, buffer, x, row, step);
    time_sums(o, comm, backend, x, row, step);
    rows.push_back(row);
  }
  return rows;
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0)
    return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0)
    return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (int64_t{1} << 10) && bytes % (int64_t{1} << 10) == 0)
    return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace

int comm_bench_value(int rank, int64_t index) { return static_cast<int>((index * 7 + rank * 3) % 9) - 4; }

double all_reduce_bus_bandwidth(double algbw, int ranks) {
  return ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : 0.0;
}

namespace {

void check_comm_bench_options(const CommBenchOptions& o, DType dtype, DeviceKind device) {
  DLB_REQUIRE(o.min_bytes >= 1, "--min-bytes {}: must be at least 1", o.min_bytes);
  DLB_REQUIRE(o.max_bytes >= o.min_bytes, "--max-bytes {} is below --min-bytes {}", o.max_bytes, o.min_bytes);
  DLB_REQUIRE(o.max_bytes <= (int64_t{16} << 30), "--max-bytes {}: at most 16 GiB", o.max_bytes);
  DLB_REQUIRE(o.iters >= 1, "--iters {}: must be at least 1", o.iters);
  DLB_REQUIRE(o.warmup >= 0, "--warmup {}: must be 0 or more", o.warmup);
  DLB_REQUIRE(device == DeviceKind::cuda || dtype == DType::f32,
              "--dtype {} on the CPU: CPU ranks sum f32 (use --device cuda for f16/bf16)", dtype_name(dtype));
  if (!o.json_path.empty()) check_writable(o.json_path, "--json", OutputKind::json_object);
}

// What rank 0 measured, and where every rank ran; empty rows on the other ranks.
struct CommBenchRanks {
  std::vector<Row> rows;
  std::vector<RankPlace> places;
  int ranks = 0;
};

CommBenchRanks bench_every_rank(const CommBenchOptions& o, DType dtype, DeviceKind device, Launch& launch) {
  std::mutex mutex;
  CommBenchRanks out;
  run_local_ranks(launch, [&](int slot) {
    // The CPU needs a backend only for memory: the reference one starts no threads of its own.
    auto backend = device == DeviceKind::cpu
                       ? make_backend("reference", Device{}, 1)
                       : make_backend("cuda", Device{DeviceKind::cuda, launch.gpu(slot)}, 0);
    auto comm = launch.join(slot, *backend);
    auto mine = bench_rank(o, dtype, *backend, *comm);
    auto all_places = gather_places(*comm, place_of(launch, slot, *backend));
    if (comm->rank() == 0) {
      std::lock_guard lock(mutex);
      out.rows = std::move(mine);
      out.ranks = comm->size();
      out.places = std::move(all_places);
    }
  });
  return out;
}

// The table of sizes, printed, and its rows as JSON; counts the sizes summed wrongly and names the first.
nlohmann::json print_rows(const std::vector<Row>& rows, int ranks, int64_t& wrong_rows,
                          std::string& first_wrong) {
  std::printf("%12s %12s %12s %12s %12s %14s %14s  %s\n", "size", "elements", "time (us)", "algbw (GB/s)",
              "busbw (GB/s)", "b2b time (us)", "b2b busbw", "check");
  nlohmann::json json_rows = nlohmann::json::array();
  for (const Row& r : rows) {
    const double algbw = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
    const double busbw = all_reduce_bus_bandwidth(algbw, ranks);
    const double stream_busbw = all_reduce_bus_bandwidth(
        r.stream_seconds > 0 ? static_cast<double>(r.bytes) / r.stream_seconds / 1e9 : 0.0, ranks);
    std::printf("%12s %12lld %12.2f %12.3f %12.3f %14.2f %14.3f  %s\n", format_bytes(r.bytes).c_str(),
                static_cast<long long>(r.elements), r.seconds * 1e6, algbw, busbw, r.stream_seconds * 1e6,
                stream_busbw, r.wrong == 0 ? "ok" : fmt::format("WRONG ({} elements)", r.wrong).c_str());
    if (r.wrong != 0 && wrong_rows++ == 0) first_wrong = r.first_wrong;
    json_rows.push_back({{"bytes", r.bytes},
                         {"elements", r.elements},
                         {"time_us", r.seconds * 1e6},
                         {"algbw_gbps", algbw},
                         {"busbw_gbps", busbw},
                         {"stream_time_us", r.stream_seconds * 1e6},
                         {"stream_busbw_gbps", stream_busbw},
                         {"wrong_elements", r.wrong},
                         {"correct", r.wrong == 0}});
  }
  std::fflush(stdout);
  return json_rows;
}

}  // namespace

nlohmann::json run_comm_bench(const CommBenchOptions& o) {
  const DType dtype = o.dtype;
  const DeviceKind device = o.device;
  check_comm_bench_options(o, dtype, device);

  LaunchOptions launch_options;
  launch_options.launcher = o.launcher;
  launch_options.device = device;
  launch_options.gpus = o.gpus;
  launch_options.timeout_seconds = o.timeout_seconds;
  launch_options.nccl.symmetric = o.nccl_symmetric;
  auto launch = make_launch(launch_options);
  const CommBenchRanks measured = bench_every_rank(o, dtype, device, *launch);
  if (measured.rows.empty()) return {};  // not rank 0

  std::printf(
      "comm-bench: all_reduce_sum, %d rank(s), %s on %s (%s), %s, %d iterations (median), %d warm-up\n",
      measured.ranks, launch->communicator().c_str(), device_kind_name(device), launch->launcher().c_str(),
      dtype_name(dtype), o.iters, o.warmup);
  std::printf("ranks on %s\n", hosts_summary(measured.places).c_str());
  int64_t wrong_rows = 0;
  std::string first_wrong;
  nlohmann::json json_rows = print_rows(measured.rows, measured.ranks, wrong_rows, first_wrong);
  nlohmann::json result = {{"command", "comm-bench"},
                           {"operation", "all_reduce_sum"},
                           {"ranks", measured.ranks},
                           {"launcher", launch->launcher()},
                           {"communicator", launch->communicator()},
                           {"device", device_kind_name(device)},
                           {"dtype", dtype_name(dtype)},
                           {"iters", o.iters},
                           {"warmup", o.warmup},
                           {"timeout_seconds", o.timeout_seconds},
                           {"nccl_symmetric", o.nccl_symmetric},
                           {"correct", wrong_rows == 0},
                           {"rows", json_rows},
                           {"date", iso_date_utc()},
                           {"system", system_info()}};
  result["system"]["hosts"] = hosts_json(measured.places);
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, result.dump(2) + "\n");
    std::printf("result written to %s\n", o.json_path.c_str());
  }
  DLB_CHECK(wrong_rows == 0, "comm-bench: {} size(s) summed wrongly; first: {}", wrong_rows, first_wrong);
  return result;
}

}  // namespace dlbench::parallel
