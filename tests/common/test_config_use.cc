// check_train_options_apply (common/config_use.cc): a `starring train` option set away from its
// default that the run would ignore is refused with one line naming the option; the same option
// where it applies, and every default, passes. Found by a pairwise run of train's options
// (helper-34): each of these trained to exit 0 with the option silently unused, and a
// --straggler on a dedicated server's rank ended in MPI_Abort with a line per worker.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "tests/common/config_test_util.h"
#include "tests/scratch_dir.h"

namespace starring {
namespace {

using test::config_error;
using test::parse;

Config parse_train(std::vector<std::string> args) { return parse("train", std::move(args)); }

// The ConfigError of checking `args` on `workers` workers, or "" when they apply.
std::string refusal(std::vector<std::string> args, int workers = 2) {
  const Config cfg = parse_train(std::move(args));
  return config_error([&] { check_train_options_apply(cfg, workers); });
}

TEST(ConfigUse, IgnoredOptionsAreRefusedNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--backend", "ps", "--staleness", "5"}, "--staleness 5"},  // bsp
      {{"--backend", "ps", "--consistency", "asp", "--staleness", "0"}, "--staleness 0"},
      {{"--backend", "ring", "--servers", "2"}, "--servers 2"},
      {{"--backend", "ring", "--ps-partition", "tensor"}, "--ps-partition tensor"},
      {{"--backend", "mpi", "--ps-chunk-bytes", "64"}, "--ps-chunk-bytes 64"},
      {{"--backend", "local", "--ps-shared-memory", "off"}, "--ps-shared-memory off"},
      {{"--backend", "ps", "--segment-bytes", "64K"}, "--segment-bytes 64K"},
      {{"--backend", "mpi", "--segment-bytes", "64K"}, "--segment-bytes 64K"},
      {{"--backend", "ring", "--nccl-force-ring"}, "--nccl-force-ring"},
      {{"--backend", "local", "--bucket-mb", "1"}, "--bucket-mb 1"},
      {{"--backend", "local", "--overlap", "off"}, "--overlap off"},
      {{"--optimizer", "adamw", "--momentum", "0.5"}, "--momentum 0.5"},
      {{"--optimizer", "sgd", "--beta1", "0.5"}, "--beta1 0.5"},
      {{"--beta2", "0.9"}, "--beta2 0.9"},
      {{"--eps", "1e-06"}, "--eps"},
      {{"--warmup-steps", "10"}, "--warmup-steps 10"},  // --lr-scale none
      {{"--keep-checkpoints", "5"}, "--keep-checkpoints 5"},
      {{"--metrics-loss", "worker0"}, "--metrics-loss worker0"},  // no --metrics-file
      {{"--synthetic-train", "100"}, "--synthetic-train 100"},    // fashion-mnist
      {{"--dataset", "mnist", "--data-dir", "/srv/mnist", "--synthetic-dim", "8"},
       "--synthetic-dim 8"},
      {{"--dataset", "synthetic", "--data-dir", "/tmp"}, "--data-dir /tmp"},
      {{"--backend", "ring", "--straggler", "2:5"}, "--straggler 2:5"},
  };
  for (const auto& [args, option] : cases) {
    const std::string msg = refusal(args);
    EXPECT_EQ(msg.rfind(option, 0), 0u)
        << args[1] << " " << args.back() << " gave: '" << msg << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // A dedicated server's rank is not a worker's: said so.
  EXPECT_NE(refusal({"--backend", "ps", "--servers", "1", "--straggler", "2:5"})
                .find("dedicated servers are not workers"),
            std::string::npos);
}

TEST(ConfigUse, OptionsWhereTheyApplyPass) {
  const std::vector<std::vector<std::string>> fine = {
      {},
      {"--backend", "ps", "--consistency", "ssp", "--staleness", "5"},
      {"--backend", "ps", "--servers", "colocated", "--ps-partition", "tensor", "--ps-chunk-bytes",
       "64", "--ps-shared-memory", "off", "--bucket-mb", "1", "--overlap", "off"},
      {"--backend", "ring", "--segment-bytes", "64K", "--compress", "fp16"},
      {"--backend", "ring-p2p", "--segment-bytes", "64K"},
      {"--backend", "nccl", "--nccl-force-ring"},
      {"--optimizer", "adamw", "--beta1", "0.8", "--beta2", "0.99", "--eps", "1e-06"},
      {"--optimizer", "sgd", "--momentum", "0.5"},
      {"--lr-scale", "sqrt", "--warmup-steps", "10"},
      {"--checkpoint-dir", "/tmp/x", "--keep-checkpoints", "5"},
      {"--metrics-file", "/tmp/m.jsonl", "--metrics-loss", "worker0"},
      {"--dataset", "synthetic", "--synthetic-train", "100", "--synthetic-dim", "8"},
      {"--data-dir", "/tmp"},
      {"--backend", "ring", "--straggler", "1:5"},
      {"--backend", "ring", "--straggler", "any:5"},
      // the defaults given explicitly are not told apart from the defaults
      {"--backend", "ring", "--servers", "1", "--staleness", "2"},
  };
  for (const auto& args : fine) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(refusal(args), "") << shown;
  }
  // One worker: the lr scale does not change the rate, yet a warm-up set with it is accepted
  // (an experiment file serves every worker count: experiments/fmnist_mlp.ini).
  EXPECT_EQ(refusal({"--lr-scale", "linear", "--warmup-steps", "100"}, 1), "");
}

// The same options set in the --config file are notes, not errors: an INI serves several
// backends, and a command line switches what it set up (the shipped fmnist_mlp.ini sets
// warmup-steps 100 for --lr-scale linear; `--lr-scale none` on top of it must still train).
TEST(ConfigUse, OptionsFromTheConfigFileThatDoNotApplyAreNotes) {
  // A folder of this process's own: a fixed /tmp/config_use.ini left by another user's run (root's
  // CI) could not be rewritten by a normal user, the write failed silently and the test read the
  // other run's last file ("straggler = 5:10").
  const std::string ini = testing::scratch_dir("config_use") + "/config_use.ini";
  {
    std::ofstream f(ini);
    f << "[train]\nlr-scale = linear\nwarmup-steps = 100\nstaleness = 3\n"
         "[sync]\nservers = 2\n";
    ASSERT_TRUE(f.flush()) << "could not write " << ini;
  }
  const Config cfg = parse_train({"--config", ini, "--lr-scale", "none", "--backend", "ring"});
  std::vector<std::string> notes;
  ASSERT_NO_THROW(notes = check_train_options_apply(cfg, 2));
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_EQ(notes[0].rfind(ini + " sets staleness 3, which this run does not use: ", 0), 0u)
      << notes[0];
  EXPECT_NE(notes[1].find("sets servers 2"), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find("sets warmup-steps 100"), std::string::npos) << notes[2];
  // The command line's own still refuses, the INI's value overridden or not.
  EXPECT_EQ(refusal({"--config", ini, "--backend", "ring", "--staleness", "4"})
                .rfind("--staleness 4: ", 0),
            0u);
  // A --straggler on no worker's rank fails training wherever it was set.
  {
    std::ofstream f(ini);
    f << "straggler = 5:10\n";
    ASSERT_TRUE(f.flush()) << "could not write " << ini;
  }
  EXPECT_EQ(refusal({"--config", ini, "--backend", "ring"}).rfind("--straggler 5:10: ", 0), 0u);
}

// Under asp/ssp a server steps the optimizer once per push: momentum 0.9 diverged where bsp
// trained (docs/REFERENCE.md), so the run goes on with a note; bsp, one worker, a low momentum
// and adamw get none.
TEST(ConfigUse, AsyncPushesWithHighMomentumGetANote) {
  const auto notes = [](std::vector<std::string> args, int workers) {
    return check_train_options_apply(parse_train(std::move(args)), workers);
  };
  const std::vector<std::string> asp = {"--backend", "ps", "--consistency", "asp"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = asp;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const auto n = notes(with({"--momentum", "0.9"}), 2);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].rfind("--consistency asp with --momentum 0.9: each of the 2 workers' pushes", 0),
            0u)
      << n[0];
  EXPECT_EQ(notes({"--backend", "ps", "--consistency", "ssp", "--momentum", "0.9"}, 4).size(), 1u);
  EXPECT_TRUE(notes(with({"--momentum", "0.9"}), 1).empty());
  EXPECT_TRUE(notes(with({"--momentum", "0.5"}), 4).empty());
  EXPECT_TRUE(notes(with({"--optimizer", "adamw"}), 4).empty());
  EXPECT_TRUE(notes({"--backend", "ps", "--momentum", "0.9"}, 4).empty());
}

