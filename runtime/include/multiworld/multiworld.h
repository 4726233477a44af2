// The whole public API of libmultiworld.
#pragma once

#include "multiworld/communicator.h"
#include "multiworld/config.h"
#include "multiworld/cuda_stream.h"
#include "multiworld/failpoints.h"
#include "multiworld/gpu.h"
#include "multiworld/status.h"
#include "multiworld/store.h"
#include "multiworld/telemetry.h"
#include "multiworld/tensor.h"
#include "multiworld/work.h"
#include "multiworld/world_manager.h"
