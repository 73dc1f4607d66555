// IDX reader: small IDX files written at test time (gzip with zlib, and plain), whose bytes are a
// closed-form function of the index: good files round-trip, truncated / wrong-magic / missing /
// mismatched / out-of-range / dangling-link / over-claiming files each fail with a ConfigError
// naming the file; concatenated gzip members and a gunzipped .gz read; the installed
// Fashion-MNIST loads with its known shape. Also the synthetic generator's contract.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/dataset.h"
#include "common/error.h"
#include "tests/common/idx_bytes.h"
#include "tests/scratch_dir.h"

namespace starring {
namespace {

namespace fs = std::filesystem;

std::uint8_t pixel(std::size_t i) { return static_cast<std::uint8_t>((i * 7 + 3) % 256); }
std::uint8_t label(std::size_t i) { return static_cast<std::uint8_t>(i % 10); }

class IdxTest : public ::testing::Test {
 protected:
  static constexpr int kN = 37, kRows = 5, kCols = 3;

  void SetUp() override {
    dir_ = testing::scratch_dir("idx");  // of this user and process (tests/scratch_dir.h)
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::string path = (dir_ / name).string();
    if (name.size() > 3 && name.substr(name.size() - 3) == ".gz") {
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }
  static std::vector<std::uint8_t> images(int n) {
    std::vector<std::uint8_t> p(static_cast<std::size_t>(n) * kRows * kCols);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = pixel(i);
    return idx_bytes(0x803, {std::uint32_t(n), kRows, kCols}, p);
  }
  static std::vector<std::uint8_t> labels(int n) {
    std::vector<std::uint8_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = label(i);
    return idx_bytes(0x801, {std::uint32_t(n)}, p);
  }
  // Writes a train set under dir_ with the given suffix ("" plain, ".gz" gzip).
  void write_set(const std::string& suffix, int n_images, int n_labels) {
    write("train-images-idx3-ubyte" + suffix, images(n_images));
    write("train-labels-idx1-ubyte" + suffix, labels(n_labels));
  }
  std::string error_of(const std::string& path, int rank) {
    try {
      read_idx_file(path, rank);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(IdxTest, GoodFilesRoundTripGzipAndPlain) {
  for (std::string suffix : {".gz", ""}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_set(suffix, kN, kN);
    Dataset ds = load_idx_dataset(dir_.string(), true);
    EXPECT_EQ(ds.n, kN);
    EXPECT_EQ(ds.dim, kRows * kCols);
    EXPECT_EQ(ds.classes, 10);
    ASSERT_EQ(ds.x.size(), std::size_t(kN) * kRows * kCols);
    for (std::size_t i = 0; i < ds.x.size(); ++i)
      ASSERT_FLOAT_EQ(ds.x[i], pixel(i) / 255.0f) << suffix << " pixel " << i;
    for (int i = 0; i < kN; ++i) ASSERT_EQ(ds.y[i], label(i));
    EXPECT_GE(*std::min_element(ds.x.begin(), ds.x.end()), 0.0f);
    EXPECT_LE(*std::max_element(ds.x.begin(), ds.x.end()), 1.0f);

    IdxFile raw = read_idx_file((dir_ / ("train-labels-idx1-ubyte" + suffix)).string(), 1);
    EXPECT_EQ(raw.dims, std::vector<int>{kN});
  }
}

TEST_F(IdxTest, TruncatedFileNamesExpectedAndActualBytes) {
  auto full = images(kN);
  const std::size_t cut = full.size() - 10;
  for (std::string name : {"short.gz", "short"}) {
    std::string path = write(name, std::vector<std::uint8_t>(full.begin(), full.begin() + cut));
    std::string msg = error_of(path, 3);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated: expected " + std::to_string(full.size()) + " bytes, got " +
                       std::to_string(cut)),
              std::string::npos)
        << msg;
  }
  // Cut inside the header.
  std::string path = write("tiny", {0, 0, 8});
  EXPECT_NE(error_of(path, 3).find("truncated: expected 4 bytes, got 3"), std::string::npos);
  // A gzip stream cut short (the compressed file itself truncated).
  std::string gz = write("whole.gz", full);
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(gz, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size() / 2);
  EXPECT_NE(error_of(gz, 3).find("truncated"), std::string::npos) << error_of(gz, 3);
}

// A gzip file whose compressed data is damaged (not cut short): zlib's own reason, and the file.
TEST_F(IdxTest, CorruptCompressedDataNamesZlibsReason) {
  std::string gz = write("damaged.gz", images(kN));
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 40u);
  for (std::size_t i = 10; i < 20; ++i) bytes[i] = static_cast<char>(0xFF);  // the first block
  std::ofstream(gz, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  const std::string msg = error_of(gz, 3);
  EXPECT_NE(msg.find("'" + gz + "': corrupt file (zlib: "), std::string::npos) << msg;
  // The path once: zlib's own message starts with it ("'P': corrupt file (zlib: P: ...)").
  EXPECT_EQ(msg.find(gz, msg.find(gz) + 1), std::string::npos) << msg;

  // Intact data whose gzip trailer (CRC-32) is wrong: zlib's reason, not a silent read.
  gz = write("badcrc.gz", images(kN));
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 8] = static_cast<char>(bytes[bytes.size() - 8] ^ 0xFF);
  std::ofstream(gz, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  EXPECT_EQ(error_of(gz, 3), "'" + gz + "': corrupt file (zlib: incorrect data check)");
}

// What else users have on disk is legal and reads as the plain file would: a .gz of several
// gzip members one after another (`cat a.gz b.gz`, pigz, bgzip), and a file already gunzipped
// (torchvision leaves its raw files so) that still carries the .gz name.
TEST_F(IdxTest, ConcatenatedMembersAndAGunzippedFileUnderTheGzNameRead) {
  const std::vector<std::uint8_t> whole = images(kN);
  const std::string gz = (dir_ / "train-images-idx3-ubyte.gz").string();
  {
    gzFile f = gzopen(gz.c_str(), "wb");  // member 1: the header and a few pixels
    ASSERT_EQ(gzwrite(f, whole.data(), 20), 20);
    gzclose(f);
    f = gzopen(gz.c_str(), "ab");  // member 2: the rest, appended as a gzip member of its own
    ASSERT_EQ(gzwrite(f, whole.data() + 20, static_cast<unsigned>(whole.size() - 20)),
              static_cast<int>(whole.size() - 20));
    gzclose(f);
  }
  const std::vector<std::uint8_t> plain = labels(kN);  // not gzipped, under the .gz name
  std::ofstream(dir_ / "train-labels-idx1-ubyte.gz", std::ios::binary)
      .write(reinterpret_cast<const char*>(plain.data()),
             static_cast<std::streamsize>(plain.size()));
  Dataset ds = load_idx_dataset(dir_.string(), true);
  ASSERT_EQ(ds.n, kN);
  for (std::size_t i = 0; i < ds.x.size(); ++i) ASSERT_FLOAT_EQ(ds.x[i], pixel(i) / 255.0f) << i;
  for (int i = 0; i < kN; ++i) ASSERT_EQ(ds.y[i], label(i));
}

// A header claiming up to 2^31 - 1 bytes over a payload of a few: the error, after reading
// only what is there. The reader sized its buffer from the header first, zero-filling 2 GiB per
// rank (RSS 2.1 GB, 7 s to the error here; 8 ranks on a host: 16 GB) for a 1 KB file.
TEST_F(IdxTest, HeaderClaimingMoreThanTheFileHoldsAllocatesOnlyWhatItReads) {
  const std::uint32_t n = 2147483647u / (kRows * kCols);  // 2147483640 bytes claimed
  const std::string path =
      write("claims", idx_bytes(0x803, {n, kRows, kCols}, std::vector<std::uint8_t>(1000, 1)));
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const std::string msg = error_of(path, 3);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_EQ(msg, "'" + path + "': truncated: expected 2147483656 bytes, got 1016");
  const long grew_mib = (after.ru_maxrss - before.ru_maxrss) / 1024;  // ru_maxrss: KiB
  EXPECT_LT(grew_mib, 256) << "peak memory grew by " << grew_mib << " MiB";
}

TEST_F(IdxTest, LongerThanHeaderSays) {
  auto b = labels(kN);
  b.push_back(1);
  std::string msg = error_of(write("long", b), 1);
  EXPECT_NE(msg.find("longer than its header"), std::string::npos) << msg;
}

TEST_F(IdxTest, WrongMagic) {
  std::string labels_path = write("labels.gz", labels(kN));
  std::string msg = error_of(labels_path, 3);  // a label file where images are expected
  EXPECT_NE(msg.find("wrong magic 0x00000801"), std::string::npos) << msg;
  EXPECT_NE(msg.find(labels_path), std::string::npos) << msg;
  std::string text = write("text", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  EXPECT_NE(error_of(text, 1).find("wrong magic"), std::string::npos);
  // Another compressor's file (as named, or under a .gz name): said so (zlib passes it through).
  std::string bz = write("bz", {'B', 'Z', 'h', '9', '1', 'A', 'Y', '&', 'S', 'Y'});
  EXPECT_NE(error_of(bz, 3).find("it is bzip2-compressed"), std::string::npos) << error_of(bz, 3);
  std::string zip = write("zip", {'P', 'K', 3, 4, 20, 0, 0, 0});
  EXPECT_NE(error_of(zip, 1).find("it is zip-compressed"), std::string::npos) << error_of(zip, 1);
  EXPECT_EQ(error_of(text, 1).find("compressed"), std::string::npos) << error_of(text, 1);
  // Float element type (0x0D) is not what this reader accepts.
  std::string floats = write("floats", idx_bytes(0xD01, {1}, {0, 0, 0, 0}));
  EXPECT_NE(error_of(floats, 1).find("wrong magic"), std::string::npos);
}

TEST_F(IdxTest, CorruptDimensions) {
  std::string path = write("zero", idx_bytes(0x803, {0, 28, 28}, {}));
  EXPECT_NE(error_of(path, 3).find("dimension 0"), std::string::npos) << error_of(path, 3);
  path = write("huge", idx_bytes(0x803, {60000, 60000, 60000}, {1, 2, 3}));
  EXPECT_NE(error_of(path, 3).find("corrupt header"), std::string::npos) << error_of(path, 3);
}

TEST_F(IdxTest, MissingFileSuggestsSetup) {
  EXPECT_NE(error_of(dir_.string(), 1).find("directory"), std::string::npos);
  // A FIFO in a file's place is refused: opening it waited for a writer forever, without a word.
  const std::string fifo = (dir_ / "fifo.gz").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of(fifo, 1), "cannot read '" + fifo + "': it is a FIFO, not an IDX file");
  std::string path = (dir_ / "nope.gz").string();
  std::string msg = error_of(path, 3);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("scripts/setup.sh"), std::string::npos) << msg;

  // An existing folder without the files names the file it looked for; a folder that does not
  // exist is named as such.
  std::filesystem::create_directories(dir_ / "empty");
  for (const char* folder : {"empty", "absent"}) {
    try {
      load_idx_dataset((dir_ / folder).string(), false);
      ADD_FAILURE() << "no error for " << folder;
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      const bool absent = std::string(folder) == "absent";
      EXPECT_EQ(m.find("t10k-images-idx3-ubyte.gz") != std::string::npos, !absent) << m;
      EXPECT_EQ(m.find("' does not exist") != std::string::npos, absent) << m;
      EXPECT_NE(m.find("dataset-fashion-mnist"), std::string::npos) << m;
    }
  }
}

// A data file or folder that cannot even be looked at (here a symlink loop, which root cannot
// look through either, as it can an unreadable folder) is bad input like a missing one: a
// ConfigError naming the path and the system's reason, not std::filesystem's raw exception
// (which reached the user as 'filesystem error: status: ...' with exit code 1), nor 'does not
// exist' for a folder that may well exist.
TEST_F(IdxTest, UnreadablePathsAreConfigErrorsWithTheReason) {
  write_set(".gz", kN, kN);
  const fs::path loop = dir_ / "t10k-images-idx3-ubyte.gz";
  fs::create_symlink(loop.filename(), loop);  // points at itself
  for (const std::string& where : {dir_.string(), (dir_ / "loop_dir").string()}) {
    if (where != dir_.string()) fs::create_symlink("loop_dir", where);
    for (bool train : {false, true}) {
      if (train && where == dir_.string()) continue;  // the train files are fine there
      try {
        load_idx_dataset(where, train);
        ADD_FAILURE() << "no error for " << where;
      } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(where == dir_.string() ? loop.string() : where), std::string::npos) << m;
        EXPECT_NE(m.find("symbolic links"), std::string::npos) << m;  // ELOOP's strerror
        EXPECT_EQ(m.find("does not exist"), std::string::npos) << m;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "not a ConfigError: " << e.what();
      }
    }
  }
  try {  // the pre-run check takes the same path
    check_idx_dataset(dir_.string());
    ADD_FAILURE() << "no error from check_idx_dataset";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(loop.string()), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ConfigError: " << e.what();
  }
}

// A data file that is a symbolic link to nothing (a data set on a share that is not mounted)
// says so: it read "cannot find 'F.gz' (nor 'F')" of a file `ls` lists.
TEST_F(IdxTest, DanglingSymlinkIsNamedWithItsTarget) {
  write_set(".gz", kN, kN);
  const fs::path link = dir_ / "train-labels-idx1-ubyte.gz";
  fs::remove(link);
  fs::create_symlink("/nonexistent/share/labels.gz", link);
  for (bool pre_check : {false, true}) {
    try {
      if (pre_check)
        check_idx_dataset(dir_.string());
      else
        load_idx_dataset(dir_.string(), true);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "'" + link.string() +
                                           "' is a symbolic link to "
                                           "'/nonexistent/share/labels.gz', which does not exist");
    }
  }
  EXPECT_NE(error_of(link.string(), 1).find("is a symbolic link to"), std::string::npos);
  // The folder itself.
  const fs::path gone = dir_ / "data";
  fs::create_symlink("/nonexistent/share", gone);
  try {
    load_idx_dataset(gone.string(), true);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--data-dir: folder '" + gone.string() +
                                         "' is a symbolic link to '/nonexistent/share'"),
              std::string::npos)
        << e.what();
  }
  // A plain file beside the broken .gz link is read, as it was.
  write("train-labels-idx1-ubyte", labels(kN));
  EXPECT_EQ(load_idx_dataset(dir_.string(), true).n, kN);
}