// check_bench_options_apply: the same rule for `starring bench`. It accepted every sync option
// and ran without it: `bench --backends ps --consistency asp` timed bsp push-pulls, --overlap off
// and --bucket-mb outside --mode overlap, and --servers beside --backends ring, changed nothing.
std::string bench_refusal(std::vector<std::string> args) {
  const Config cfg = parse("bench", std::move(args));
  return config_error([&] { check_bench_options_apply(cfg); });
}

TEST(ConfigUse, BenchRefusesOptionsItWouldNotUse) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--overlap", "off"}, "--overlap off: only --mode overlap"},
      {{"--backends", "ps", "--bucket-mb", "1"}, "--bucket-mb 1: only --mode overlap"},
      {{"--compute", "busy"}, "--compute busy: "},
      {{"--backends", "ps", "--consistency", "asp"}, "--consistency asp: "},
      {{"--backends", "ps", "--consistency", "ssp", "--staleness", "3"}, "--consistency ssp: "},
      {{"--backends", "ps", "--staleness", "3"}, "--staleness 3: "},
      {{"--mode", "overlap", "--backends", "ring", "--consistency", "asp"}, "--consistency asp: "},
      {{"--backends", "ring,mpi", "--servers", "2"}, "--servers 2: "},
      {{"--backends", "ps-colocated", "--servers", "2"}, "--servers 2: "},
      {{"--backends", "ring", "--ps-partition", "tensor"}, "--ps-partition tensor: "},
      {{"--backends", "mpi", "--ps-chunk-bytes", "64K"}, "--ps-chunk-bytes 64K: "},
      {{"--ps-shared-memory", "off"}, "--ps-shared-memory off: "},  // ring by default
      {{"--backends", "mpi,ps", "--segment-bytes", "64K"}, "--segment-bytes 64K: "},
      {{"--backends", "ring", "--nccl-force-ring"}, "--nccl-force-ring: "},
      {{"--backend", "ps", "--backends", "ring"}, "--backend ps: "},
  };
  for (const auto& [args, said] : cases) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const std::string msg = bench_refusal(args);
    EXPECT_EQ(msg.rfind(said, 0), 0u) << shown << "gave: '" << msg << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  const std::vector<std::vector<std::string>> fine = {
      {},
      {"--backend", "ps", "--servers", "2", "--ps-partition", "tensor"},  // --backend alone
      {"--servers", "1", "--backends", "ps,ps-colocated@2,ring@2", "--ps-chunk-bytes", "64K"},
      {"--backends", "ring-p2p,ps-colocated", "--segment-bytes", "100", "--ps-chunk-bytes", "6"},
      {"--backends", "ps-colocated", "--ps-shared-memory", "off"},
      {"--backends", "nccl", "--nccl-force-ring"},
      {"--mode", "overlap", "--backends", "ring,mpi-nothread", "--compute", "serial", "--bucket-mb",
       "1", "--overlap", "off"},
      {"--mode", "overlap", "--backends", "ps", "--consistency", "ssp", "--staleness", "3"},
      // the defaults given explicitly are not told apart from the defaults
      {"--backends", "ring", "--servers", "1", "--staleness", "2", "--overlap", "on"},
  };
  for (const auto& args : fine) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(bench_refusal(args), "") << shown;
  }
}

