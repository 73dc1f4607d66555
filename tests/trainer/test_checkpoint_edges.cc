// Checkpoint behaviour that had no test of its own (helper-61's mutation test of trainer/ found
// each could be dropped with every other test passing):
//   - --resume latest follows the "latest" pointer, not the highest step in the folder: a run
//     resumed from an earlier checkpoint writes lower steps beside an abandoned run's higher one
//     (kept by --keep-checkpoints), and the pointer names the run that went on;
//   - check_checkpoint_fits refuses optimizer state of the wrong size (sgd state in an adamw run's
//     checkpoint, a short first moment) with a ConfigError naming the sizes, before any backend
//     is handed it;
//   - resume_setting_changes names the learning-rate and optimizer settings a resumed run changes
//     (a note, not a refusal: a lower rate to fine-tune is a reason to resume);
//   - a length worker 0 sends to the other workers beyond what it can be is refused, not
//     allocated;
//   - a --resume path that is not a regular file (a FIFO, a device) is refused by name: a FIFO
//     waited for a writer forever, /dev/zero was read without end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/error.h"
#include "common/inproc_comm.h"
#include "tests/scratch_dir.h"
#include "trainer/checkpoint.h"

namespace starring {
namespace {

CheckpointData sample(std::int64_t step, std::size_t n, std::size_t n1, std::size_t n2) {
  CheckpointData c;
  c.meta = {{"widths", {4, 3, 2}}, {"optimizer", {{"type", "adamw"}}}};
  c.step = step;
  for (std::size_t i = 0; i < n; ++i) c.params.push_back(0.01f * static_cast<float>(i));
  for (std::size_t i = 0; i < n1; ++i) c.state1.push_back(1e-3f * static_cast<float>(i));
  for (std::size_t i = 0; i < n2; ++i) c.state2.push_back(1e-5f * static_cast<float>(i));
  return c;
}

TEST(CheckpointLatest, ThePointerWinsOverAHigherStepOfAnAbandonedRun) {
  CheckpointConfig k;
  k.dir = testing::scratch_dir("ckpt_edges_latest");
  k.keep = 5;
  save_checkpoint(k, sample(10, 8, 8, 8), "rank 0");
  save_checkpoint(k, sample(30, 8, 8, 8), "rank 0");  // the first run went on to step 30
  save_checkpoint(k, sample(20, 8, 8, 8), "rank 0");  // a run resumed from step 10, now at 20
  k.resume = "latest";
  std::string path;
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 20);
  EXPECT_EQ(path, k.dir + "/" + checkpoint_file_name(20));
  k.resume = "auto";
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 20);
}

// A 'latest' that names a file which cannot even be looked at (here a symlink loop, which root
// cannot look through either) is passed over like one that is missing: the newest checkpoint
// that reads is resumed. std::filesystem's own exception ('filesystem error: status: Too many
// levels of symbolic links') escaped load_resume.
TEST(CheckpointLatest, ALatestThatCannotBeLookedAtIsPassedOver) {
  CheckpointConfig k;
  k.dir = testing::scratch_dir("ckpt_edges_loop");
  save_checkpoint(k, sample(10, 8, 8, 8), "rank 0");
  const std::string loop = checkpoint_file_name(20);
  std::filesystem::create_symlink(loop, std::filesystem::path(k.dir) / loop);  // points at itself
  std::ofstream(std::filesystem::path(k.dir) / "latest") << loop << "\n";
  k.resume = "latest";
  std::string path;
  ::testing::internal::CaptureStderr();
  try {
    EXPECT_EQ(load_resume(k, "rank 0", path).step, 10);
    EXPECT_EQ(path, k.dir + "/" + checkpoint_file_name(10));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "load_resume threw: " << e.what();
  }
  // the note says why it was passed over: it exists, but cannot be looked at
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("latest names " + loop + ", which cannot be looked at ("), std::string::npos)
      << said;
}

// A 'latest' naming a checkpoint that is gone (deleted by hand, or by a later run of another
// folder's files) is passed over for the newest one that verifies, and the run says so, as it
// does for one that is corrupt: it resumed some steps back without a word. With no checkpoint
// left, the error says what the pointer named.
TEST(CheckpointLatest, ALatestNamingAMissingFileIsPassedOverWithANote) {
  CheckpointConfig k;
  k.dir = testing::scratch_dir("ckpt_edges_gone");
  k.keep = 5;
  save_checkpoint(k, sample(10, 8, 8, 8), "rank 0");
  save_checkpoint(k, sample(20, 8, 8, 8), "rank 0");
  std::filesystem::remove(std::filesystem::path(k.dir) / checkpoint_file_name(20));
  k.resume = "latest";
  std::string path;
  ::testing::internal::CaptureStderr();
  const std::int64_t step = load_resume(k, "rank 0", path).step;
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(step, 10);
  EXPECT_NE(said.find("[starring] rank 0: " + k.dir + "/latest names " + checkpoint_file_name(20) +
                      ", which does not exist; resuming from " + k.dir + "/" +
                      checkpoint_file_name(10) + " instead"),
            std::string::npos)
      << said;
  std::filesystem::remove(std::filesystem::path(k.dir) / checkpoint_file_name(10));
  try {
    load_resume(k, "rank 0", path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0: --resume latest: no valid checkpoint in " + k.dir +
                                         " (newest: " + k.dir + "/latest names " +
                                         checkpoint_file_name(20) + ", which does not exist)");
  }
}

