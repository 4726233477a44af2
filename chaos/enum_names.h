// Names for the values of an enum whose values are 0..N-1, from one table: the name of a value and
// the value of a name (the worker configuration's patterns, the scenario's faults, the verdicts).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace mw {

// names[e], or `unknown` for a value outside the table.
template <class E, size_t N>
const char* enumName(const char* const (&names)[N], E e, const char* unknown = "unknown") {
  const auto i = static_cast<size_t>(e);
  return i < N ? names[i] : unknown;
}

// The value whose name is `name`, or nullopt.
template <class E, size_t N>
std::optional<E> enumFromName(const char* const (&names)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace mw
