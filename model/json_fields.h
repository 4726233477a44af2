// Reading the report's JSON (model/report.h): a field that must be there, a parsed value, a time.
// Private to the codec's files.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "model/scenario.h"
#include "multiworld/status.h"

namespace mw::harness::json_fields {

// `j[key]`. Throws std::runtime_error "<where>: missing field '<key>'" when `j` is no object or
// has no such key.
inline const nlohmann::json& need(const nlohmann::json& j, const char* key,
                                  const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw std::runtime_error(where + ": missing field '" + key + "'");
  }
  return j.at(key);
}

// `j[key]`, an array of `n` entries. Throws std::runtime_error "<where>: field '<key>' ..." when it
// is missing, not an array, or of another length (a series' columns all have one entry per window).
inline const nlohmann::json& column(const nlohmann::json& j, const char* key, size_t n,
                                    const std::string& where) {
  const nlohmann::json& c = need(j, key, where);
  if (!c.is_array() || c.size() != n) {
    throw std::runtime_error(where + ": field '" + key + "' is not an array of " +
                             std::to_string(n) + " numbers (one per entry of t_s)");
  }
  return c;
}

// The value of a parsed field. Throws std::runtime_error "<field>: <why>" when it did not parse.
template <class T>
T known(Result<T> r, const std::string& field) {
  if (!r.ok()) throw std::runtime_error(field + ": " + r.status().message());
  return *r;
}

// A time in seconds as the report writes it (milliseconds / 1000), back in milliseconds.
inline Ms msOf(double seconds) { return Ms(std::llround(seconds * 1000)); }

}  // namespace mw::harness::json_fields
