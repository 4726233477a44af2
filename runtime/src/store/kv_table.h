// KvTable: the store server's keys and the waiters parked on missing keys.
//
// Waiters are opaque ids (the server's connection ids). A waiter is parked under every key it still
// misses; setting a key unparks everyone parked under it and returns their ids, and the server then
// decides whether each waiter is complete or must be parked again (a key can be deleted after it
// was set).
//
// Thread rules: not thread-safe; the server's loop thread owns it.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "multiworld/status.h"

namespace mw::store {

class KvTable {
 public:
  // The value of `key`, or nullptr. The pointer is valid until the next change.
  const std::string* find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
  }

  bool allExist(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [this](const std::string& k) { return kv_.count(k) > 0; });
  }

  // Stores `value` and returns the ids parked under `key`, which are no longer parked there.
  std::vector<uint64_t> set(const std::string& key, std::string value) {
    kv_[key] = std::move(value);
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return {};
    std::vector<uint64_t> ids = std::move(it->second);
    waiters_.erase(it);
    return ids;
  }

  // Returns whether `key` existed.
  bool remove(const std::string& key) { return kv_.erase(key) > 0; }

  // The value ADD would store: the decimal integer at `key` (absent counts as 0) plus `delta`.
  // kInvalidUsage when the value is not a decimal integer or the sum overflows.
  Result<int64_t> sum(const std::string& key, int64_t delta) const {
    int64_t current = 0;
    if (const std::string* text = find(key)) {
      const char* end = text->data() + text->size();
      auto [ptr, ec] = std::from_chars(text->data(), end, current);
      if (text->empty() || ec != std::errc() || ptr != end) {
        return Status(Code::kInvalidUsage, "value of key '" + key + "' is not a decimal integer");
      }
    }
    int64_t next = 0;
    if (__builtin_add_overflow(current, delta, &next)) {
      return Status(Code::kInvalidUsage,
                    "adding " + std::to_string(delta) + " to key '" + key + "' overflows");
    }
    return next;
  }

  // Parks `id` under each of `keys` that is missing (at most once per key).
  void park(uint64_t id, const std::vector<std::string>& keys) {
    for (const auto& key : keys) {
      if (kv_.count(key)) continue;
      auto& ids = waiters_[key];
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }

  // Removes `id` from wherever it is parked under `keys`.
  void unpark(uint64_t id, const std::vector<std::string>& keys) {
    for (const auto& key : keys) {
      auto it = waiters_.find(key);
      if (it == waiters_.end()) continue;
      std::erase(it->second, id);
      if (it->second.empty()) waiters_.erase(it);
    }
  }

 private:
  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // key -> parked ids
};

}  // namespace mw::store
