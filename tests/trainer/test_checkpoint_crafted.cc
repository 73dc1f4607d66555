// Crafted checkpoints: files whose format and CRC are valid (written by this build, then a field
// of the metadata edited and the CRC recomputed, as a hand edit or another tool's bug would) but
// whose values no run writes: a negative, fractional, textual or out-of-range count; a position
// beyond an epoch of the run, or one that does not add up to its step; an epoch's step count that
// does not match its position; a world size or --lr-scale basis that does not divide the global
// batch; a sampler input (seed, data set, sample count, global batch) of the wrong type; a
// parameter count that does not match the parameters; layer widths or an optimizer of the wrong
// type. Each is refused with one ConfigError naming the file, the field and the rank
// (read_checkpoint, then check_checkpoint_fits and check_resume_fits_run, as --resume does): never
// a crash, an exception of the JSON library, or a resume at a wrong position (before: an epoch of
// 2^40 was cut to an int, 0; a next_batch past the epoch resumed at the next epoch; lr_workers
// 2^40 + 3 scaled the rate for 3 workers; a textual global batch escaped as a JSON type_error).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "tests/scratch_dir.h"
#include "trainer/checkpoint.h"

namespace starring {
namespace {
using nlohmann::json;

// The run the checkpoints are checked against: 2 workers x --batch 16, 512 training samples, so
// an epoch has 512 / 32 = 16 optimizer steps.
constexpr int kWorkers = 2;
constexpr std::int64_t kSamples = 512;
const std::vector<int> kWidths{8, 6, 4};
constexpr std::size_t kParams = 8 * 6 + 6 + 6 * 4 + 4;

Config run_config(int batch = 16) {
  Config cfg;
  cfg.data.dataset = "synthetic";
  cfg.train.batch = batch;
  cfg.train.accum = 1;
  cfg.train.seed = 42;
  cfg.train.opt.type = "adamw";
  return cfg;
}

// A checkpoint this run writes after step 20: epoch 1 (0-based), 4 of its 16 steps done.
CheckpointData good() {
  CheckpointData c;
  c.meta = checkpoint_meta(run_config(), kWidths, kParams, "ring", kWorkers, kSamples);
  c.meta["lr_workers"] = kWorkers;
  c.step = 20;
  c.epoch = 1;
  c.next_batch = 4;
  c.epoch_loss_sum = 4.5;
  c.epoch_steps = 4;
  c.legs = 1;
  c.train_s = 2.5;
  c.leg_train_s = {2.5};
  c.worker0_train_s = 2.25;
  c.history = {{1, 1.5, 0.9, 0.6, 0.8, 16}};
  for (std::size_t i = 0; i < kParams; ++i) {
    c.params.push_back(0.01f * static_cast<float>(i));
    c.state1.push_back(1e-3f * static_cast<float>(i));
    c.state2.push_back(1e-5f * static_cast<float>(i));
  }
  return c;
}

// `bytes` with its metadata edited by `patch` and the CRC recomputed: every check of the format
// still passes.
std::string patched(const std::string& bytes, const std::function<void(json&)>& patch) {
  std::uint64_t meta_len = 0;
  std::memcpy(&meta_len, bytes.data() + 16, 8);
  json meta = json::parse(bytes.substr(24, meta_len));
  patch(meta);
  const std::string text = meta.dump();
  std::string out = bytes.substr(0, 16);
  const std::uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += text;
  out += bytes.substr(24 + meta_len, bytes.size() - 24 - meta_len - 4);
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<z_size_t>(out.size())));
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out;
}

// What --resume makes of the file: "" when it is taken, else the error (its kind too when it is
// not the ConfigError of bad input).
std::string verdict(const std::string& bytes, const Config& cfg = run_config(),
                    int workers = kWorkers) {
  const std::string path = testing::scratch_dir("ckpt_crafted") + "/ckpt-0000000020.ckpt";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    const CheckpointData c = read_checkpoint(path, "rank 0");
    check_checkpoint_fits(c, kWidths, kParams, "adamw", path, "rank 0");
    check_resume_fits_run(c, cfg, workers, kSamples, path, "rank 0");
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a ConfigError: ") + e.what();
  }
}

struct Crafted {
  const char* field;  // named in the error
  std::function<void(json&)> patch;
};

