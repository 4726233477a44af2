// libFuzzer target: the host agent protocol's decoder (model/agent_protocol.h) on untrusted
// bytes, as an agent reads its controller's frames and the controller its agents'. Beyond "no
// crash, no sanitizer report, no exception", it checks that what decodes encodes to one line that
// decodes to the same frame (encoding is a fixed point after one round), and that the line
// splitter keeps its bound.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "model/agent_protocol.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mw::agent;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  auto f = decode(bytes);
  if (f.ok()) {
    const std::string line = encode(*f);
    check(!line.empty() && line.back() == '\n');
    check(line.find('\n') == line.size() - 1);
    auto again = decode(std::string_view(line).substr(0, line.size() - 1));
    check(again.ok());
    check(again->id == f->id && again->msg.index() == f->msg.index());
    check(encode(*again) == line);
  }

  // The input as a stream of lines, in two pieces.
  std::string buf(bytes.substr(0, size / 2));
  std::vector<std::string> lines;
  if (takeLines(buf, lines).ok()) {
    buf.append(bytes.substr(size / 2));
    takeLines(buf, lines).ignore();
  }
  for (const auto& l : lines) {
    check(l.find('\n') == std::string::npos);
    decode(l).status().ignore();
  }
  check(buf.find('\n') == std::string::npos);
  return 0;
}
