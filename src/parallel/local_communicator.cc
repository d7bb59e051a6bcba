#include "core/status.h"
#include "parallel/communicators.h"
#include "parallel/progress.h"

namespace dlbench::parallel {

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator() : Communicator(std::make_shared<ProgressTracker>(0, 1e9)) {}
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(Tensor& x) override { check_reducible("local all_reduce_sum", x); }
  void wait_all_reduces() override {}
  void broadcast(Tensor& x, int root) override {
    DLB_CHECK(root == 0, "broadcast from rank {} in a run of one rank", root);
  }
  void barrier() override {}
  double sum(double value) override { return value; }
  double max(double value) override { return value; }
  std::vector<std::string> all_gather(const std::string& value) override { return {value}; }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace dlbench::parallel
