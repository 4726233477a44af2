// The Gloo backend: CPU worlds over Gloo's TCP transport, one tcp::Device per world.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "multiworld/store.h"

namespace mw::detail {

struct GlooConfig {
  std::string world;
  int rank = 0;
  int size = 1;
  std::string bind_host = "127.0.0.1";  // local address the world's pairs listen on
  Clock::duration executor_grace = std::chrono::milliseconds(5);  // WorldOptions::executor_grace
};

// Creates the world's device and context and connects the full mesh through `store` (keys under
// "gloo/"). Blocks until every pair is connected or `deadline` passes (kTimeout). `on_error` is
// called from the thread running an operation when it fails in a way that breaks the world.
Result<std::shared_ptr<Backend>> createGlooBackend(const GlooConfig& config, StoreClient& store,
                                                   BackendErrorHandler on_error, Deadline deadline);

}  // namespace mw::detail
