// Names the calling thread (up to 15 characters, as Linux keeps them) so that debuggers, `top -H` and
// profiles (bench/kernels/cuda_api_profile.cc) tell dlbench's threads apart.
#pragma once

#include <pthread.h>

#include <string>

namespace dlbench {

inline void name_this_thread(const std::string& name) {
  (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace dlbench
