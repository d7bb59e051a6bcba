#include "models/model.h"

#include <fmt/format.h>

#include "core/status.h"
#include "models/gpt.h"
#include "models/resnet.h"

namespace dlbench {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = resnet_model_names();
    all.insert(all.end(), gpt_model_names().begin(), gpt_model_names().end());
    return all;
  }();
  return names;
}

bool is_model_name(const std::string& name) {
  for (const auto& n : model_names())
    if (n == name) return true;
  return false;
}

ModelFamily model_family(const std::string& name) {
  if (is_gpt_model(name)) return ModelFamily::gpt;
  DLB_REQUIRE(is_model_name(name), "unknown model '{}'; choose one of: {}", name,
              fmt::join(model_names(), ", "));
  return ModelFamily::resnet;
}

Model build_model(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                  const ModelOptions& options) {
  if (model_family(name) == ModelFamily::gpt) return build_gpt(name, backend, net_options, options.seq_len);
  return build_resnet(name, backend, net_options, options);
}

}  // namespace dlbench
