// The all-reduce backends for the trainer and the bench: every rank is a worker.
//   ring - the project's ring all-reduce (host buffers; --compress fp16|bf16): over a shared-
//          memory window when all ranks share a node (float32), else over the Comm;
//   ring-p2p - the same ring always over the Comm (MPI point-to-point), for comparison;
//   mpi  - Open MPI's all-reduce (MPI_Iallreduce in the trainer so waits time out; the bench
//          calls MPI_Allreduce itself, the vendor baseline);
//   nccl - ncclAllReduce on GPU buffers (needs a CUDA device and a build with NCCL).
#include "experiments/register_ring.h"

#include <algorithm>
#include <thread>

#include "allreduce/bucket_sync.h"
#include "allreduce/private_comm.h"
#include "common/error.h"
#include "experiments/backend_registry.h"

namespace starring {

std::unique_ptr<Allreducer> make_allreducer(const std::string& name, std::shared_ptr<Comm> comm,
                                            const SyncConfig& s, Device* device, MpiMode mpi_mode) {
  const Seconds timeout(s.timeout_s);
  if (name == "ring" || name == "ring-p2p") {
    RingOptions o;
    o.shared_memory = name == "ring";  // ring-p2p: always over MPI point-to-point
    o.segment_bytes = s.segment_bytes;
    o.wire = parse_wire_type(s.compress);
    o.timeout = timeout;
    // Called like a blocking collective (the bench): poll without yielding while every rank has
    // a core of its own, as MPI_Allreduce does. The trainer's communication thread yields at
    // once, since it shares its process's cores with the compute thread.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    if (mpi_mode == MpiMode::kBlocking && static_cast<unsigned>(comm->size()) <= cores)
      o.spin_us = 200000;
    return make_ring_allreducer(std::move(comm), o);
  }
  STARRING_CONFIG_CHECK(s.compress == "none", "--compress ", s.compress,
                        " is implemented by the ring backend only (backend '", name,
                        "' reduces in float32 on the wire)");
  if (name == "mpi") return make_mpi_allreducer(std::move(comm), mpi_mode, timeout);
  if (name == "nccl")
    return make_nccl_allreducer(std::move(comm), device, s.nccl_force_ring, timeout);
  throw ConfigError("unknown all-reduce engine '" + name + "'");
}

namespace {

Backend make_backend(const std::string& name, const BackendContext& ctx) {
  Backend b;
  b.workers = ctx.world;
  b.worker_index = ctx.world->rank();
  b.num_workers = ctx.world->size();
  auto comm = private_comm(ctx.world);
  comm->set_timeout(Seconds(ctx.cfg.sync.timeout_s));
  auto engine = make_allreducer(name, comm, ctx.cfg.sync, ctx.device, MpiMode::kNonBlocking);
  b.sync = std::make_unique<BucketSync>(name, comm, std::move(engine), ctx.cfg.sync, ctx.trace);
  return b;
}

const BackendRegistrar kRing("ring",
                             [](const BackendContext& c) { return make_backend("ring", c); });
const BackendRegistrar kRingP2p("ring-p2p", [](const BackendContext& c) {
  return make_backend("ring-p2p", c);
});
const BackendRegistrar kMpi("mpi", [](const BackendContext& c) { return make_backend("mpi", c); });
const BackendRegistrar kNccl("nccl",
                             [](const BackendContext& c) { return make_backend("nccl", c); });

}  // namespace
}  // namespace starring
