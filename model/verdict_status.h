// What an expectation came to: the status of a verdict (model/expectations.h), shared by the
// throughput judge (model/throughput.h) and the report codec.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mw::harness {

// error: the run could not be judged (a fault not delivered, the harness failed); skipped: this
// machine cannot judge it; inconclusive: the evidence cannot tell pass from fail.
enum class VerdictStatus : uint8_t { kPass, kFail, kInconclusive, kError, kSkipped };

// "pass", "fail", "inconclusive", "error", "skipped". Pure.
const char* verdictStatusName(VerdictStatus s);
// The status verdictStatusName printed as `name`, or nullopt. Pure.
std::optional<VerdictStatus> parseVerdictStatus(std::string_view name);

}  // namespace mw::harness
