// starring: train | bench | bench-model | env. See README.md.
//
// Errors: every failure is an exception caught here and printed as ONE line,
//   [starring] rank R: error: <what failed>
// followed by a non-zero exit. A flag error is the same on every rank, so only rank 0 prints it
// and all ranks exit 2. Any other error may hit one rank only while the others wait for it, so
// that rank aborts the whole job (MPI_Abort), which makes mpirun stop every rank.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "common/mpi_comm.h"
#include "experiments/commands.h"

namespace {

using starring::Comm;
using starring::Config;
using Command = int (*)(Config&, std::shared_ptr<Comm>);

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table{
      {"train", starring::run_train},
      {"bench", starring::run_bench},
      {"bench-model", starring::run_bench_model},
      {"env", starring::run_env},
  };
  return table;
}

void usage(FILE* to) {
  std::fprintf(to,
               "usage: starring <command> [options]   (starring <command> --help for options)\n"
               "  train        train the model with a gradient-sync backend (--backend)\n"
               "  bench        nccl-tests-style bandwidth benchmark of the sync backends\n"
               "  bench-model  single-worker compute throughput (samples/s, GEMM FLOP/s)\n"
               "  env          what this machine offers: MPI, ranks and hosts, GPUs, NCCL, BLAS\n"
               "launch several ranks with scripts/mpirun.sh -np N build/bin/starring ...\n");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    if (rank == 0) usage(argc < 2 ? stderr : stdout);
    MPI_Finalize();
    return argc < 2 ? 2 : 0;
  }
  auto it = commands().find(argv[1]);
  if (it == commands().end()) {
    if (rank == 0) {
      std::fprintf(stderr, "[starring] error: unknown command '%s'\n", argv[1]);
      usage(stderr);
    }
    MPI_Finalize();
    return 2;
  }

  Config cfg;
  try {
    if (!starring::parse_config(argv[1], argc - 1, argv + 1, cfg,
                                rank == 0 ? &std::cout : nullptr)) {  // --help
      MPI_Finalize();
      return 0;
    }
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "[starring] error: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }

  try {
    if (provided < MPI_THREAD_MULTIPLE)
      throw starring::Error("the MPI library does not provide MPI_THREAD_MULTIPLE");
    auto world = std::make_shared<starring::MpiComm>(MPI_COMM_WORLD);
    int rc = it->second(cfg, world);
    world.reset();
    MPI_Finalize();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[starring] rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return 1;
  }
}