// With both FILE.gz and FILE in the folder, FILE.gz is read (the documented order); here the
// plain pair holds 3 samples and the gzip pair kN. Preferring the plain file passed every other
// test (each wrote one of the two).
TEST_F(IdxTest, GzipFileIsPreferredToAPlainOneBesideIt) {
  write("train-images-idx3-ubyte", images(3));
  write("train-labels-idx1-ubyte", labels(3));
  write_set(".gz", kN, kN);
  Dataset ds = load_idx_dataset(dir_.string(), true);
  EXPECT_EQ(ds.n, kN);
  EXPECT_NE(ds.source.find("train-images-idx3-ubyte.gz"), std::string::npos) << ds.source;
}

TEST_F(IdxTest, ImageLabelCountMismatch) {
  write_set(".gz", kN, kN - 1);
  try {
    load_idx_dataset(dir_.string(), true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(kN) + " images"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(kN - 1) + " labels"), std::string::npos) << m;
  }
}

TEST_F(IdxTest, LabelOutOfRange) {
  write("train-images-idx3-ubyte", images(3));
  write("train-labels-idx1-ubyte", idx_bytes(0x801, {3}, {1, 12, 2}));
  try {
    load_idx_dataset(dir_.string(), true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("label 12 at index 1"), std::string::npos) << m;
  }
}

