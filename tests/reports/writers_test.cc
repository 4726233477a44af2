// The report writers (reports/report.h) on the saved reports of tests/model/saved: the JUnit XML
// and the HTML page are, to the byte, what the harness wrote for them before the report became a
// type (ef06fba's `mwchaos report --format junit,html` on the same runs, in golden/).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reports/report.h"

namespace mw::reports {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("junit and html of each saved report are the pages written before", "[reports]") {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(MW_SAVED_REPORTS)) {
    if (entry.path().extension() != ".json") continue;
    const std::string name = entry.path().stem().string();
    CAPTURE(name);
    ++n;
    const harness::Report rep = harness::reportFromJson(nlohmann::json::parse(slurp(entry.path())));
    const fs::path golden = fs::path(MW_GOLDEN) / name;
    CHECK(junitXml({rep}) == slurp(golden.string() + ".junit.xml"));
    CHECK(html(rep) == slurp(golden.string() + ".html"));
  }
  CHECK(n >= 10);
}

}  // namespace
}  // namespace mw::reports
