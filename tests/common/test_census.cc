// The census after a collective timeout (common/census.h): every rank that takes part learns
// which ranks did not, and nothing is reported when every rank took part; a rank that named the
// silent peer itself (allreduce/progress_waiter.h) still counts as one that took part.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/progress_waiter.h"
#include "common/census.h"
#include "common/inproc_comm.h"
#include "common/peer_liveness.h"

namespace starring {
namespace {

TEST(Census, NamesTheRanksThatDidNotTimeOut) {
  std::vector<std::string> said(4);
  run_ranks(4, [&](Comm& c) {
    if (c.rank() == 1) return;  // silent
    said[c.rank()] = census(c, Seconds(1.0));
  });
  EXPECT_EQ(said[0],
            "; ranks 2 and 3 timed out here too, rank 1 did not (silent, slow or elsewhere)");
  EXPECT_EQ(said[2],
            "; ranks 0 and 3 timed out here too, rank 1 did not (silent, slow or elsewhere)");
  EXPECT_EQ(said[3],
            "; ranks 0 and 2 timed out here too, rank 1 did not (silent, slow or elsewhere)");
}

TEST(Census, TwoQuietRanksAndTwoRanksAlone) {
  std::vector<std::string> said(4);
  run_ranks(4, [&](Comm& c) {
    if (c.rank() == 0 || c.rank() == 2) said[c.rank()] = census(c, Seconds(0.5));
  });
  EXPECT_EQ(said[0],
            "; rank 2 timed out here too, ranks 1 and 3 did not (silent, slow or elsewhere)");
  run_ranks(2, [&](Comm& c) {
    if (c.rank() == 0) said[0] = census(c, Seconds(0.2));
  });
  EXPECT_EQ(said[0], "; rank 1 did not time out here (silent, slow or elsewhere)");
}

TEST(Census, NothingToSayWhenEveryRankTookPartOrAlone) {
  std::vector<std::string> said(3, "unset");
  run_ranks(3, [&](Comm& c) { said[c.rank()] = census(c, Seconds(5.0)); });
  for (const auto& s : said) EXPECT_EQ(s, "");
  run_ranks(1, [&](Comm& c) { said[0] = census(c, Seconds(5.0)); });
  EXPECT_EQ(said[0], "");
}

// A PeerLiveness with one answer: no peer alive, and `why` (a silent peer named, or "").
class Answer : public PeerLiveness {
 public:
  explicit Answer(std::string why) : why_(std::move(why)) {}
  bool peers_alive(std::string* why) override {
    *why = why_;
    return false;
  }

 private:
  std::string why_;
};

// The error of a collective's wait (allreduce/progress_waiter.h) that never progresses.
std::string stuck_wait(Comm& c, PeerLiveness& liveness) {
  ProgressWaiter waiter(c, Seconds(0.05), std::chrono::microseconds(0), 500, &liveness);
  try {
    while (true) waiter.idle([] { return std::string("the test's collective"); });
  } catch (const TimeoutError& e) {
    return e.what();
  }
}

// Rank 2 silent. Rank 1's wait named it itself (its PeerWatch: rank 2's notes stopped), which took
// no census; rank 0's (no peer alive, none silent yet by its count) took one after that. Rank 1
// timed out in the collective as rank 0 did: it is not among the ranks that did not (it was: '...;
// ranks 1 and 2 did not time out here').
TEST(Census, ARankThatNamedASilentPeerItselfTimedOutHereToo) {
  std::vector<std::string> said(3);
  std::atomic<bool> named{false};
  run_ranks(3, [&](Comm& c) {
    if (c.rank() == 2) return;  // silent
    if (c.rank() == 1) {
      Answer silent("rank 2 sent nothing for 0.06 s (stopped, dead or stuck)");
      said[1] = stuck_wait(c, silent);
      named = true;
      return;
    }
    while (!named) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Answer idle("");
    said[0] = stuck_wait(c, idle);
  });
  EXPECT_NE(said[1].find("in the test's collective; rank 2 sent nothing"), std::string::npos)
      << said[1];
  EXPECT_NE(said[0].find("in the test's collective; rank 1 timed out here too, rank 2 did not "
                         "(silent, slow or elsewhere)"),
            std::string::npos)
      << said[0];
}

}  // namespace
}  // namespace starring
