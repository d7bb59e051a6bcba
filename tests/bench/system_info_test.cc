// The system table: what `dlbench info` and every result embed, and how it is printed.
#include "bench/system_info.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace dlbench {
namespace {

TEST(SystemInfo, DescribesThisMachine) {
  const nlohmann::json s = system_info();
  EXPECT_FALSE(s["cpu"].get<std::string>().empty());
  EXPECT_GT(s["logical_cores"].get<int>(), 0);
  EXPECT_GT(s["memory_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(s["gpus"].is_array());  // empty where there is no driver
  EXPECT_FALSE(s["git_commit"].get<std::string>().empty());
#ifdef DLBENCH_WITH_CUDA
  EXPECT_TRUE(s["cuda"].contains("cudnn"));
  EXPECT_TRUE(s["cuda"].contains("nccl"));
#endif
}

// The switches and tunings a run was made under travel with its result; the rest of the environment does not.
TEST(SystemInfo, RecordsTheEnvironmentThatChangesARun) {
  setenv("DLBENCH_LOG_LEVEL", "info", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16", 1);
  setenv("DLBENCH_UNRELATED_LOOKING", "x y", 1);
  const nlohmann::json s = system_info();
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  unsetenv("DLBENCH_LOG_LEVEL");
  unsetenv("NCCL_NVLS_ENABLE");
  unsetenv("DLBENCH_UNRELATED_LOOKING");
  ASSERT_TRUE(s["environment"].is_object());
  EXPECT_EQ(s["environment"].value("DLBENCH_LOG_LEVEL", ""), "info");
  EXPECT_EQ(s["environment"].value("NCCL_NVLS_ENABLE", ""), "0");
  EXPECT_EQ(s["environment"].value("CUDA_DEVICE_MAX_CONNECTIONS", ""), "16");
  EXPECT_FALSE(s["environment"].contains("HOME"));
  EXPECT_FALSE(s["environment"].contains("PATH"));
  const std::string table = system_table(s);
  EXPECT_NE(table.find("DLBENCH_LOG_LEVEL=info"), std::string::npos) << table;
  EXPECT_NE(table.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << table;
}

TEST(SystemInfo, TableNamesEveryGpuAndTheLinksBetweenThem) {
  const nlohmann::json s = nlohmann::json::parse(R"({
    "dlbench_version": "0.1.0", "git_commit": "abc123", "hostname": "node1", "os": "Linux 6.8 x86_64",
    "cpu": "Some CPU", "sockets": 2, "physical_cores": 64, "logical_cores": 128, "memory_bytes": 1099511627776,
    "compiler": "g++ 12.2.0", "onednn": "2.7.3", "driver": "580.95",
    "cuda": {"cuda_runtime": "13.0", "cuda_driver": "13.0", "cudnn": "9.19.0", "cublas": "13.1.0", "nccl": "2.28.9"},
    "mpi": "Open MPI v4.1.4",
    "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_bytes": 150754820096, "max_sm_clock_mhz": 1980,
              "max_memory_clock_mhz": 3201, "power_limit_watts": 700.0, "nvlinks_active": 18},
             {"index": 1, "name": "NVIDIA H200", "memory_bytes": 150754820096, "max_sm_clock_mhz": 1980,
              "max_memory_clock_mhz": 3201, "power_limit_watts": 700.0, "nvlinks_active": 18}],
    "gpu_topology": [["X", "NV"], ["NV", "X"]]})");
  const std::string table = system_table(s);
  for (const char* expected :
       {"2 socket(s), 64 cores, 128 threads", "1024.0 GiB", "gpu 0", "gpu 1", "NVIDIA H200, 140 GiB",
        "SM up to 1980 MHz", "power limit 700 W", "18 NVLinks", "GPU0", "NV", "cuDNN 9.19.0", "NCCL 2.28.9",
        "Open MPI v4.1.4", "driver 580.95", "commit abc123"}) {
    EXPECT_NE(table.find(expected), std::string::npos) << expected << " missing from\n" << table;
  }
}

}  // namespace
}  // namespace dlbench
