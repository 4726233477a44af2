// libFuzzer target: the scenario loader (harness/scenario.h) on untrusted Lua text, as a CI system
// running scenarios from pull requests meets it. Loading must end with a scenario or with errors
// naming file:line; never a crash, a sanitizer report, a hang past the Lua time budget or memory
// past the Lua cap. The input is written to a file of this process, loaded with small limits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/mw_fuzz_scenario_" + std::to_string(::getpid()) + ".lua";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    std::abort();
  }
  mw::harness::LoadOptions options;
  options.lua.time_budget = std::chrono::milliseconds(200);
  options.lua.memory_bytes = 64u << 20;
  auto result = mw::harness::loadScenario(path, options);
  // Either a scenario or at least one error, each naming the file.
  if (!result.loaded && result.errors.empty()) std::abort();
  for (const auto& e : result.errors) {
    if (e.find(path) == std::string::npos && e.find("mw_fuzz_scenario_") == std::string::npos) {
      std::fprintf(stderr, "error without its file: %s\n", e.c_str());
      std::abort();
    }
  }
  return 0;
}
