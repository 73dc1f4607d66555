// Checkpoint files: round trip, every kind of damage reported as one ConfigError naming the file
// (truncated, a flipped byte, wrong magic, wrong version, a model that does not fit), atomic
// writes and rotation, "latest" resolution (pointer, fallback
// past a damaged newest file, *.tmp leftovers of a killed run ignored and cleaned up), and the
// options.
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

#include "common/config.h"
#include "common/error.h"
#include "common/fault.h"
#include "tests/scratch_dir.h"
#include "trainer/checkpoint.h"

namespace starring {
namespace {
namespace fs = std::filesystem;

// A checkpoint whose every value is a closed-form function of its index.
CheckpointData sample(std::int64_t step, std::size_t n = 1000, bool adamw = true) {
  CheckpointData c;
  c.meta = {{"widths", {8, 6, 4}}, {"optimizer", {{"type", adamw ? "adamw" : "sgd"}}}};
  c.step = step;
  c.epoch = 3;
  c.next_batch = 7;
  c.epoch_loss_sum = 1.25;
  c.epoch_steps = 7;
  for (std::size_t i = 0; i < n; ++i) {
    c.params.push_back(0.001f * static_cast<float>(i) - 0.3f);
    c.state1.push_back(1e-4f * static_cast<float>(i % 97));
    if (adamw) c.state2.push_back(1e-6f * static_cast<float>(i % 13));
  }
  return c;
}

std::string fresh_dir(const std::string& name) { return testing::scratch_dir("ckpt_" + name); }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Expects read_checkpoint(path) to throw ConfigError whose message holds every `parts`.
void expect_bad(const std::string& path, std::initializer_list<const char*> parts) {
  try {
    read_checkpoint(path, "rank 0");
    ADD_FAILURE() << "no error for " << path;
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(CheckpointFile, RoundTripKeepsEveryValueAndThePosition) {
  for (bool adamw : {true, false}) {
    const CheckpointData c = sample(42, 1000, adamw);
    const CheckpointData d = decode_checkpoint(encode_checkpoint(c), "mem", "rank 0");
    EXPECT_EQ(d.step, 42);
    EXPECT_EQ(d.epoch, 3);
    EXPECT_EQ(d.next_batch, 7);
    EXPECT_EQ(d.epoch_loss_sum, 1.25);
    EXPECT_EQ(d.epoch_steps, 7);
    EXPECT_EQ(d.params, c.params);
    EXPECT_EQ(d.state1, c.state1);
    EXPECT_EQ(d.state2, c.state2);
    EXPECT_EQ(d.meta["widths"], c.meta["widths"]);
    EXPECT_EQ(d.meta["format"], "starring.checkpoint");
  }
}

// The job so far (a resumed run's summary covers every leg) comes back bit for bit.
TEST(CheckpointFile, RoundTripKeepsTheJobSoFar) {
  CheckpointData c = sample(42);
  c.legs = 3;
  c.train_s = 12.345678901234567;
  c.leg_train_s = {1.0 / 3, 2.0 / 7, 12.345678901234567 - 1.0 / 3 - 2.0 / 7};
  c.worker0_train_s = 11.0 / 9;
  c.history = {{1, 0.1 / 3, 2.0 / 3, 0.8125, 0.5 / 7, 16}, {2, 1e-17, 1.0 / 3, 0.875, 3.0, 32}};
  const CheckpointData d = decode_checkpoint(encode_checkpoint(c), "mem", "rank 0");
  EXPECT_EQ(d.legs, 3);
  EXPECT_EQ(d.train_s, c.train_s);
  EXPECT_EQ(d.leg_train_s, c.leg_train_s);
  EXPECT_EQ(d.worker0_train_s, c.worker0_train_s);
  ASSERT_EQ(d.history.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const EpochRecord &a = c.history[i], &b = d.history[i];
    EXPECT_EQ(b.epoch, a.epoch);
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.wall_s, a.wall_s);
    EXPECT_EQ(b.train_loss, a.train_loss);
    EXPECT_EQ(b.test_accuracy, a.test_accuracy);
    EXPECT_EQ(b.test_loss, a.test_loss);
  }
}

// A run whose loss stopped being finite (diverged) still writes its checkpoints, and JSON has no
// NaN or infinity: the metadata holds null for the epoch's loss sum and the evaluations' losses.
// Those read back as NaN, so the file resumes as it was written (the resumed run then says it
// diverged, as the uninterrupted one did); it was refused as 'bad metadata: ... type must be
// number, but is null', which --resume latest took for a damaged file.
TEST(CheckpointFile, ADivergedRunsNonFiniteLossesReadBackAsNaN) {
  CheckpointData c = sample(42);
  c.epoch_loss_sum = std::numeric_limits<double>::quiet_NaN();
  c.history = {{1, 0.5, std::numeric_limits<double>::infinity(), 0.09375,
                std::numeric_limits<double>::quiet_NaN(), 16}};
  const CheckpointData d = decode_checkpoint(encode_checkpoint(c), "mem", "rank 0");
  EXPECT_TRUE(std::isnan(d.epoch_loss_sum));
  ASSERT_EQ(d.history.size(), 1u);
  EXPECT_TRUE(std::isnan(d.history[0].train_loss));
  EXPECT_TRUE(std::isnan(d.history[0].test_loss));
  EXPECT_EQ(d.history[0].test_accuracy, 0.09375);
  EXPECT_EQ(d.history[0].wall_s, 0.5);
  EXPECT_EQ(d.params, c.params);
}

// The bytes of `good` with its metadata replaced by `meta` (lengths and CRC made right again): a
// file as another build wrote it.
std::string with_meta(const std::string& good, const nlohmann::json& meta) {
  std::uint64_t len = 0;
  std::memcpy(&len, good.data() + 16, sizeof len);
  const std::string text = meta.dump();
  const std::uint64_t n = text.size();
  std::string out = good.substr(0, 16);
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += text;
  out += good.substr(24 + len, good.size() - 24 - len - 4);
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<z_size_t>(out.size())));
  out.append(reinterpret_cast<const char*>(&crc), sizeof crc);
  return out;
}

// A file of a build before the job was recorded (no legs, train_s, history) still loads, with
// the job unknown (legs 0), and one before its runs' and worker 0's times were (no leg_train_s,
// worker0_train_s) with them unknown and worker 0's clock its train_s (worker 0's then); a
// history entry that is not one is bad metadata, named as such.
TEST(CheckpointFile, AFileWithoutTheJobLoadsAndABadHistoryIsRejected) {
  CheckpointData between = sample(5);  // a build that recorded the job, not per run or worker 0
  between.legs = 2;
  between.train_s = 0.75;
  const std::string good = encode_checkpoint(between);
  nlohmann::json meta = decode_checkpoint(good, "mem", "rank 0").meta;
  for (const char* k : {"leg_train_s", "worker0_train_s"}) ASSERT_EQ(meta.erase(k), 1u) << k;
  const CheckpointData mid = decode_checkpoint(with_meta(good, meta), "mid.ckpt", "rank 0");
  EXPECT_EQ(mid.legs, 2);
  EXPECT_TRUE(mid.leg_train_s.empty());
  EXPECT_EQ(mid.worker0_train_s, 0.75);  // its train_s was worker 0's
  for (const char* k : {"legs", "train_s", "history"}) ASSERT_EQ(meta.erase(k), 1u) << k;
  const CheckpointData old = decode_checkpoint(with_meta(good, meta), "old.ckpt", "rank 0");
  EXPECT_EQ(old.step, 5);
  EXPECT_EQ(old.legs, 0);
  EXPECT_EQ(old.train_s, 0);
  EXPECT_EQ(old.worker0_train_s, 0);
  EXPECT_TRUE(old.history.empty());
  EXPECT_EQ(old.params, sample(5).params);

  const std::string dir = fresh_dir("bad_history");
  for (const nlohmann::json& h :
       {nlohmann::json::array({{{"epoch", "one"}}}), nlohmann::json("none"),
        nlohmann::json::array({{{"epoch", 1}, {"wall_s", 1.0}}})}) {
    meta["history"] = h;
    spit(dir + "/h.ckpt", with_meta(good, meta));
    expect_bad(dir + "/h.ckpt", {"bad metadata"});
  }
}

TEST(CheckpointFile, DamageIsOneClearErrorNamingTheFile) {
  const std::string dir = fresh_dir("damage");
  const std::string good = encode_checkpoint(sample(5));
  const std::string path = dir + "/x.ckpt";

  for (std::size_t keep : {good.size() - 1, good.size() / 2, std::size_t{30}, std::size_t{10},
                           std::size_t{3}, std::size_t{0}}) {
    spit(path, good.substr(0, keep));
    expect_bad(path, {"truncated"});
  }
  for (std::size_t at : {std::size_t{30}, good.size() / 2, good.size() - 5, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    spit(path, bad);
    expect_bad(path, {"corrupt"});
  }
  std::string magic = good;
  magic[0] = 'X';
  spit(path, magic);
  expect_bad(path, {"wrong magic"});
  std::string version = good;
  version[8] = 9;
  spit(path, version);
  expect_bad(path, {"format version 9"});
  spit(path, good + "extra");
  expect_bad(path, {"truncated or corrupt"});
  expect_bad(dir + "/missing.ckpt", {"cannot open"});
  expect_bad(dir, {"is a folder", "--resume latest --checkpoint-dir"});
}

TEST(CheckpointFile, AModelThatDoesNotFitIsRejected) {
  const CheckpointData c = sample(5, 1000, true);
  EXPECT_NO_THROW(check_checkpoint_fits(c, {8, 6, 4}, 1000, "adamw", "f.ckpt", "rank 1"));
  auto message = [&](std::vector<int> widths, std::size_t n, const std::string& opt) {
    try {
      check_checkpoint_fits(c, widths, n, opt, "f.ckpt", "rank 1");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({8, 7, 4}, 1000, "adamw")
                .find("rank 1: checkpoint f.ckpt does not fit this "
                      "run: model widths 8,6,4 in the checkpoint, "
                      "8,7,4 in this run"),
            std::string::npos);
  EXPECT_NE(message({8, 6, 4}, 999, "adamw").find("1000 parameters in the checkpoint"),
            std::string::npos);
  EXPECT_NE(message({8, 6, 4}, 1000, "sgd").find("optimizer 'adamw' in the checkpoint"),
            std::string::npos);
  // A position no run writes (a file edited and its CRC recomputed) is refused, not resumed at.
  for (int field = 0; field < 3; ++field) {
    CheckpointData odd = c;
    if (field == 0) odd.step = -1;
    if (field == 1) odd.epoch = -1;
    if (field == 2) odd.next_batch = -1;
    try {
      check_checkpoint_fits(odd, {8, 6, 4}, 1000, "adamw", "f.ckpt", "rank 1");
      ADD_FAILURE() << "no error for a negative position, field " << field;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1: checkpoint f.ckpt does not fit this run: "
                                           "negative position"),
                std::string::npos)
          << e.what();
    }
  }
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointDir, KeepsTheNewestAndPointsLatestAtIt) {
  CheckpointConfig k;
  k.dir = fresh_dir("rotate");
  k.keep = 2;
  for (std::int64_t s : {10, 20, 30, 40}) save_checkpoint(k, sample(s), "rank 0");
  EXPECT_EQ(names_in(k.dir), (std::vector<std::string>{checkpoint_file_name(30),
                                                       checkpoint_file_name(40), "latest"}));
  EXPECT_EQ(slurp(k.dir + "/latest"), checkpoint_file_name(40) + "\n");
  k.resume = "latest";
  std::string path;
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 40);
  EXPECT_EQ(path, k.dir + "/" + checkpoint_file_name(40));
}

