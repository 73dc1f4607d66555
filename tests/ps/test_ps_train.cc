// Asynchronous consistency still trains: 4 workers and 1 server (in-process ranks) on
// Fashion-MNIST for 2 epochs under asp and under ssp (staleness 2). Bound: test accuracy >= 0.80
// (chance is 0.10; bsp reaches about 0.86 in the same 2 epochs). The ssp run must also keep its
// staleness record within the bound.
// Momentum is 0.5, not the default 0.9: asynchrony itself acts as momentum (Mitliagkas et al.,
// "Asynchrony begets momentum", 2016), and with 0.9 on top, stale updates overshoot. Measured
// here under mpirun (-np 5, 2 epochs): momentum 0.9 gives asp 0.68 / ssp(2) 0.78 against bsp
// 0.86; momentum 0.5 gives asp 0.84 / ssp(2) 0.84.
#include <gtest/gtest.h>

#include <filesystem>

#include "../trainer/train_fixture.h"

namespace starring {
namespace {

Config fmnist_config(const std::string& consistency) {
  Config cfg;
  cfg.command = "train";
  cfg.data.dataset = "fashion-mnist";
  cfg.train.epochs = 2;
  cfg.train.batch = 64;
  cfg.train.lr = 0.05f;
  cfg.train.lr_scale = "sqrt";
  cfg.train.lr_schedule = "cosine";
  cfg.train.opt.momentum = 0.5f;
  cfg.train.eval_each_epoch = false;
  cfg.out.progress = "off";
  cfg.sync.backend = "ps";
  cfg.sync.servers = "1";
  cfg.sync.consistency = consistency;
  cfg.sync.staleness = 2;
  cfg.sync.timeout_s = 60;
  return cfg;
}

class PsTrains : public ::testing::TestWithParam<std::string> {};

TEST_P(PsTrains, FashionMnistAccuracyAboveBound) {
  if (!std::filesystem::exists(DataConfig{}.data_dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh)";
  auto outs = testing::train_inproc(fmnist_config(GetParam()), 5);
  EXPECT_EQ(outs[4].role, "server");
  const double acc = outs[0].result.test_accuracy;
  std::printf("[ps %s] 4 workers, 2 epochs: test accuracy %.4f\n", GetParam().c_str(), acc);
  EXPECT_GE(acc, 0.80);
  // A record there (the loop below passed over a missing one), none beyond the bound.
  const nlohmann::json hist = outs[4].backend_stats.value("staleness_hist", nlohmann::json());
  ASSERT_TRUE(hist.is_object() && !hist.empty()) << outs[4].backend_stats.dump();
  if (GetParam() == "ssp")
    for (const auto& [k, v] : hist.items()) EXPECT_LE(std::stol(k), 2);
}

INSTANTIATE_TEST_SUITE_P(Consistency, PsTrains, ::testing::Values("asp", "ssp"));

}  // namespace
}  // namespace starring