// size_notes: a size the code cuts into whole units is accepted (as nccl-tests and BytePS accept
// theirs) and noted once, with what is used and the nearest valid values; a size it uses as given,
// or an option of a backend the command does not run, gives no note.

TEST(SizeNotes, ARoundedSizeIsNotedWithWhatIsUsedAndTheNearestValidValues) {
  using Notes = std::vector<std::string>;
  EXPECT_EQ(size_notes(parse("train", {"--backend", "ps", "--ps-chunk-bytes", "1000001"})),
            Notes{"--ps-chunk-bytes 1000001 is used as 1000000 bytes: a chunk holds whole float32 "
                  "values; the nearest valid values are 1000000 and 1000004"});
  EXPECT_EQ(size_notes(parse("train", {"--backend", "ring-p2p", "--segment-bytes", "1000001"})),
            Notes{"--segment-bytes 1000001 is used as 1000000 bytes: the ring cuts its segments in "
                  "whole blocks of 16 floats; the nearest valid values are 1000000 and 1000064"});
  // backend 'ring' on one host: the shared-memory ring's slots, in the same one line
  const Notes ring =
      size_notes(parse("train", {"--backend", "ring", "--segment-bytes", "1000001"}));
  ASSERT_EQ(ring.size(), 1u);
  EXPECT_EQ(ring[0].rfind("--segment-bytes 1000001 is used as 1000000 bytes: ", 0), 0u) << ring[0];
  EXPECT_NE(ring[0].find("; with every rank on one host, backend 'ring' runs over shared memory, "
                         "whose segments are 4K to 256K: 256K there"),
            std::string::npos)
      << ring[0];
  EXPECT_EQ(size_notes(parse("train", {"--backend", "ring", "--segment-bytes", "1K"})),
            Notes{"--segment-bytes 1K: with every rank on one host, backend 'ring' runs over "
                  "shared memory, whose segments are 4K to 256K: 4K there ('ring-p2p' takes the "
                  "value as given)"});
  // bench: its messages are whole floats; the backends it runs decide the rest
  EXPECT_EQ(size_notes(parse("bench", {"-b", "1000001", "-e", "4M"})),
            Notes{"-b/--min-bytes 1000001 is used as 1000000 bytes: messages are whole float32 "
                  "elements, so every row's size is rounded down to a multiple of 4 (the size "
                  "column shows the bytes sent); the nearest valid values are 1000000 and "
                  "1000004"});
  const Notes both =
      size_notes(parse("bench", {"--backends", "ring-p2p,ps-colocated", "--segment-bytes", "100",
                                 "--ps-chunk-bytes", "6"}));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].rfind("--segment-bytes 100 is used as 64 bytes", 0), 0u) << both[0];
  EXPECT_EQ(both[1].rfind("--ps-chunk-bytes 6 is used as 4 bytes", 0), 0u) << both[1];
}

TEST(SizeNotes, SizesUsedAsGivenGiveNoNote) {
  for (const auto& [command, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"train", {"--backend", "ring"}},  // the default 1M: no note unless set
           {"train", {"--backend", "ring", "--segment-bytes", "64K"}},
           {"train", {"--backend", "ring-p2p", "--segment-bytes", "1K"}},
           {"train", {"--backend", "ring", "--segment-bytes", "1K", "--compress", "fp16"}},
           {"train", {"--backend", "ps", "--ps-chunk-bytes", "1000000"}},
           {"train", {"--backend", "ring", "--bucket-mb", "0.3"}},  // a cap on whole tensors
           {"bench", {"-b", "1000000", "-e", "1000001"}},           // -e only bounds b * f^k
           {"bench", {"--backends", "mpi", "--segment-bytes", "100", "--ps-chunk-bytes", "6"}},
           {"env", {}}}) {
    EXPECT_EQ(size_notes(parse(command, args)), std::vector<std::string>{})
        << command << " " << ::testing::PrintToString(args);
  }
}

}  // namespace
}  // namespace starring