// A run killed while writing leaves a *.tmp beside the previous good checkpoint: resume ignores
// it, a later save removes it once its writer is known to be gone (here: untouched for two hours;
// the rest of that rule: test_checkpoint_tmp.cc). A damaged newest file (pointer included) falls
// back to an older.
TEST(CheckpointDir, KilledMidWriteLeavesThePreviousGoodCheckpoint) {
  CheckpointConfig k;
  k.dir = fresh_dir("killed");
  k.keep = 3;
  k.resume = "latest";
  save_checkpoint(k, sample(10), "rank 0");
  const std::string half = encode_checkpoint(sample(20));
  spit(k.dir + "/" + checkpoint_file_name(20) + ".tmp", half.substr(0, half.size() / 3));
  spit(k.dir + "/latest.tmp", "ckpt-");
  for (const char* left : {"/latest.tmp", "/ckpt-0000000020.ckpt.tmp"})
    fs::last_write_time(k.dir + left, fs::file_time_type::clock::now() - std::chrono::hours(2));
  std::string path;
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 10);

  save_checkpoint(k, sample(30), "rank 0");
  EXPECT_EQ(names_in(k.dir), (std::vector<std::string>{checkpoint_file_name(10),
                                                       checkpoint_file_name(30), "latest"}));
  // The newest is damaged after the fact: "latest" still resumes, from the older good one.
  const std::string newest = k.dir + "/" + checkpoint_file_name(30);
  std::string bytes = slurp(newest);
  spit(newest, bytes.substr(0, bytes.size() - 100));
  ::testing::internal::CaptureStderr();
  const std::int64_t resumed_at = load_resume(k, "rank 0", path).step;
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(resumed_at, 10);
  EXPECT_EQ(path, k.dir + "/" + checkpoint_file_name(10));
  // ... and says so, naming the damaged file and the one it resumes from instead (a silent
  // fallback lost the newest checkpoint's steps without a word).
  EXPECT_NE(said.find("rank 0: checkpoint " + newest + ": truncated or corrupt"), std::string::npos)
      << said;
  EXPECT_NE(said.find("; resuming from " + path + " instead"), std::string::npos) << said;
  // Naming the damaged file itself is an error.
  k.resume = newest;
  EXPECT_THROW(load_resume(k, "rank 0", path), ConfigError);
}

