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

// The value of a parsed field. Throws std::runtime_error "<field>: <why>" when it did not parse.
template <class T>
T known(Result<T> r, const std::string& field) {
  if (!r.ok()) throw std::runtime_error(field + ": " + r.status().message());
  return *r;
}

// A time in seconds as the report writes it (milliseconds / 1000), back in milliseconds.
inline Ms msOf(double seconds) { return Ms(std::llround(seconds * 1000)); }

}  // namespace mw::harness::json_fields
