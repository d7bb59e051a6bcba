// A short description of the machine and the software, embedded in every result file.
#pragma once

#include <nlohmann/json.hpp>

namespace dlbench {

nlohmann::json system_info();
std::string iso_date_utc();  // "2026-11-29T16:14:53Z"

}  // namespace dlbench