// A SIGTERM (mpirun stopping the job) while a file is being written under its temporary name
// (helper-91 saw an empty s.json.tmp left by a rank killed in write_json_atomically): the
// interrupt's watcher removes the temporary file before anything else, and the process still
// ends by the signal.
TEST(CheckpointDirDeathTest, AnInterruptRemovesTheFileBeingWritten) {
  // the child re-executes the test binary: a fork of this multi-threaded process may not start
  // the interrupt's watcher thread (ThreadSanitizer refuses it); the child, another process,
  // takes this process's file name from the environment (its own scratch folder is another)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* given = std::getenv("STARRING_TEST_DEATH_TMP");
  const std::string tmp = given ? given : fresh_dir("interrupted") + "/s.json.tmp";
  ::setenv("STARRING_TEST_DEATH_TMP", tmp.c_str(), 0);
  EXPECT_EXIT(
      {
        announce_interrupts(false, 0, "");
        std::ofstream(tmp) << "{ half";
        track_temporary_file(tmp, true);
        std::raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(20));  // the watcher ends the process
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_FALSE(fs::exists(tmp));
  // without the tracking the same file stays (the test sees what it claims to)
  EXPECT_EXIT(
      {
        announce_interrupts(false, 0, "");
        std::ofstream(tmp) << "{ half";
        std::raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(20));
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_TRUE(fs::exists(tmp));
  ::unsetenv("STARRING_TEST_DEATH_TMP");
}

TEST(CheckpointDir, LatestWithNothingThereIsAClearError) {
  CheckpointConfig k;
  k.dir = fresh_dir("empty");
  k.resume = "latest";
  std::string path;
  try {
    load_resume(k, "rank 0", path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no valid checkpoint in " + k.dir), std::string::npos)
        << e.what();
  }
  // --resume auto on the same folder is a fresh run, even with a 'latest' whose checkpoint was
  // deleted by hand; once a (damaged) checkpoint is there, auto refuses like latest.
  k.resume = "auto";
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 0);
  spit(k.dir + "/latest", checkpoint_file_name(12) + "\n");
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 0);
  EXPECT_TRUE(path.empty()) << path;
  spit(k.dir + "/" + checkpoint_file_name(7), "not a checkpoint, but long enough for a header");
  for (const char* mode : {"latest", "auto"}) {
    k.resume = mode;
    try {
      load_resume(k, "rank 0", path);
      ADD_FAILURE() << "no error with --resume " << mode;
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("wrong magic"), std::string::npos) << msg;
      // the rank once: 'rank 0: --resume latest: no valid checkpoint in DIR (newest: checkpoint
      // DIR/ckpt-...: ...)', not '(newest: rank 0: checkpoint ...)'
      EXPECT_EQ(msg.find("rank 0", 1), std::string::npos) << msg;
      EXPECT_NE(msg.find("(newest: checkpoint " + k.dir), std::string::npos) << msg;
    }
  }
}

