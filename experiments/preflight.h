// Phase 1 of `starring` (experiments/main.cc): the checks each rank can make alone, before any
// communication, so that bad input is one line on every rank and an agreed exit 2.
#pragma once

#include "common/config.h"

namespace starring {

// Throws ConfigError for options that mean nothing here (another backend, world size or run
// length), output paths that cannot be written, a missing or corrupt data file, a batch larger
// than a worker's shard, a --fault that would never fire and, on rank 0, a --resume checkpoint
// that is missing, corrupt or does not fit the run (cfg.ckpt.resume is then set to the file
// found: --resume latest resolved). Prints its notes (sizes used other than as given, a warm-up
// as long as the run) on rank 0.
void preflight(Config& cfg, int rank, int size);

}  // namespace starring
