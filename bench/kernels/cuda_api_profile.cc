// Where a process's threads spend their time inside the CUDA driver, without nsys: a CUPTI injection
// library. Loaded by the driver at cuInit when CUDA_INJECTION64_PATH names it:
//
//   CUDA_INJECTION64_PATH=$PWD/libcuda_api_profile.so dlbench train ...
//
// It times every driver API call on every thread (the runtime's calls, cuBLAS's, cuDNN's and nvJPEG's
// all end in driver calls) and, at exit, prints per thread (its name from pthread_setname_np): the calls
// that took the most time in all, with count, total and largest, and the kernels the thread launched.
// A library call that is slow because it waits for the GPU shows here as the synchronising driver call it
// makes (cuStreamSynchronize, cuEventSynchronize, cuMemcpy...), on the thread that made it; each driver
// call is also attributed to the library entry point the program called that made it (the outermost
// frame outside the program, e.g. nvjpegDecodeBatched), and the streams a thread's launches, copies and
// event records went to are listed with their priorities.
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <sys/auxv.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct CallStats {
  const char* name = nullptr;
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t max_ns = 0;
};

struct StreamUse {
  uint64_t count = 0;
  int priority = 0;
};

struct ThreadStats {
  std::string name;
  std::vector<CallStats> calls;             // by driver callback id
  std::map<std::string, uint64_t> kernels;  // launched kernel -> count
  std::map<std::string, CallStats> via;     // "driver call <- library entry point" -> time
  std::map<CUstream, StreamUse> streams;    // where launches, async copies and event records went
  uint64_t total_ns = 0;
  int depth = 0;  // nested driver calls are counted once, at the outermost
};

std::mutex registry_mutex;
std::vector<std::unique_ptr<ThreadStats>>* registry = nullptr;
std::chrono::steady_clock::time_point started;
void* program_base = nullptr;  // where the executable is mapped: frames there are the program's own

// The library entry point the program called on the way to this driver call: the outermost stack frame
// outside the program (its exported symbol), or "" when the program called the driver itself (the CUDA
// runtime is linked statically into it).
std::string library_entry() {
  void* frames[64];
  const int n = backtrace(frames, 64);
  std::string entry;
  for (int i = 2; i < n; ++i) {
    Dl_info info;
    if (!dladdr(frames[i], &info)) continue;
    if (info.dli_fbase == program_base) return entry;
    const std::string file = info.dli_fname ? info.dli_fname : "";
    if (file.find("libcuda.so") != std::string::npos || file.find("libcupti") != std::string::npos ||
        file.find("cuda_api_profile") != std::string::npos)
      continue;  // the driver and this profiler
    entry = info.dli_sname ? info.dli_sname : (file.empty() ? "?" : file);
  }
  return entry;
}

CUstream stream_of(CUpti_CallbackId id, const void* params) {
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      return static_cast<const cuLaunchKernel_params*>(params)->hStream;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
      return static_cast<const cuMemcpyAsync_params*>(params)->hStream;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2:
      return static_cast<const cuMemcpy2DAsync_v2_params*>(params)->hStream;
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
      return static_cast<const cuMemcpyHtoDAsync_v2_params*>(params)->hStream;
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecord:
      return static_cast<const cuEventRecord_params*>(params)->hStream;
    default:
      return reinterpret_cast<CUstream>(-1);
  }
}

