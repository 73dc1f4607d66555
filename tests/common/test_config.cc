// parse_config / finalize_config: INI + command-line precedence, errors naming the option, size
// suffixes, presets, per-command option groups, --help.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/blas_kernels.h"
#include "common/config.h"
#include "common/config_detail.h"
#include "common/error.h"
#include "tests/common/config_test_util.h"
#include "tests/scratch_dir.h"

namespace starring {
namespace {

namespace fs = std::filesystem;

// Runs parse_config on {command, args...} as main() passes it (argv[0] is the command name).
bool parse(const std::string& command, std::vector<std::string> args, Config& cfg) {
  args.insert(args.begin(), command);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_config(command, static_cast<int>(argv.size()), argv.data(), cfg);
}

Config parse_train(std::vector<std::string> args) {
  Config cfg;
  EXPECT_TRUE(parse("train", std::move(args), cfg));
  return cfg;
}

// The ConfigError message of parsing `args`, or "" when it parsed.
std::string error_of(const std::string& command, std::vector<std::string> args) {
  Config cfg;
  return test::config_error([&] { parse(command, std::move(args), cfg); });
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::scratch_dir("cfg");  // of this user and process (tests/scratch_dir.h)
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

// --threads beyond OpenBLAS's own limit (MAX_THREADS, 64 in Debian 12's build) is an error
// naming the range: openblas_set_num_threads capped it without a word.
TEST(Config, ThreadsBeyondOpenBlasLimitAreAnError) {
  EXPECT_EQ(max_threads_in("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH Haswell MAX_THREADS=64"), 64);
  EXPECT_EQ(max_threads_in("OpenBLAS 0.3.21 MAX_THREADS=128 extra"), 128);
  EXPECT_EQ(max_threads_in("OpenBLAS 0.3.3 Haswell"), 0);
  EXPECT_EQ(max_threads_in("OpenBLAS 0.3.21 MAX_THREADS=1"), 1);  // a one-thread build
  const int most = blas_max_threads();
  if (most <= 0) GTEST_SKIP() << "this OpenBLAS does not say its MAX_THREADS";
  EXPECT_EQ(error_of("train", {"--threads", std::to_string(most)}), "");
  EXPECT_EQ(error_of("train", {"--threads", std::to_string(most + 1)}),
            detail::concat("--threads: must be between 1 and ", most,
                           " (this OpenBLAS's MAX_THREADS) (got ", most + 1, ")"));
  EXPECT_NE(error_of("bench-model", {"--threads", "100000"}).find("--threads"), std::string::npos);
}

TEST(Config, DefaultsAreValid) {
  Config cfg = parse_train({});
  EXPECT_EQ(cfg.command, "train");
  EXPECT_EQ(cfg.model.preset, "default");
  EXPECT_EQ(cfg.model.hidden, (std::vector<int>{256, 128}));
  EXPECT_EQ(cfg.train.batch, 64);
  EXPECT_TRUE(cfg.sync.overlap);
}

TEST(Config, SeedTakesTheWholeUnsignedRange) {
  EXPECT_EQ(parse_train({}).train.seed, 42u);
  EXPECT_EQ(parse_train({"--seed", "0"}).train.seed, 0u);
  EXPECT_EQ(parse_train({"--seed", "18446744073709551615"}).train.seed, 18446744073709551615u);
}

TEST(Config, CommandLineValues) {
  Config cfg = parse_train({"--batch", "32", "--lr=0.1", "--hidden", "64,32,16", "--overlap", "off",
                            "--eval-each-epoch=false", "--backend", "ring", "--servers",
                            "colocated", "--segment-bytes", "256K", "--max-steps=-1"});
  EXPECT_EQ(cfg.train.batch, 32);
  EXPECT_FLOAT_EQ(cfg.train.lr, 0.1f);
  EXPECT_EQ(cfg.model.hidden, (std::vector<int>{64, 32, 16}));
  EXPECT_EQ(cfg.model.preset, "custom");
  EXPECT_FALSE(cfg.sync.overlap);
  EXPECT_FALSE(cfg.train.eval_each_epoch);
  EXPECT_EQ(cfg.sync.backend, "ring");
  EXPECT_EQ(cfg.sync.servers, "colocated");
  EXPECT_EQ(cfg.sync.segment_bytes, 256u << 10);
}

using Strings = std::vector<std::string>;

// The run name, metrics, trace and summary file of `cfg`: values an INI test reads back.
Strings out_files(const Config& cfg) {
  return {cfg.out.run_name, cfg.out.metrics_file, cfg.out.trace_file, cfg.out.summary_file};
}

TEST_F(ConfigFile, IniValuesAndCommandLineWins) {
  std::string ini = write("a.ini",
                          "# experiment\n"
                          "[train]\n"
                          "batch = 128\n"
                          "lr = 0.2   \n"
                          "epochs=3\n"
                          "seed = 7\n"
                          "; another comment style\n"
                          "[sync]\n"
                          "overlap = off\n"
                          "compress = fp16\n"
                          "[bench]\n"
                          "max-bytes = 16M\n");
  Config cfg = parse_train({"--config", ini, "--batch", "16"});
  EXPECT_EQ(cfg.config_file, ini);
  EXPECT_EQ(cfg.train.batch, 16);  // command line wins
  EXPECT_FLOAT_EQ(cfg.train.lr, 0.2f);
  EXPECT_EQ(cfg.train.epochs, 3);
  EXPECT_EQ(cfg.train.seed, 7u);  // read as text and converted after parsing, as --overlap
  EXPECT_FALSE(cfg.sync.overlap);
  EXPECT_EQ(cfg.sync.compress, "fp16");
  EXPECT_EQ(cfg.bench.max_bytes, 16u << 20);  // an INI may hold options of other commands

  Config on = parse_train({"--overlap", "on", "--seed", "9", "--config", ini});  // any order
  EXPECT_TRUE(on.sync.overlap);
  EXPECT_EQ(on.train.seed, 9u);
}

// A comment begins at '#' or ';' after a blank, as on the command line a value keeps both: the
// file's 'exp#1' was read as 'exp' and 'out#2.jsonl' as 'out' (a metrics file of another name),
// without a word. One pair of quotes around a value is taken off, and '#' or ';' inside it is
// text: `run-name = "exp #1"` trained as run '"exp' (the quote kept, the rest read as a comment),
// exit 0. An unclosed quote, or text after the closing one (a '#' right after it too), is an
// error naming the line.
TEST_F(ConfigFile, IniCommentsAndQuotes) {
  const std::pair<const char*, Strings> cases[] = {
      {"run-name = exp#1\n"
       "metrics-file = out#2.jsonl ; where\n"
       "trace = a;b#c.%r.json # the trace\n"
       "lr = 0.2 #\n",
       {"exp#1", "out#2.jsonl", "a;b#c.%r.json", ""}},
      // the other quote is text inside, and quotes inside a value are text
      {"run-name = \"exp #1\"\n"
       "metrics-file = 'out ;2.jsonl'   # where\n"
       "trace = \"it's.json\" ;note\n"
       "summary-file = a\"b'c\n"
       "lr =\"0.2\"\n",
       {"exp #1", "out ;2.jsonl", "it's.json", "a\"b'c"}},
      // '#' right after '=' is text, quoted or not
      {"run-name =#1 # c\nlr = '0.2'\n", {"#1", "", "", ""}},
  };
  for (const auto& [text, want] : cases) {
    const Config cfg = parse_train({"--config", write("c.ini", text)});
    EXPECT_EQ(out_files(cfg), want) << text;
    EXPECT_FLOAT_EQ(cfg.train.lr, 0.2f) << text;
  }

  std::string msg =
      error_of("train", {"--config", write("u.ini", "lr = 0.1\nrun-name = \"exp #1\n")});
  EXPECT_NE(msg.find("u.ini:2: run-name: the value's opening quote \" is not closed"),
            std::string::npos)
      << msg;
  msg = error_of("train", {"--config", write("a.ini", "run-name = 'a' b\n")});
  EXPECT_NE(msg.find("a.ini:1: run-name: 'b' after the closing quote"), std::string::npos) << msg;
  // a comment begins after a blank here too: "x"#y was read as x and a comment, exit 0
  for (const char* text : {"run-name =\"x\"#y\n", "run-name = 'x';y # c\n"}) {
    msg = error_of("train", {"--config", write("h.ini", text)});
    EXPECT_NE(msg.find("h.ini:1: run-name: '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("' after the closing quote (only a comment may follow it, after a blank)"),
              std::string::npos)
        << msg;
  }
}

TEST_F(ConfigFile, IniErrorsNameFileAndLine) {
  std::string bad_key = write("k.ini", "batch = 8\n\nbogus-option = 1\n");
  std::string msg = error_of("train", {"--config", bad_key});
  EXPECT_NE(msg.find("k.ini:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bogus-option"), std::string::npos) << msg;
  msg = error_of("train", {"--config", write("t.ini", "[train]\nlrr = 0.1\n")});
  EXPECT_NE(msg.find("t.ini:2: unknown option 'lrr'; did you mean lr?"), std::string::npos) << msg;
  // never an option an INI file may not hold: 'confi' is not 'config' there, 'hel' not 'help'
  msg = error_of("train", {"--config", write("c.ini", "confi = x.ini\nhel = 1\n")});
  EXPECT_NE(msg.find("c.ini:1: unknown option 'confi'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
  msg = error_of("train", {"--config", write("h.ini", "hel = 1\n")});
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
  // nor 'config' itself: an INI file that names another was silently ignored
  msg = error_of("train", {"--config", write("n.ini", "batch = 8\nconfig = other.ini\n")});
  EXPECT_NE(msg.find("n.ini:2: unknown option 'config'"), std::string::npos) << msg;

  std::string bad_value = write("v.ini", "batch = many\n");
  msg = error_of("train", {"--config", bad_value});
  EXPECT_NE(msg.find("batch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v.ini"), std::string::npos) << msg;

  // a key in two sections (which are labels only) is one option given twice: both lines named
  msg = error_of("train", {"--config", write("d.ini", "[train]\nbatch = 8\n[sync]\nbatch = 16\n")});
  EXPECT_NE(msg.find("d.ini:4: 'batch' given twice (first on line 2)"), std::string::npos) << msg;

  // a file that is not text: the byte named, not echoed (a NUL cut the message there)
  msg = error_of("train", {"--config", write("b.ini", std::string("\xff\xfe\0x\n", 5))});
  EXPECT_NE(msg.find("b.ini:1: byte 0x00 at column 3 is not text"), std::string::npos) << msg;
  msg = error_of("train", {"--config", write("u.ini", "# caf\xc3\xa9\nlr = 0.1\n\x01 = 2\n")});
  EXPECT_NE(msg.find("u.ini:3: byte 0x01 at column 1"), std::string::npos) << msg;  // UTF-8 ok

  std::string no_eq = write("e.ini", "batch 8\n");
  EXPECT_NE(error_of("train", {"--config", no_eq}).find("e.ini:1"), std::string::npos);

  // a sweep file given to train (scripts/sweep.sh runs those): said so
  std::string sweep = write("s.ini", "[sweep]\ndescription = x\n[variant ring]\n");
  msg = error_of("train", {"--config", sweep});
  EXPECT_NE(msg.find("s.ini:2: unknown option 'description' (a sweep file: run it with "
                     "scripts/sweep.sh)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(error_of("train", {"--config", bad_key}).find("sweep"), std::string::npos);
  msg = error_of("train", {"--config", (dir_ / "missing.ini").string()});
  EXPECT_NE(msg.find("missing.ini"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--config"), std::string::npos) << msg;
}

TEST_F(ConfigFile, ShippedExperimentParses) {
  Config cfg =
      parse_train({"--config", std::string(STARRING_SOURCE_DIR) + "/experiments/fmnist_mlp.ini"});
  EXPECT_EQ(cfg.data.dataset, "fashion-mnist");
  EXPECT_EQ(cfg.model.hidden, (std::vector<int>{256, 128}));
  EXPECT_GT(cfg.train.epochs, 0);
}

TEST(Config, UnknownFlagAndStrayArgument) {
  std::string msg = error_of("train", {"--bogus", "3"});
  EXPECT_NE(msg.find("--bogus"), std::string::npos) << msg;
  // No prefix guessing: --epoch is not --epochs, but the error names the option meant.
  msg = error_of("train", {"--epoch", "3"});
  EXPECT_NE(msg.find("'--epoch'; did you mean --epochs? (see --help)"), std::string::npos) << msg;
  msg = error_of("bench", {"--bakends", "ring"});
  EXPECT_NE(msg.find("did you mean --backends?"), std::string::npos) << msg;
  msg = error_of("train", {"--segment", "64K"});  // the one option it begins
  EXPECT_NE(msg.find("did you mean --segment-bytes?"), std::string::npos) << msg;
  // nothing near: no guess (--synthetic begins four options)
  EXPECT_EQ(error_of("train", {"--synthetic", "3"}).find("did you mean"), std::string::npos);
  EXPECT_EQ(error_of("train", {"--bogus", "3"}).find("did you mean"), std::string::npos);
  EXPECT_EQ(error_of("train", {"--xy", "3"}).find("did you mean"), std::string::npos);
  EXPECT_NE(error_of("train", {"stray"}), "");
  // Options of other commands are not accepted on the command line.
  EXPECT_NE(error_of("env", {"--batch", "3"}).find("--batch"), std::string::npos);
  // env writes no record for a label (it was accepted and did nothing); bench's rows take it
  EXPECT_NE(error_of("env", {"--run-name", "x"}).find("--run-name"), std::string::npos);
  EXPECT_EQ(error_of("bench", {"--run-name", "x"}), "");
  EXPECT_NE(error_of("bench", {"--epochs", "3"}).find("--epochs"), std::string::npos);
  EXPECT_EQ(error_of("bench", {"-b", "1K", "-e", "4K"}), "");
  EXPECT_EQ(error_of("bench-model", {"-n", "3", "--json", "--hidden", "64", "--batch", "8"}), "");
  EXPECT_NE(error_of("bench-model", {"-b", "1K"}).find("-b"), std::string::npos);
}

// An option given without its value takes the next option as its value (Boost reads
// '--data-dir --epochs 1' as data-dir = '--epochs'): that is named, not 'unexpected argument
// '1'', nor accepted ('--run-name --epochs' ran with the label '--epochs' and the epochs unset).
TEST(Config, AnOptionWithoutItsValueNamesIt) {
  std::string msg = error_of("train", {"--data-dir", "--epochs", "1"});
  EXPECT_NE(msg.find("--data-dir needs a value"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'--epochs'"), std::string::npos) << msg;
  msg = error_of("train", {"--run-name", "--epochs=2"});
  EXPECT_NE(msg.find("--run-name needs a value"), std::string::npos) << msg;
  msg = error_of("bench", {"--backends", "--max-bytes", "4M"});
  EXPECT_NE(msg.find("--backends needs a value"), std::string::npos) << msg;
  // A value that only looks like an option is a value: not one of this command's options.
  EXPECT_EQ(error_of("train", {"--run-name", "--not-an-option"}), "");
  EXPECT_EQ(error_of("train", {"--lr", "-0.1"}).find("needs a value"), std::string::npos);
}

// A refused number is shown as given: at the stream's 6 digits 1000000.1 read "(got 1e+06)",
// a value inside the range the same line names, and 1.0000001 read "(got 1)".
TEST(Config, ARefusedNumberIsShownAsGiven) {
  EXPECT_EQ(error_of("train", {"--timeout", "1000000.1"}),
            "--timeout: must be > 0 and at most 1e6 seconds (got 1000000.1)");
  EXPECT_EQ(error_of("train", {"--momentum", "1.0000001"}),
            "--momentum: must be in [0, 1) (got 1.0000001)");
  EXPECT_EQ(error_of("train", {"--bucket-mb", "1048576.01"}),
            "--bucket-mb: must be > 0 and at most 1048576 (1 TiB) (got 1048576.01)");
  EXPECT_EQ(error_of("train", {"--bucket-mb", "2000000"}),
            "--bucket-mb: must be > 0 and at most 1048576 (1 TiB) (got 2000000)");
  EXPECT_EQ(error_of("train", {"--timeout", "3e6"}),
            "--timeout: must be > 0 and at most 1e6 seconds (got 3000000)");
  EXPECT_EQ(error_of("train", {"--lr", "-0.05"}), "--lr: must be finite and > 0 (got -0.05)");
  EXPECT_EQ(error_of("train", {"--batch", "0"}), "--batch: must be > 0 (got 0)");
}

TEST(Config, BadValuesNameTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch", "0"}, "--batch"},
      {{"--batch", "abc"}, "--batch"},
      {{"--batch=-4"}, "--batch"},
      {{"--hidden", "256,0"}, "--hidden"},
      {{"--hidden", "256,-1"}, "--hidden"},
      {{"--hidden", "256,,128"}, "--hidden"},
      {{"--hidden", "256,128,"}, "--hidden"},  // a width cut off, not 256,128
      {{"--progress", "fancy"}, "--progress"},
      {{"--metrics-loss", "mean"}, "--metrics-loss"},
      {{"--hidden", "2x"}, "--hidden"},
      {{"--hidden", "100000,100000"}, "--hidden"},
      {{"--preset", "huge"}, "--preset"},
      {{"--lr-scale", "cube"}, "--lr-scale"},
      {{"--consistency", "eventual"}, "--consistency"},
      {{"--compress", "int8"}, "--compress"},
      {{"--overlap", "maybe"}, "--overlap"},
      {{"--optimizer", "lamb"}, "--optimizer"},
      {{"--servers", "0"}, "--servers"},
      {{"--timeout", "0"}, "--timeout"},
      {{"--lr", "0"}, "--lr"},
      {{"--momentum", "1.5"}, "--momentum"},
      {{"--dataset", "cifar"}, "--dataset"},
      {{"--segment-bytes", "12X"}, "--segment-bytes"},
      {{"--segment-bytes", "63"}, "--segment-bytes"},    // the ring's minimum is 64
      {{"--segment-bytes", "2G"}, "--segment-bytes"},    // above 1G: MPI int counts
      {{"--ps-chunk-bytes", "2G"}, "--ps-chunk-bytes"},  // the parameter server's maximum
      {{"--seed", "-1"}, "--seed"},                      // Boost read it as 2^64 - 1
      {{"--seed", "18446744073709551616"}, "--seed"},
      {{"--seed", "4x"}, "--seed"},
      // train + test made as one int count (wrapped negative), and beyond any memory
      {{"--dataset", "synthetic", "--synthetic-train", "2147483647"}, "--synthetic-train"},
      {{"--dataset", "synthetic", "--synthetic-train", "2000000000", "--synthetic-dim", "100000"},
       "--synthetic-train"},
      {{"--straggler", "1"}, "--straggler"},
      {{"--fault", "explode:1:2"}, "--fault"},
      {{"--fault", "kill:+1:2"}, "--fault"},  // std::stoll's forms: refused here, not later
      {{"--fault", "kill: 1:2"}, "--fault"},
      {{"--hidden", "64", "--preset", "wide"}, "--preset"},
      // the default --data-dir holds Fashion-MNIST under the same file names as MNIST's
      {{"--dataset", "mnist"}, "--dataset mnist: give --data-dir"},
  };
  for (const auto& [args, option] : cases) {
    std::string msg = error_of("train", args);
    EXPECT_NE(msg.find(option), std::string::npos) << args[0] << " gave: '" << msg << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
  EXPECT_NE(error_of("bench", {"-b", "64M", "-e", "1M"})
                .find("-e/--max-bytes 1M is below -b/--min-bytes 64M"),
            std::string::npos);
  EXPECT_NE(error_of("bench", {"-f", "1"}).find("--factor"), std::string::npos);
  for (const char* b : {"0", "1", "3"})  // less than one float32
    EXPECT_EQ(error_of("bench", {"-b", b, "-e", "64"}),
              std::string("-b/--min-bytes: must be >= 4 (one float32 value) (got ") + b + ")");
  EXPECT_EQ(error_of("bench", {"-b", "4", "-e", "4"}), "");
  // nccl-tests' options the bench does not take say what it does instead
  EXPECT_EQ(error_of("bench", {"-d", "half"}),
            "starring bench: unrecognised option '-d'; nccl-tests' -d/--datatype is not offered: "
            "the bench always moves float32 (nccl-tests' -d float) (see --help)");
  for (const char* o : {"-o", "--op", "-i", "--stepbytes", "-a", "-r", "-g", "--nthreads"})
    EXPECT_NE(error_of("bench", {o, "1"}).find("is not offered: "), std::string::npos) << o;
  EXPECT_EQ(error_of("train", {"-d", "half"}).find("nccl-tests"), std::string::npos);
  // -c 2 was read as on: it is off or on, not a count of checked iterations
  EXPECT_NE(error_of("bench", {"-c", "2"}).find("--check: must be 0 or 1"), std::string::npos);
  EXPECT_NE(error_of("bench", {"--segment-bytes", "6"}).find("--segment-bytes"), std::string::npos);
  EXPECT_NE(
      error_of("bench", {"--backends", "ring,mpi,ring"}).find("--backends: 'ring' is listed twice"),
      std::string::npos);
  // A width past int is out of range, not 'not an integer'.
  EXPECT_NE(error_of("train", {"--hidden", "64,100000000000"})
                .find("--hidden: '100000000000' is out of an int's range (at most 2147483647"),
            std::string::npos)
      << error_of("train", {"--hidden", "64,100000000000"});
  EXPECT_NE(error_of("train", {"--hidden", "-100000000000"})
                .find("'-100000000000' is out of an int's range (at least -2147483648"),
            std::string::npos)
      << error_of("train", {"--hidden", "-100000000000"});
}

TEST(Config, SizeSuffixes) {
  EXPECT_EQ(parse_bytes("x", "4096"), 4096u);
  EXPECT_EQ(parse_bytes("x", "4K"), 4096u);
  EXPECT_EQ(parse_bytes("x", "4k"), 4096u);
  EXPECT_EQ(parse_bytes("x", "1M"), 1u << 20);
  EXPECT_EQ(parse_bytes("x", "64M"), 64u << 20);
  EXPECT_EQ(parse_bytes("x", "64MiB"), 64u << 20);
  EXPECT_EQ(parse_bytes("x", "2GB"), 2ull << 30);
  for (const char* bad : {"", "M", "1.5M", "-1K", "1T", "K1"})
    EXPECT_THROW(parse_bytes("x", bad), ConfigError) << bad;
  // a size past 64 bits says so, not that it is no byte size
  for (const char* big : {"99999999999G", "18446744073709551616", "17179869184G"})
    EXPECT_EQ(test::config_error([&] { parse_bytes("-e", big); }),
              std::string("-e: '") + big + "' is too large a byte size")
        << big;
  EXPECT_EQ(parse_bytes("x", "17179869183G"), 17179869183ull << 30);
  for (std::size_t v : {std::size_t(0), std::size_t(1000), std::size_t(4096), std::size_t(3) << 20,
                        std::size_t(1) << 30})
    EXPECT_EQ(parse_bytes("x", format_bytes(v)), v);
  EXPECT_EQ(format_bytes(1u << 20), "1M");

  Config cfg;
  ASSERT_TRUE(parse("bench",
                    {"-b", "4K", "-e", "64M", "-f", "4", "-n", "7", "-w", "2", "-c", "0", "--json",
                     "--backends", "ring, mpi"},
                    cfg));
  EXPECT_EQ(cfg.bench.min_bytes, 4096u);
  EXPECT_EQ(cfg.bench.max_bytes, 64u << 20);
  EXPECT_EQ(cfg.bench.factor, 4);
  EXPECT_EQ(cfg.bench.iters, 7);
  EXPECT_EQ(cfg.bench.warmup, 2);
  EXPECT_EQ(cfg.bench.check, 0);
  EXPECT_TRUE(cfg.bench.json);
  EXPECT_EQ(cfg.bench.backends, (std::vector<std::string>{"ring", "mpi"}));
}

TEST(Config, Presets) {
  EXPECT_EQ(parse_train({"--preset", "wide"}).model.hidden, (std::vector<int>{4096, 4096}));
  EXPECT_EQ(parse_train({"--preset", "default"}).model.hidden, (std::vector<int>{256, 128}));
  Config c = parse_train({"--hidden", "512"});
  EXPECT_EQ(c.model.preset, "custom");
  EXPECT_EQ(c.model.hidden, (std::vector<int>{512}));
  // --preset custom keeps the widths it is given; finalize_config is idempotent.
  c = parse_train({"--preset", "custom", "--hidden", "33,22"});
  finalize_config(c);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{33, 22}));

  // Widths set in code on a default Config make it custom; the wide preset always applies.
  Config code;
  code.model.hidden = {16};
  finalize_config(code);
  EXPECT_EQ(code.model.preset, "custom");
  EXPECT_EQ(code.model.hidden, std::vector<int>{16});
  code.model.preset = "wide";
  finalize_config(code);
  EXPECT_EQ(code.model.hidden, (std::vector<int>{4096, 4096}));

  // The wide preset is about 20M parameters on Fashion-MNIST (784 in, 10 out).
  const auto& h = parse_train({"--preset", "wide"}).model.hidden;
  double params = 784.0 * h[0] + h[0] + double(h[0]) * h[1] + h[1] + h[1] * 10.0 + 10;
  EXPECT_GT(params, 19e6);
  EXPECT_LT(params, 21e6);
}

TEST_F(ConfigFile, PresetAndHiddenAcrossSources) {
  std::string ini = write("p.ini", "hidden = 64,32\n");
  // INI hidden, command-line preset: the command line wins.
  EXPECT_EQ(parse_train({"--config", ini, "--preset", "wide"}).model.hidden,
            (std::vector<int>{4096, 4096}));
  EXPECT_EQ(parse_train({"--config", ini}).model.hidden, (std::vector<int>{64, 32}));
  std::string wide = write("w.ini", "preset = wide\n");
  Config c = parse_train({"--config", wide, "--hidden", "8"});
  EXPECT_EQ(c.model.hidden, (std::vector<int>{8}));
  EXPECT_EQ(c.model.preset, "custom");
  // INI hidden, command-line --preset custom: custom keeps the widths given anywhere (it trained
  // the default 256,128 without a word, the file's widths dropped).
  c = parse_train({"--config", ini, "--preset", "custom"});
  EXPECT_EQ(c.model.hidden, (std::vector<int>{64, 32}));
  EXPECT_EQ(c.model.preset, "custom");
  // ... and the same from one file.
  c = parse_train({"--config", write("c.ini", "preset = custom\nhidden = 64,32\n")});
  EXPECT_EQ(c.model.hidden, (std::vector<int>{64, 32}));
  // --preset custom with no widths anywhere: the default widths.
  EXPECT_EQ(parse_train({"--preset", "custom"}).model.hidden, (std::vector<int>{256, 128}));
}

TEST(Config, HelpReturnsFalseAndShowsOnlyRelevantGroups) {
  ::testing::internal::CaptureStdout();
  Config cfg;
  EXPECT_FALSE(parse("bench", {"--help"}, cfg));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("--min-bytes"), std::string::npos);
  EXPECT_NE(out.find("--backend"), std::string::npos);
  EXPECT_EQ(out.find("--epochs"), std::string::npos);

  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(parse("train", {"-h"}, cfg));
  out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("--epochs"), std::string::npos);
  EXPECT_NE(out.find("--consistency"), std::string::npos);
  EXPECT_EQ(out.find("--min-bytes"), std::string::npos);
}

}  // namespace
}  // namespace starring
