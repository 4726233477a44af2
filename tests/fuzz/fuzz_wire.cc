// libFuzzer target: the store's frame splitter and payload decoder (store/wire.h) on untrusted
// bytes. Beyond "no crash, no sanitizer report", it checks that decoding is canonical: a payload
// that decodes re-encodes to exactly the same bytes, and a frame stream split by FrameReader
// yields payloads within its bound.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/wire.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mw::store;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // The input as one payload.
  auto m = decodePayload(bytes);
  if (m.ok()) {
    const std::string frame = encodeFrame(*m);
    check(frame.size() == bytes.size() + kFrameHeaderBytes);
    check(std::string_view(frame).substr(kFrameHeaderBytes) == bytes);
  }

  // The input as a stream of frames, fed in two pieces, under a small bound.
  FrameReader reader(1024);
  const size_t cut = size / 2;
  reader.append(bytes.data(), cut);
  std::string payload;
  for (int round = 0; round < 2; ++round) {
    while (true) {
      auto next = reader.next(&payload);
      if (!next.ok() || !*next) break;
      check(!payload.empty() && payload.size() <= 1024);
      (void)decodePayload(payload);
    }
    if (round == 0) reader.append(bytes.data() + cut, size - cut);
  }
  return 0;
}
