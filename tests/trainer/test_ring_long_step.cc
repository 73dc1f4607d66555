// A ring worker alive in a step longer than --timeout (a --straggler's sleep, which stands for
// slow compute and is announced as such) is waited for: the other worker's wait inside the
// collective asks its PeerWatch (trainer/peer_watch.h, common/peer_liveness.h) whether a peer's
// trainer is alive, and goes on while it is. Two workers as threads (InProcComm), --timeout 0.6 s
// (0.4 s left too little margin for a note thread descheduled on a loaded 2-core machine), worker 1
// sleeping 1.3 s in each of 3 steps. Before: rank 0 timed out inside the collective
// ("timeout after 0.6 s in ring step ... waiting for data from rank 1"). A stopped or dead peer is
// still named: test_peer_watch's TellsAWaitInACollectiveWhetherAPeerIsAlive, and, under mpirun
// with SIGSTOP, test_cli_faults' test_stopped_ring_straggler_named.
#include <gtest/gtest.h>

#include <chrono>

#include "train_fixture.h"

namespace starring::testing {
namespace {

TEST(RingLongStep, ALiveStragglerInAStepLongerThanTheTimeoutIsWaitedFor) {
  Config cfg = small_config();
  cfg.sync.backend = "ring";
  cfg.sync.timeout_s = 0.6;
  cfg.train.straggler = "1:1300";
  cfg.train.max_steps = 3;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outs = train_inproc(cfg, 2);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 3.9);  // worker 1's three sleeps
  for (int r = 0; r < 2; ++r) EXPECT_EQ(outs[r].result.steps, 3) << "worker " << r;
  // Worker 0's part of the straggler's steps is wait in its step-time breakdown.
  EXPECT_GE(outs[0].result.wait_s, 3.0);
  EXPECT_LT(outs[1].result.wait_s, 1.0);
}

}  // namespace
}  // namespace starring::testing
