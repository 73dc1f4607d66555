// Shared by the ring/mpi/nccl trainer backends and their bench adapters.
#pragma once
#include <memory>
#include <string>

#include "allreduce/allreducer.h"
#include "common/config.h"

namespace starring {

class Device;

// The engine named "ring", "ring-p2p", "mpi" or "nccl" over `comm`, configured from cfg.sync
// (segment size, compression, timeout, NCCL ring). mpi_mode kBlocking means "called like a
// blocking collective, nothing else runs meanwhile" (the bench): MPI_Allreduce itself, and a
// ring that polls without yielding while ranks <= cores. ConfigError for bad combinations.
std::unique_ptr<Allreducer> make_allreducer(const std::string& name, std::shared_ptr<Comm> comm,
                                            const SyncConfig& s, Device* device, MpiMode mpi_mode);

}  // namespace starring