ThreadStats& this_thread() {
  thread_local ThreadStats* mine = nullptr;
  if (!mine) {
    auto stats = std::make_unique<ThreadStats>();
    stats->calls.resize(CUPTI_DRIVER_TRACE_CBID_SIZE);
    mine = stats.get();
    std::lock_guard lock(registry_mutex);
    registry->push_back(std::move(stats));
  }
  return *mine;
}

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void CUPTIAPI on_driver_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || id >= CUPTI_DRIVER_TRACE_CBID_SIZE) return;
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  ThreadStats& t = this_thread();
  if (call->callbackSite == CUPTI_API_ENTER) {
    *call->correlationData = now_ns();
    if (t.depth++ == 0 && t.name.empty()) {
      char name[32] = {};
      pthread_getname_np(pthread_self(), name, sizeof name);
      t.name = name;
    }
    if (call->symbolName &&
        (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx))
      ++t.kernels[call->symbolName];
    if (t.depth == 1) {
      const CUstream stream = stream_of(id, call->functionParams);
      if (stream != reinterpret_cast<CUstream>(-1)) {
        auto [use, fresh] = t.streams.try_emplace(stream);
        if (fresh) cuStreamGetPriority(stream, &use->second.priority);  // nested: not counted
        ++use->second.count;
      }
    }
    return;
  }
  const uint64_t ns = now_ns() - *call->correlationData;
  CallStats& s = t.calls[id];
  s.name = call->functionName;
  ++s.count;
  s.total_ns += ns;
  s.max_ns = std::max(s.max_ns, ns);
  if (--t.depth == 0) {
    t.total_ns += ns;
    if (ns > 20'000) {  // attribute the calls that took time (a backtrace costs microseconds)
      const std::string entry = library_entry();
      std::string what = call->functionName;
      if (id == CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2)  // a free of nothing still costs what it waits for
        what += static_cast<const cuMemFree_v2_params*>(call->functionParams)->dptr ? "(pointer)" : "(null)";
      CallStats& v = t.via[what + " <- " + (entry.empty() ? "(program)" : entry)];
      ++v.count;
      v.total_ns += ns;
      v.max_ns = std::max(v.max_ns, ns);
    }
  }
}

void report() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::lock_guard lock(registry_mutex);
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(
        stderr, "cuda_api_profile: %zu threads, %.1f s since cuInit; threads with > 20 ms in driver calls:\n",
        registry->size(), wall_s);
    for (size_t i = 0; i < registry->size(); ++i) {
      ThreadStats& t = *(*registry)[i];
      if (t.total_ns < 20'000'000) continue;
      std::fprintf(stderr, "thread %zu '%s': %.3f s in driver calls\n", i, t.name.c_str(), t.total_ns * 1e-9);
      std::vector<CallStats> calls;
      for (const CallStats& s : t.calls)
        if (s.count) calls.push_back(s);
      std::sort(calls.begin(), calls.end(), [](auto& a, auto& b) { return a.total_ns > b.total_ns; });
      for (size_t k = 0; k < calls.size() && k < 12; ++k)
        std::fprintf(stderr, "  %-36s %9llu calls %10.3f ms total %9.3f ms max %8.1f us mean\n",
                     calls[k].name, (unsigned long long)calls[k].count, calls[k].total_ns * 1e-6,
                     calls[k].max_ns * 1e-6, calls[k].total_ns * 1e-3 / double(calls[k].count));
      std::vector<std::pair<std::string, CallStats>> via(t.via.begin(), t.via.end());
      std::sort(via.begin(), via.end(),
                [](auto& a, auto& b) { return a.second.total_ns > b.second.total_ns; });
      for (size_t k = 0; k < via.size() && k < 10; ++k)
        std::fprintf(stderr, "  > 20 us: %-60s %7llu calls %10.3f ms total\n", via[k].first.c_str(),
                     (unsigned long long)via[k].second.count, via[k].second.total_ns * 1e-6);
      for (auto& [stream, use] : t.streams)
        std::fprintf(stderr, "  stream %p priority %d: %llu launches, async copies and event records\n",
                     static_cast<void*>(stream), use.priority, (unsigned long long)use.count);
      std::vector<std::pair<uint64_t, std::string>> kernels;
      for (auto& [name, count] : t.kernels) kernels.emplace_back(count, name);
      std::sort(kernels.rbegin(), kernels.rend());
      for (size_t k = 0; k < kernels.size() && k < 8; ++k)
        std::fprintf(stderr, "  kernel %9llu x %.100s\n", (unsigned long long)kernels[k].first,
                     kernels[k].second.c_str());
    }
  });
}

}  // namespace

extern "C" int InitializeInjection() {
  registry = new std::vector<std::unique_ptr<ThreadStats>>();
  Dl_info program;
  if (dladdr(reinterpret_cast<void*>(getauxval(AT_PHDR)), &program)) program_base = program.dli_fbase;
  started = std::chrono::steady_clock::now();
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, on_driver_call, nullptr) != CUPTI_SUCCESS ||
      cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cuda_api_profile: CUPTI refused the subscription; no profile\n");
    return 0;
  }
  std::atexit(report);
  return 1;
}

// A process that ends without running atexit handlers (quick_exit) still reports from here.
__attribute__((destructor)) static void report_at_unload() {
  if (registry) report();
}
