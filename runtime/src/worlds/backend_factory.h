// The one place that knows every backend: the worlds layer builds a world's backend through it and
// never includes a backend's own headers.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "multiworld/store.h"
#include "multiworld/world_manager.h"

namespace mw::detail {

// OK when world `o`'s backend can run in this process; kUnavailable naming what is missing (an
// NCCL world without NCCL, the CUDA runtime, a driver or the GPU). Starts nothing.
Status checkBackendAvailable(const WorldOptions& o);

// Creates world `o`'s backend, connecting its members through `store` until `deadline`.
// `bind_host`: the local address this host uses to reach the store (CPU worlds listen there).
// `on_error` is called from the backend's threads when the world fails.
Result<std::shared_ptr<Backend>> createBackend(const WorldOptions& o, const std::string& bind_host,
                                               StoreClient& store, BackendErrorHandler on_error,
                                               Deadline deadline);

}  // namespace mw::detail
