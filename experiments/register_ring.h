// Shared by the ring/mpi/nccl trainer backends and their bench adapters.
#pragma once
#include <memory>
#include <string>

#include "allreduce/allreducer.h"
#include "common/config.h"

namespace starring {

class Device;

// The engine named "ring", "mpi" or "nccl" over `comm`, configured from cfg.sync
// (segment size, compression, timeout, NCCL ring). ConfigError for bad combinations.
std::unique_ptr<Allreducer> make_allreducer(const std::string& name, std::shared_ptr<Comm> comm,
                                            const SyncConfig& s, Device* device, MpiMode mpi_mode);

}  // namespace starring