void expect_refused(const std::vector<Crafted>& cases) {
  const std::string path = testing::scratch_dir("ckpt_crafted") + "/ckpt-0000000020.ckpt";
  const std::string base = encode_checkpoint(good());
  for (const Crafted& k : cases) {
    const std::string msg = verdict(patched(base, k.patch));
    const json shown = [&] {
      json m = json::object();
      k.patch(m);
      return m;
    }();
    SCOPED_TRACE(std::string(k.field) + " <- " + shown.dump());
    if (msg.empty()) {
      ADD_FAILURE() << "taken";
      continue;
    }
    EXPECT_EQ(msg.find("not a ConfigError"), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("rank 0: checkpoint " + path, 0), 0u) << msg;
    EXPECT_NE(msg.find(k.field), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
  }
}

TEST(CraftedCheckpoint, TheOneThisRunWritesIsTaken) {
  EXPECT_EQ(verdict(encode_checkpoint(good())), "");
  // at an epoch's end (the finished epoch's steps), and 16 steps into one (an older build's
  // way of writing an epoch's end)
  CheckpointData c = good();
  c.step = 32, c.epoch = 2, c.next_batch = 0, c.epoch_steps = 16;
  EXPECT_EQ(verdict(encode_checkpoint(c)), "");
  c.epoch = 1, c.next_batch = 16;
  EXPECT_EQ(verdict(encode_checkpoint(c)), "");
  // on 1 worker x 32 (the same global batch)
  EXPECT_EQ(verdict(encode_checkpoint(good()), run_config(32), 1), "");
  // a file of an older build, without the fields added since
  EXPECT_EQ(
      verdict(patched(encode_checkpoint(good()),
                      [](json& m) {
                        for (const char* f : {"lr_workers", "workers", "train_samples", "legs",
                                              "train_s", "leg_train_s", "worker0_train_s",
                                              "history", "batch", "accum", "num_params"})
                          m.erase(f);
                      })),
      "");
}

TEST(CraftedCheckpoint, ACountThatIsNotOneIsRefused) {
  const auto big = std::int64_t{1} << 40;
  expect_refused({
      {"step", [](json& m) { m["step"] = -1; }},
      {"step", [](json& m) { m["step"] = "20"; }},
      {"step", [](json& m) { m["step"] = 20.5; }},
      {"step", [](json& m) { m["step"] = 1e30; }},
      {"step", [](json& m) { m["step"] = std::numeric_limits<std::uint64_t>::max(); }},
      {"step", [](json& m) { m["step"] = nullptr; }},
      {"epoch", [](json& m) { m["epoch"] = -1; }},
      {"epoch", [big](json& m) { m["epoch"] = big; }},  // was cut to an int: 0
      {"next_batch", [](json& m) { m["next_batch"] = -4; }},
      {"next_batch", [](json& m) { m["next_batch"] = true; }},
      {"epoch_steps", [](json& m) { m["epoch_steps"] = -1; }},
      {"epoch_steps", [big](json& m) { m["epoch_steps"] = big; }},
      {"legs", [](json& m) { m["legs"] = -2; }},
      {"train_s", [](json& m) { m["train_s"] = -1.0; }},
      {"worker0_train_s", [](json& m) { m["worker0_train_s"] = "x"; }},
      {"leg_train_s",
       [](json& m) {
         m["leg_train_s"] = {2.5, -1.0};
       }},
      {"history", [](json& m) { m["history"][0]["step"] = 999; }},  // after the checkpoint
      {"history", [](json& m) { m["history"][0]["epoch"] = -1; }},
      {"history", [](json& m) { m["history"][0]["wall_s"] = -3.0; }},
  });
}

TEST(CraftedCheckpoint, APositionThatIsNotInThisRunsEpochsIsRefused) {
  expect_refused({
      // beyond an epoch of 16 steps (with a step that adds up): resumed at the next epoch
      {"next_batch", [](json& m) { m["next_batch"] = 17, m["epoch_steps"] = 17, m["step"] = 33; }},
      {"next_batch",
       [](json& m) { m["next_batch"] = 1000, m["epoch_steps"] = 1000, m["step"] = 1016; }},
      // a step that is not epoch x 16 + next_batch
      {"step", [](json& m) { m["step"] = 21; }},
      {"step", [](json& m) { m["step"] = std::int64_t{1} << 62; }},
      {"step", [](json& m) { m["epoch"] = 1000; }},
      {"step", [](json& m) { m["next_batch"] = 5; }},
      {"step", [](json& m) { m["epoch"] = 2147483647; }},  // epoch x 16 past 2^31
      // the epoch's step count against its position
      {"epoch_steps", [](json& m) { m["epoch_steps"] = 3; }},
      {"epoch_steps", [](json& m) { m["epoch_steps"] = 17; }},
      {"epoch_steps",
       [](json& m) { m["step"] = 32, m["epoch"] = 2, m["next_batch"] = 0, m["epoch_steps"] = 17; }},
  });
}

TEST(CraftedCheckpoint, AWorldSizeOrSamplerInputThatDoesNotAddUpIsRefused) {
  const auto big = std::int64_t{1} << 40;
  expect_refused({
      // --lr-scale's basis: the rate was scaled by it (2^40 + 3 cut to an int: 3)
      {"lr_workers", [](json& m) { m["lr_workers"] = 0; }},
      {"lr_workers", [](json& m) { m["lr_workers"] = -2; }},
      {"lr_workers", [](json& m) { m["lr_workers"] = 3; }},  // 32 is not 3 x anything
      {"lr_workers", [big](json& m) { m["lr_workers"] = big + 3; }},
      {"lr_workers", [](json& m) { m["lr_workers"] = "2"; }},
      // the world size it was written with, against its own global batch
      {"workers", [](json& m) { m["workers"] = 3; }},
      {"workers", [](json& m) { m["workers"] = 0; }},
      {"batch", [](json& m) { m["batch"] = 8; }},
      {"accum", [](json& m) { m["accum"] = "1"; }},
      // the data order's inputs, of the wrong type (they were skipped, or escaped as type_error)
      {"global_batch", [](json& m) { m["global_batch"] = "32"; }},
      {"global_batch", [](json& m) { m["global_batch"] = 32.5; }},
      {"seed", [](json& m) { m["seed"] = "42"; }},
      {"seed", [](json& m) { m["seed"] = -1; }},
      {"dataset", [](json& m) { m["dataset"] = 5; }},
      {"train_samples", [](json& m) { m["train_samples"] = "512"; }},
      {"train_samples", [](json& m) { m["train_samples"] = 511.5; }},
      // the model's parameter count against its parameters; the model and optimizer themselves
      {"num_params", [](json& m) { m["num_params"] = kParams - 1; }},
      {"widths", [](json& m) { m["widths"] = "8,6,4"; }},
      {"widths[1]",
       [](json& m) {
         m["widths"] = {8, -6, 4};
       }},
      {"widths[1]",
       [](json& m) {
         m["widths"] = {8, 1e30, 4};
       }},
      {"optimizer.type", [](json& m) { m["optimizer"]["type"] = 5; }},
  });
}

}  // namespace
}  // namespace starring
