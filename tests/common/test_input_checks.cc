// Input checks that had no test of their own (helper-61's mutation test of common/ found each
// one could be loosened with every other test passing):
//   - the IDX reader refuses label 10 with 10 classes (the boundary; 12 was tested) and a magic
//     whose two leading bytes are not zero (a check of the low 16 bits alone passed it), and test
//     images of another width than the training images (only the height was compared);
//   - finalize_config refuses the training values at the edge of their ranges: --accum 0 (a
//     gradient scale of 1/0), --beta1 1 / --beta2 1 (Adam's bias correction 1 - 1^t = 0), --eps 0,
//     --warmup-steps -1, --epochs 0, --max-steps 0, --weight-decay < 0, --momentum < 0,
//     --threads 0, --untimed-steps -1, --staleness -1, --log-every 0, each naming the option.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/dataset.h"
#include "common/error.h"
#include "tests/common/config_test_util.h"
#include "tests/common/idx_bytes.h"
#include "tests/scratch_dir.h"

namespace starring {
namespace {

namespace fs = std::filesystem;

class IdxChecks : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::scratch_dir("idx_checks"); }
  std::string write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  // Three 2x2 images (pixel i = i) and the given labels, as the train set.
  void write_train_set(const std::vector<std::uint8_t>& labels) {
    std::vector<std::uint8_t> pixels(labels.size() * 4);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i);
    write("train-images-idx3-ubyte",
          idx_bytes(0x803, {std::uint32_t(labels.size()), 2, 2}, pixels));
    write("train-labels-idx1-ubyte", idx_bytes(0x801, {std::uint32_t(labels.size())}, labels));
  }
  fs::path dir_;
};

TEST_F(IdxChecks, LabelTenOfTenClassesIsOutOfRangeAndNineIsNot) {
  write_train_set({0, 9, 3});
  EXPECT_EQ(load_idx_dataset(dir_.string(), true).y, (std::vector<int>{0, 9, 3}));
  write_train_set({0, 9, 10});
  try {
    load_idx_dataset(dir_.string(), true);
    FAIL() << "label 10 accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("label 10 at index 2 is out of range [0, 10)"), std::string::npos) << m;
  }
}