TEST(FashionMnist, InstalledDatasetLoads) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << dir << " not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  for (bool train : {true, false}) {
    Dataset ds = load_idx_dataset(dir, train);
    EXPECT_EQ(ds.n, train ? 60000 : 10000);
    EXPECT_EQ(ds.dim, 784);
    ASSERT_EQ(ds.x.size(), std::size_t(ds.n) * 784);
    std::vector<int> per_class(10, 0);
    for (int y : ds.y) per_class.at(y)++;
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], ds.n / 10) << "class " << c;
    EXPECT_EQ(*std::max_element(ds.x.begin(), ds.x.end()), 1.0f);
    EXPECT_EQ(*std::min_element(ds.x.begin(), ds.x.end()), 0.0f);
  }
}

TEST(Synthetic, DeterministicBalancedAndPrefixStable) {
  Dataset a = make_synthetic(200, 16, 4, 7), b = make_synthetic(200, 16, 4, 7);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  Dataset prefix = make_synthetic(50, 16, 4, 7);
  EXPECT_TRUE(std::equal(prefix.x.begin(), prefix.x.end(), a.x.begin()));
  Dataset other = make_synthetic(200, 16, 4, 8);
  EXPECT_NE(a.x, other.x);
  std::vector<int> per_class(4, 0);
  for (int y : a.y) per_class.at(y)++;
  EXPECT_EQ(per_class, std::vector<int>(4, 50));
  // Sample i has label i % classes, so every prefix is balanced (a label of (i / 2) % classes
  // balanced the whole set and passed the count above).
  for (int i = 0; i < a.n; ++i) ASSERT_EQ(a.y[i], i % 4) << "sample " << i;
  // The noise comes from (seed, i), not from i alone: were it the same for two seeds, x7 - x8
  // would be the constant difference of the class centers for every sample of a class.
  for (int j = 0; j < a.dim; ++j) {
    const float d0 = a.x[0 * a.dim + j] - other.x[0 * a.dim + j];
    const float d4 = a.x[4 * a.dim + j] - other.x[4 * a.dim + j];  // sample 4: class 0 too
    EXPECT_GT(std::fabs(d0 - d4), 1e-6f) << "feature " << j;
  }
  double mean = 0;
  for (float v : a.x) mean += v;
  mean /= a.x.size();
  EXPECT_GT(mean, 0.3);
  EXPECT_LT(mean, 0.7);
}

