// The `starring` sub-commands. Each lives in its own file (experiments/<name>_command.cc) and
// receives the MPI world as a Comm plus the parsed Config; it returns the process exit code.
#pragma once
#include <memory>

#include "common/comm.h"
#include "common/config.h"

namespace starring {

// `starring train` stopped early on a stop request (SIGUSR1, a preemption notice) after writing a
// checkpoint: EX_TEMPFAIL, "try again later" - resume with --resume latest. experiments/main.cc
// gives every rank the job's highest code, so mpirun exits with it (when a rank failed: the failed
// ranks' highest code, never 75).
inline constexpr int kStoppedExit = 75;

int run_train(Config& cfg, std::shared_ptr<Comm> world);        // train_command.cc
int run_bench(Config& cfg, std::shared_ptr<Comm> world);        // bench_command.cc
int run_env(Config& cfg, std::shared_ptr<Comm> world);          // env_command.cc
int run_bench_model(Config& cfg, std::shared_ptr<Comm> world);  // bench_model_command.cc

// The commit the binary was built from (git rev-parse --short=12, read at every build by
// cmake/git_commit.cmake, "+dirty" when tracked files differed from it; "unknown" outside git):
// `starring --version`, `starring env`, a run summary's "git".  env_command.cc
const char* build_commit();

}  // namespace starring
