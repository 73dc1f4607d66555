// What each rank of an in-process world gets when it asks for the nccl engine: shared by the
// refusal cases of tests/allreduce (CPU ranks, any build) and tests/gpu (a CPU rank next to a GPU
// one, two ranks on one GPU). Rank r makes its own Device of kind kinds[r] (GPU 0 for "cuda") on
// its own thread, as a rank would, and calls make_nccl_allreducer; the caller checks the lines.
#pragma once
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "common/device.h"
#include "common/error.h"
#include "common/inproc_comm.h"

namespace starring::testing {

struct NcclOutcome {
  bool config_error = false;  // refused with a ConfigError (an engine made, or any other
                              // exception, leaves it false)
  std::string msg;            // the exception's what(), empty when the engine was made
  // A build without NCCL refuses by name on each rank, before any check of the devices.
  bool built_without_nccl() const { return msg.find("built without NCCL") != std::string::npos; }
};

inline std::vector<NcclOutcome> try_nccl_on_inproc_ranks(const std::vector<std::string>& kinds,
                                                         Seconds timeout) {
  const int n = static_cast<int>(kinds.size());
  InProcWorld w(n);
  std::vector<NcclOutcome> out(kinds.size());
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      auto dev = make_device(kinds[r], 1, 0);
      try {
        make_nccl_allreducer(w.comm(r), dev.get(), false, timeout);
      } catch (const ConfigError& e) {
        out[r].config_error = true;
        out[r].msg = e.what();
      } catch (const std::exception& e) {
        out[r].msg = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return out;
}

}  // namespace starring::testing
