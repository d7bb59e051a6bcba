// dlbench command-line interface (being built: train | bench come with the engine core).
#include <cstdio>

int main() {
  std::printf("dlbench %s\n", DLBENCH_VERSION);
  return 0;
}