TEST_F(IdxChecks, MagicWithNonZeroLeadingBytesIsRefused) {
  for (std::uint32_t magic : {0x01000801u, 0x00010801u, 0xFFFF0801u}) {
    const std::string path = write("labels", idx_bytes(magic, {3}, {1, 2, 3}));
    try {
      read_idx_file(path, 1);
      ADD_FAILURE() << "magic " << std::hex << magic << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("wrong magic"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_idx_file(write("good", idx_bytes(0x801, {3}, {1, 2, 3})), 1).data,
            (std::vector<std::uint8_t>{1, 2, 3}));
}

// check_idx_dataset (run before training) compares the test images' shape with the training
// images' in both dimensions: 2x3 test images against 2x2 training images are refused.
TEST_F(IdxChecks, TestImagesOfAnotherWidthAreRefusedBeforeTraining) {
  write_train_set({1, 2, 3});
  write("t10k-labels-idx1-ubyte", idx_bytes(0x801, {2}, {4, 5}));
  write("t10k-images-idx3-ubyte", idx_bytes(0x803, {2, 2, 2}, std::vector<std::uint8_t>(8, 7)));
  EXPECT_EQ(check_idx_dataset(dir_.string()), 3);
  write("t10k-images-idx3-ubyte", idx_bytes(0x803, {2, 2, 3}, std::vector<std::uint8_t>(12, 7)));
  try {
    check_idx_dataset(dir_.string());
    FAIL() << "2x3 test images accepted with 2x2 training images";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 2x3 images"), std::string::npos) << e.what();
  }
}

// check_idx_dataset also compares the test set's image and label counts (as it does the training
// set's), so 2 test images with 3 test labels fail before training, not at the first evaluation;
// checking the training set's counts only passed every other test.
TEST_F(IdxChecks, TestImageAndLabelCountsAreComparedBeforeTraining) {
  write_train_set({1, 2, 3});
  write("t10k-images-idx3-ubyte", idx_bytes(0x803, {2, 2, 2}, std::vector<std::uint8_t>(8, 7)));
  write("t10k-labels-idx1-ubyte", idx_bytes(0x801, {3}, {4, 5, 6}));
  try {
    check_idx_dataset(dir_.string());
    FAIL() << "2 test images with 3 test labels accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("t10k-images-idx3-ubyte' holds 2 images"), std::string::npos) << m;
    EXPECT_NE(m.find("holds 3 labels"), std::string::npos) << m;
  }
}

// The ConfigError message of parsing `train args...`, or "" when it parsed.
std::string train_error(std::vector<std::string> args) {
  return test::config_error([&] { test::parse("train", std::move(args)); });
}

TEST(TrainingRanges, ValuesAtTheEdgeAreRefusedNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--accum", "0"}, "--accum"},
      {{"--optimizer", "adamw", "--beta1", "1"}, "--beta1"},
      {{"--optimizer", "adamw", "--beta2", "1"}, "--beta2"},
      {{"--optimizer", "adamw", "--eps", "0"}, "--eps"},
      {{"--lr-scale", "linear", "--warmup-steps", "-1"}, "--warmup-steps"},
      {{"--epochs", "0"}, "--epochs"},
      {{"--max-steps", "0"}, "--max-steps"},
      {{"--weight-decay", "-0.01"}, "--weight-decay"},
      {{"--momentum", "-0.1"}, "--momentum"},
      {{"--momentum", "1"}, "--momentum"},  // no decay: the velocity sums every gradient
      {{"--threads", "0"}, "--threads"},
      {{"--untimed-steps", "-1"}, "--untimed-steps"},
      {{"--backend", "ps", "--consistency", "ssp", "--staleness", "-1"}, "--staleness"},
      {{"--log-every", "0"}, "--log-every"},
  };
  for (const auto& [args, option] : refused) {
    const std::string msg = train_error(args);
    EXPECT_NE(msg.find(option + ": must be"), std::string::npos)
        << args[args.size() - 2] << " " << args.back() << " gave: '" << msg << "'";
  }
  // Just inside the edges: accepted.
  const std::vector<std::vector<std::string>> accepted = {
      {"--accum", "1"},
      {"--optimizer", "adamw", "--beta1", "0", "--beta2", "0.99999", "--eps", "1e-30"},
      {"--lr-scale", "linear", "--warmup-steps", "0"},
      {"--epochs", "1", "--max-steps", "1"},
      {"--max-steps", "-1"},
      {"--weight-decay", "0", "--momentum", "0"},
      {"--momentum", "0.999"},
      {"--backend", "nccl", "--straggler", "0:29999", "--timeout", "30"},
      // ps waits for a live worker's longer step (common/thread_pulse.h), and so do the
      // collective backends whose waits ask the trainer's PeerWatch (common/peer_liveness.h)
      {"--backend", "ps", "--straggler", "0:30000", "--timeout", "30"},
      {"--backend", "ps", "--consistency", "asp", "--straggler", "0:30000", "--timeout", "30"},
      {"--backend", "ps", "--consistency", "ssp", "--straggler", "0:30000", "--timeout", "30"},
      {"--backend", "ring", "--straggler", "0:30000", "--timeout", "30"},
      {"--backend", "ring-p2p", "--straggler", "0:30000", "--timeout", "30"},
      {"--backend", "mpi", "--straggler", "0:30000", "--timeout", "30"},
      {"--backend", "nccl", "--straggler", "0:30000", "--timeout", "30"},
  };
  for (const auto& args : accepted) EXPECT_EQ(train_error(args), "") << args[0] << " " << args[1];
  // A straggler's sleep as long as --timeout where nothing waits for it: one worker alone (local:
  // it would only sleep).
  for (const std::string backend : {"local"}) {
    const std::string msg =
        train_error({"--backend", backend, "--straggler", "0:30000", "--timeout", "30"});
    EXPECT_NE(msg.find("--straggler 0:30000: a delay of 30000 ms per step must be shorter than "
                       "--timeout (30 s): backend '" +
                       backend + "' does not wait for a longer step"),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace starring
