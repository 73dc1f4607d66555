// The worker-side PS tests' harness (test_ps_worker_liveness.cc, test_ps_worker_buffers.cc):
// a one-tensor model of kFloats parameters, a worker with a short --timeout (kTimeout, so its
// deadline is kDeadline), a real server on a thread, and a server that acknowledges the start and
// then never replies.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"

namespace starring::ps::worker_harness {

inline constexpr std::size_t kFloats = 8;
inline constexpr Seconds kWait{60.0};  // the test's own waits: only a broken worker reaches them
inline constexpr Seconds kTimeout{0.2};
inline constexpr Seconds kDeadline{0.7};  // kTimeout + the worker's grace (at least 0.5 s)

// The server of these tests, on its own thread: not under test, so its timeout is the test's own
// wait (it never names the worker); what it threw, if anything, lands in `error`.
inline std::thread run_server(std::shared_ptr<Comm> comm, const PsGroup& group,
                              std::string& error) {
  return std::thread([comm = std::move(comm), group, &error] {
    ServerOptions so;
    so.timeout = kWait;
    so.shared_memory = false;
    try {
      ServerLoop(comm, group, so).run();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
}

inline ParamLayout layout() {
  ParamLayout l;
  l.add_at("w", 0, {static_cast<int>(kFloats)});
  l.validate();
  return l;
}

inline PsWorkerOptions worker_options() {
  PsWorkerOptions o;
  o.timeout = kTimeout;
  o.shared_memory = false;
  return o;
}

inline OptimizerConfig sgd() {
  OptimizerConfig o;
  o.type = "sgd";
  return o;
}

// Step 1 of a one-tensor model: parameters all 1, gradient all 0.5, learning rate 0.5.
inline void push_step_1(PsWorker& ps, std::vector<float>& g) {
  ps.begin_step(1, 0.5f);
  g.assign(kFloats, 0.5f);
  ps.tensor_ready(0);
}

// Rank 0's worker (through `comm`) pushes step 1 to a server, rank 1 of `world`, that
// acknowledges the start and then never replies; returns the worker's timeout, after its shutdown.
inline std::string push_to_a_silent_server(InProcWorld& world, std::shared_ptr<Comm> comm) {
  const PsGroup group = make_ps_group("1", 2);
  std::vector<float> p(kFloats, 1.0f), g(kFloats, 0.0f);
  std::string error;
  {
    PsWorker ps(std::move(comm), group, worker_options());
    std::thread server([&] {  // acknowledges the start, then never replies
      PsHeader h;
      h.op = Op::kAck;
      world.comm(1)->send(&h, sizeof(h), 0, kCtlTag, kWait);
    });
    try {
      ps.start(layout(), {p.data(), g.data(), false, nullptr}, sgd());
      push_step_1(ps, g);
      ps.wait_params(0);
    } catch (const TimeoutError& e) {
      error = e.what();
    }
    server.join();
    try {
      ps.shutdown();
    } catch (const std::exception&) {
    }
  }
  return error;
}

}  // namespace starring::ps::worker_harness