// Class centers are drawn from [0.2, 0.8] per feature: the class means of 1000 samples each
// (noise 0.25 / sqrt(1000) = 0.008 on a mean) lie within [0.16, 0.84] and spread over most of
// that range. Centers drawn from [0.2, 1.0] passed every other test.
TEST(Synthetic, ClassCentersLieInTheStatedRange) {
  const int n = 2000, dim = 64, classes = 2;
  Dataset ds = make_synthetic(n, dim, classes, 5);
  std::vector<double> mean(classes * dim, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < dim; ++j) mean[ds.y[i] * dim + j] += ds.x[i * dim + j] / (n / classes);
  const auto [lo, hi] = std::minmax_element(mean.begin(), mean.end());
  EXPECT_GE(*lo, 0.16) << *lo;
  EXPECT_LE(*hi, 0.84) << *hi;
  EXPECT_LT(*lo, 0.3) << *lo;
  EXPECT_GT(*hi, 0.7) << *hi;
  RecordProperty("class_mean_range", std::to_string(*lo) + " " + std::to_string(*hi));
}

// Learnable: a nearest-class-mean classifier fitted on one half classifies the other half far
// better than chance (1/classes), and not perfectly in a low dimension.
TEST(Synthetic, ClassesAreLearnable) {
  const int n = 2000, dim = 8, classes = 5;
  Dataset ds = make_synthetic(n, dim, classes, 3);
  std::vector<double> mean(classes * dim, 0.0);
  std::vector<int> count(classes, 0);
  for (int i = 0; i < n / 2; ++i) {
    count[ds.y[i]]++;
    for (int j = 0; j < dim; ++j) mean[ds.y[i] * dim + j] += ds.x[i * dim + j];
  }
  for (int c = 0; c < classes; ++c)
    for (int j = 0; j < dim; ++j) mean[c * dim + j] /= count[c];
  int correct = 0;
  for (int i = n / 2; i < n; ++i) {
    int best = 0;
    double best_d = 1e30;
    for (int c = 0; c < classes; ++c) {
      double d = 0;
      for (int j = 0; j < dim; ++j) d += std::pow(ds.x[i * dim + j] - mean[c * dim + j], 2);
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == ds.y[i];
  }
  double acc = double(correct) / (n / 2);
  EXPECT_GT(acc, 0.6) << "chance is " << 1.0 / classes;
  EXPECT_LT(acc, 1.0);
}

}  // namespace
}  // namespace starring