// A file in the folder that looks like a checkpoint by its name but whose step does not fit in
// 64 bits, or whose "digits" are bytes above 127 (a UTF-8 name), is not a checkpoint: it is passed
// over by the rotation after a save and by --resume latest / auto. std::stoll's out_of_range
// ('stoll') escaped save_checkpoint and load_resume, and ::isdigit was called on a negative char.
TEST(CheckpointLatest, NamesWhoseStepIsNotANumberOfOursArePassedOver) {
  CheckpointConfig k;
  k.dir = testing::scratch_dir("ckpt_edges_names");
  k.keep = 1;
  for (const std::string name : {"ckpt-99999999999999999999999.ckpt", "ckpt-\xc3\xa9.ckpt"})
    std::ofstream(std::filesystem::path(k.dir) / name) << "not a checkpoint\n";
  try {
    save_checkpoint(k, sample(10, 8, 8, 8), "rank 0");
    save_checkpoint(k, sample(20, 8, 8, 8), "rank 0");  // rotates: step 10 goes, the others stay
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(k.dir) / checkpoint_file_name(10)));
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(k.dir) /
                                        "ckpt-99999999999999999999999.ckpt"));
    std::filesystem::remove(std::filesystem::path(k.dir) / "latest");  // the folder scan alone
    std::string path;
    for (const char* how : {"latest", "auto"}) {
      k.resume = how;
      EXPECT_EQ(load_resume(k, "rank 0", path).step, 20) << how;
      EXPECT_EQ(path, k.dir + "/" + checkpoint_file_name(20)) << how;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
  // The same rule for the preflight's check of a fresh run's folder (is_checkpoint_file_name).
  EXPECT_TRUE(is_checkpoint_file_name(checkpoint_file_name(42)));
  for (const char* other : {"ckpt-99999999999999999999999.ckpt", "ckpt-.ckpt", "ckpt-x.ckpt",
                            "ckpt--1.ckpt", "ckpt-0000000042.ckpt.tmp", "latest"})
    EXPECT_FALSE(is_checkpoint_file_name(other)) << other;
}

// Only a regular file is read: opening a FIFO waited for a writer forever (and a writer that never
// writes made it a 'truncated (0 bytes)' checkpoint), a device was read to its end (/dev/null:
// 'truncated', /dev/zero: never). Each is one ConfigError naming the path, what it is and the
// rank; a 'latest' pointer naming one is passed over like a damaged file.
TEST(CheckpointFile, APathThatIsNotARegularFileIsRefused) {
  const std::string dir = testing::scratch_dir("ckpt_edges_fifo");
  const std::string fifo = dir + "/" + checkpoint_file_name(7);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // Were the FIFO opened, this writer would let the open return (giving it no bytes), so that the
  // test fails instead of hanging; a reader that never opens it leaves the writer polling.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (!done) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO while no reader
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const auto expect_refused = [](const std::string& path, const char* kind) {
    try {
      read_checkpoint(path, "rank 0");
      ADD_FAILURE() << "no error for " << path;
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("rank 0: checkpoint " + path + " is not a regular file (" + kind + ")"),
                std::string::npos)
          << msg;
    }
  };
  expect_refused(fifo, "a FIFO");
  if (std::filesystem::exists("/dev/null")) expect_refused("/dev/null", "a device");
  CheckpointConfig k;
  k.dir = dir;
  k.resume = "latest";
  std::ofstream(dir + "/latest") << checkpoint_file_name(7) << "\n";
  std::string path;
  try {
    load_resume(k, "rank 0", path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file (a FIFO)"), std::string::npos)
        << e.what();
  }
  done = true;
  writer.join();
}

