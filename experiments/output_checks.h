// Checks of a run's outputs, made on each rank before any communication (ConfigError naming the
// option): experiments/output_checks.cc.
#pragma once

#include <string>

#include "common/config.h"

namespace starring {

// `path` (an output file; empty: none) can be created: its folder exists and is writable, and an
// existing `path` is a plain file (outputs are renamed over it).
void check_output(const char* option, const std::string& path);
// --checkpoint-dir can be created (or written) when the first checkpoint is due.
void check_checkpoint_dir_writable(const std::string& dir);
// A fresh run (no --resume), or one resumed from a checkpoint outside the folder, refuses a folder
// that holds checkpoints (another run's).
void check_checkpoint_dir(const CheckpointConfig& ck);
// No two outputs on one path, where the one renamed last silently replaced the other
// (--metrics-file and --summary-file the same, one --trace without '%r' for several of the `size`
// ranks, rank 0's metrics or summary on another rank's trace: --summary-file t.1.json --trace
// t.%r.json), and no output on one of the run's inputs (--summary-file run.ini --config run.ini).
void check_distinct_outputs(const Config& cfg, int size);

}  // namespace starring