TEST(CheckpointMetrics, KeepsTheLinesUpToTheStep) {
  const std::string dir = fresh_dir("metrics");
  const std::string file = dir + "/m.jsonl";
  std::string text;
  for (int s = 1; s <= 6; ++s) text += "{\"step\":" + std::to_string(s) + ",\"loss\":1.0}\n";
  text += "{\"event\":\"eval\",\"epoch\":1}\n{\"step\":7,\"loss\":1.0}\n{\"st";  // cut by a kill
  spit(file + ".partial", text);  // the run did not finish: only the .partial exists
  auto lines = metrics_lines_before(file, 4);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines.back(), "{\"step\":4,\"loss\":1.0}");
  EXPECT_EQ(metrics_lines_before(file, 6).size(), 7u);  // the eval line after step 6 stays
  EXPECT_EQ(metrics_lines_before(file, 100).size(), 8u);
  EXPECT_TRUE(metrics_lines_before(dir + "/none.jsonl", 3).empty());
}

TEST(CheckpointOptions, ParsedCheckedAndSettableFromIni) {
  const std::string dir = fresh_dir("options");
  Config cfg;
  const char* argv[] = {"train", "--checkpoint-dir",   "/tmp/x", "--checkpoint-every",
                        "25",    "--keep-checkpoints", "3",      "--resume",
                        "latest"};
  ASSERT_TRUE(parse_config("train", 9, argv, cfg, nullptr));
  EXPECT_EQ(cfg.ckpt.dir, "/tmp/x");
  EXPECT_EQ(cfg.ckpt.every, 25);
  EXPECT_EQ(cfg.ckpt.keep, 3);
  EXPECT_EQ(cfg.ckpt.resume, "latest");

  spit(dir + "/run.ini", "[checkpoint]\ncheckpoint-dir = " + dir + "\ncheckpoint-every = 7\n");
  const std::string ini = dir + "/run.ini";
  const char* argv2[] = {"train", "--config", ini.c_str()};
  Config c2;
  ASSERT_TRUE(parse_config("train", 3, argv2, c2, nullptr));
  EXPECT_EQ(c2.ckpt.dir, dir);
  EXPECT_EQ(c2.ckpt.every, 7);
  EXPECT_EQ(c2.ckpt.keep, 2);

  auto bad = [](std::vector<const char*> args) {
    Config c;
    args.insert(args.begin(), "train");
    EXPECT_THROW(parse_config("train", static_cast<int>(args.size()), args.data(), c, nullptr),
                 ConfigError);
  };
  bad({"--checkpoint-every", "5"});  // where to?
  bad({"--resume", "latest"});       // where from?
  bad({"--checkpoint-dir", "/tmp/x", "--keep-checkpoints", "0"});
  bad({"--checkpoint-dir", "/tmp/x", "--checkpoint-every", "-1"});
}

}  // namespace
}  // namespace starring
