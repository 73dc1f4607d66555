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

// `starring train` or `bench` started without mpirun (a job of one process, not -np 1): a note on
// stderr that it moves no data, and how to start N ranks. Printed last, once every check passed:
// by preflight() for train; by `bench` once its harness made its backends (bench_command.cc).
void note_single_process(const Config& cfg, int rank, int size);
// Whether a launcher (mpirun, srun, prterun) started this process as a rank of a job, rather
// than it running alone as an MPI singleton (env's world size, note_single_process).
bool started_by_launcher();

}  // namespace starring
