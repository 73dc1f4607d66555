// The census after a collective timeout (common/census.h): every rank that takes part learns
// which ranks did not, and nothing is reported when every rank took part.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/census.h"
#include "common/inproc_comm.h"

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

}  // namespace
}  // namespace starring