TEST(CheckpointFits, OptimizerStateOfTheWrongSizeIsRefused) {
  const std::vector<int> widths{4, 3, 2};
  const std::size_t n = 4 * 3 + 3 + 3 * 2 + 2;
  EXPECT_NO_THROW(check_checkpoint_fits(sample(5, n, n, n), widths, n, "adamw", "f", "rank 0"));
  for (const auto& [n1, n2] : {std::pair<std::size_t, std::size_t>{n, 0}, {n - 1, n}, {n, n + 1}}) {
    try {
      check_checkpoint_fits(sample(5, n, n1, n2), widths, n, "adamw", "f", "rank 0");
      ADD_FAILURE() << "state of " << n1 << " + " << n2 << " floats accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("optimizer state of " + std::to_string(n1) + " + " + std::to_string(n2) +
                         " floats, expected " + std::to_string(n) + " + " + std::to_string(n)),
                std::string::npos)
          << msg;
    }
  }
}

TEST(ResumeSettings, ChangedRateAndOptimizerSettingsAreNamedWithTheCheckpointsValues) {
  Config cfg;
  cfg.train.lr = 0.02f;
  cfg.train.opt.momentum = 0.9f;
  CheckpointData c;
  c.meta = checkpoint_meta(cfg, {4, 3, 2}, 29, "ring", 2, 100);
  EXPECT_EQ(resume_setting_changes(c, cfg), "");
  Config now = cfg;
  now.train.lr = 0.01f;
  now.train.lr_schedule = "cosine";
  now.train.opt.momentum = 0.5f;
  now.train.opt.beta1 = 0.5f;  // an AdamW setting: not used by sgd, not named
  EXPECT_EQ(resume_setting_changes(c, now),
            "--lr 0.01 (0.02 in the checkpoint), --lr-schedule cosine (constant in the "
            "checkpoint), --momentum 0.5 (0.9 in the checkpoint)");
  now = cfg;
  now.train.opt.type = "adamw";
  now.train.opt.eps = 1e-6f;
  now.train.opt.weight_decay = 0.1f;
  now.train.warmup_steps = 7;
  now.train.lr_scale = "sqrt";
  const std::string adamw = resume_setting_changes(c, now);
  for (const char* part :
       {"--lr-scale sqrt (none in the checkpoint)", "--warmup-steps 7 (0 in the checkpoint)",
        "--eps 1e-06 (", "--weight-decay 0.1 ("})
    EXPECT_NE(adamw.find(part), std::string::npos) << adamw;
  // A file of a build that did not record a setting (or recorded another type) says nothing of it.
  c.meta.erase("lr");
  c.meta["optimizer"]["momentum"] = "fast";
  now = cfg;
  now.train.lr = 0.5f;
  now.train.opt.momentum = 0.1f;
  EXPECT_EQ(resume_setting_changes(c, now), "");
}

// The cosine's length is the run's step count (--epochs, --max-steps): a run cut short by
// --max-steps 40 and resumed for 99 went from its decayed rate (7.7e-5 at step 40) back up to
// 0.032 at step 41 without a word. Named only when both runs decay by the cosine.
TEST(ResumeSettings, ALongerCosineIsNamed) {
  Config cfg;
  cfg.train.lr_schedule = "cosine";
  CheckpointData c;
  c.meta = checkpoint_meta(cfg, {4, 3, 2}, 29, "ring", 2, 100);
  EXPECT_EQ(resume_setting_changes(c, cfg, 99), "");  // a file that did not record it
  c.meta["lr"]["schedule_steps"] = 40;
  EXPECT_EQ(resume_setting_changes(c, cfg, 40), "");
  EXPECT_EQ(resume_setting_changes(c, cfg, 99),
            "the cosine schedule's length 99 steps (40 in the checkpoint; --epochs and "
            "--max-steps set it)");
  EXPECT_EQ(resume_setting_changes(c, cfg), "");  // no length given
  Config constant = cfg;
  constant.train.lr_schedule = "constant";
  EXPECT_EQ(resume_setting_changes(c, constant, 99),
            "--lr-schedule constant (cosine in the checkpoint)");
}

// A length worker 0 sends (its verdict, the checkpoint's path) beyond what it can be is refused by
// the worker that receives it, naming both: it was allocated as sent (std::string(n)).
TEST(ResumeOnWorkers, ALengthBeyondWhatItCanBeIsRefused) {
  const std::uint64_t huge = UINT64_MAX / 2;
  try {
    run_ranks(
        2,
        [&](Comm& c) {
          if (c.rank() == 0)
            c.send(&huge, sizeof huge, 1, tags::kResume, c.timeout());
          else
            agree_with_worker0(c, "", "loading the checkpoint to resume from");
        },
        Seconds(5));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "rank 1: rank 0 sent a length of 9223372036854775807 bytes for worker 0's "
                 "verdict (tag 140), more than the 67108864 it can be");
  }
}

}  // namespace
}  // namespace starring
