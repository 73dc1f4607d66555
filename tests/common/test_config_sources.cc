// Every option of every command, from both sources: for each option that `starring <command>
// --help` lists (train, bench, bench-model, env), a value A in the --config file is read (the
// option differs from its default), and the same option given B on the command line wins over
// the file's A (the result is the command line's alone). The table must name every listed
// option, so a new one is held to this too. Options are read as the code keeps them (a size as
// bytes, a list as its items), through one getter each.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "tests/common/config_test_util.h"
#include "tests/scratch_dir.h"

namespace starring {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::string text(const T& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
template <typename T>
std::string text(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += text(x) + ",";
  return s;
}

struct Option {
  std::string a, b;  // two values, both away from the default
  std::function<std::string(const Config&)> get;
  std::vector<std::string> with = {};  // other options it needs, on the command line of every parse
};

#define GET(field) [](const Config& c) { return text(c.field); }

// option -> {file's value, command line's value, getter}
const std::map<std::string, Option>& options() {
  static const std::map<std::string, Option> table{
      {"run-name", {"from-file", "from-line", GET(out.run_name)}},
      {"dataset", {"mnist", "synthetic", GET(data.dataset), {"--data-dir", "/tmp/mnist"}}},
      {"data-dir", {"/tmp/a", "/tmp/b", GET(data.data_dir)}},
      {"synthetic-train", {"100", "200", GET(data.synthetic_train)}},
      {"synthetic-test", {"10", "20", GET(data.synthetic_test)}},
      {"synthetic-dim", {"8", "9", GET(data.synthetic_dim)}},
      {"synthetic-classes", {"3", "4", GET(data.synthetic_classes)}},
      {"preset", {"wide", "custom", GET(model.preset)}},
      {"hidden", {"8,4", "16", GET(model.hidden)}},
      {"epochs", {"3", "4", GET(train.epochs)}},
      {"max-steps", {"30", "40", GET(train.max_steps)}},
      {"untimed-steps", {"2", "3", GET(train.untimed_steps)}},
      {"batch", {"8", "16", GET(train.batch)}},
      {"accum", {"2", "3", GET(train.accum)}},
      {"lr", {"0.1", "0.2", GET(train.lr)}},
      {"lr-scale", {"linear", "sqrt", GET(train.lr_scale)}},
      {"warmup-steps", {"5", "6", GET(train.warmup_steps)}},
      {"lr-schedule", {"cosine", "constant", GET(train.lr_schedule)}},
      {"optimizer", {"adamw", "sgd", GET(train.opt.type)}},
      {"momentum", {"0.5", "0.6", GET(train.opt.momentum)}},
      {"weight-decay", {"0.01", "0.02", GET(train.opt.weight_decay)}},
      {"beta1", {"0.8", "0.7", GET(train.opt.beta1)}},
      {"beta2", {"0.99", "0.98", GET(train.opt.beta2)}},
      {"eps", {"1e-6", "1e-7", GET(train.opt.eps)}},
      {"eval-each-epoch", {"false", "true", GET(train.eval_each_epoch)}},
      {"straggler", {"0:10", "1:20", GET(train.straggler)}},
      {"fault", {"kill:1:5", "hang:0:3", GET(train.fault)}},
      {"seed", {"7", "8", GET(train.seed)}},
      {"device", {"auto", "cpu", GET(train.device)}},
      {"threads", {"2", "1", GET(train.threads)}},
      {"timeout", {"30", "40", GET(sync.timeout_s)}},
      {"metrics-file", {"a.jsonl", "b.jsonl", GET(out.metrics_file)}},
      {"metrics-loss", {"worker0", "all", GET(out.metrics_loss)}},
      {"summary-file", {"a.json", "b.json", GET(out.summary_file)}},
      {"trace", {"a.%r.json", "b.%r.json", GET(out.trace_file)}},
      {"progress", {"off", "lines", GET(out.progress)}},
      {"log-every", {"10", "20", GET(out.log_every)}},
      {"checkpoint-dir", {"ck-a", "ck-b", GET(ckpt.dir)}},
      {"checkpoint-every", {"10", "20", GET(ckpt.every), {"--checkpoint-dir", "ck"}}},
      {"keep-checkpoints", {"3", "4", GET(ckpt.keep)}},
      {"resume", {"latest", "auto", GET(ckpt.resume), {"--checkpoint-dir", "ck"}}},
      {"backend", {"ring", "ps", GET(sync.backend)}},
      {"bucket-mb", {"4", "8", GET(sync.bucket_mb)}},
      {"overlap", {"off", "on", GET(sync.overlap)}},
      {"compress", {"fp16", "bf16", GET(sync.compress)}},
      {"segment-bytes", {"64K", "128K", GET(sync.segment_bytes)}},
      {"nccl-force-ring", {"true", "false", GET(sync.nccl_force_ring)}},
      {"servers", {"2", "colocated", GET(sync.servers)}},
      {"ps-partition", {"tensor", "range", GET(sync.ps_partition)}},
      {"ps-chunk-bytes", {"1M", "2M", GET(sync.ps_chunk_bytes)}},
      {"ps-shared-memory", {"off", "on", GET(sync.ps_shared_memory)}},
      {"consistency", {"ssp", "asp", GET(sync.consistency)}},
      {"staleness", {"3", "4", GET(sync.staleness)}},
      {"iters", {"3", "4", GET(bench.iters)}},
      {"warmup", {"1", "2", GET(bench.warmup)}},
      {"json", {"true", "false", GET(bench.json)}},
      {"mode", {"overlap", "bandwidth", GET(bench.mode)}},
      {"compute", {"sleep", "busy,serial", GET(bench.compute)}},
      {"min-bytes", {"4K", "8K", GET(bench.min_bytes)}},
      {"max-bytes", {"1M", "2M", GET(bench.max_bytes)}},
      {"factor", {"4", "8", GET(bench.factor)}},
      {"check", {"0", "1", GET(bench.check)}},
      {"backends", {"ring", "mpi,ps", GET(bench.backends)}},
      {"memcpy-baseline", {"false", "true", GET(bench.memcpy_baseline)}},
  };
  return table;
}

#undef GET

// The long names of the options `starring <command> --help` lists (its option column).
std::set<std::string> listed(const std::string& command) {
  std::ostringstream help;
  Config cfg;
  const char* argv[] = {command.c_str(), "--help"};
  EXPECT_FALSE(parse_config(command, 2, argv, cfg, &help));
  std::set<std::string> names;
  static const std::regex option(R"(^  (?:-\w \[ )?--([a-z0-9-]+))");
  std::istringstream lines(help.str());
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, option)) names.insert(m[1]);
  names.erase("help");
  names.erase("config");
  return names;
}

TEST(ConfigSources, EveryOptionFromTheFileAndTheCommandLineWins) {
  const fs::path ini = fs::path(testing::scratch_dir("sources")) / "sources.ini";
  std::set<std::string> all;
  for (const std::string command : {"train", "bench", "bench-model", "env"}) {
    const std::set<std::string> names = listed(command);
    all.insert(names.begin(), names.end());
    EXPECT_GE(names.size(), command == std::string("env") ? 2u : 10u) << command;
    for (const auto& name : names) {
      const auto it = options().find(name);
      if (it == options().end()) {
        ADD_FAILURE() << "--" << name << " (starring " << command
                      << ") is not in this test's table";
        continue;
      }
      const Option& o = it->second;
      std::ofstream(ini) << "[section]\n" << name << " = " << o.a << "\n";
      const std::string what = "starring " + command + " --" + name;
      Config dflt, file, line, both;
      const std::string error = test::config_error([&] {
        auto args = [&](std::vector<std::string> a) {
          a.insert(a.end(), o.with.begin(), o.with.end());
          return a;
        };
        dflt = test::parse(command, args({}));
        file = test::parse(command, args({"--config", ini.string()}));
        line = test::parse(command, args({"--" + name, o.b}));
        both = test::parse(command, args({"--config", ini.string(), "--" + name, o.b}));
      });
      if (!error.empty()) {
        ADD_FAILURE() << what << ": " << error;
        continue;
      }
      EXPECT_NE(o.get(file), o.get(dflt)) << what << " = " << o.a << " in the file is not read";
      EXPECT_NE(o.get(line), o.get(file)) << what << ": the table's two values read the same";
      EXPECT_EQ(o.get(both), o.get(line)) << what << " " << o.b << " does not win over the file";
      EXPECT_EQ(file.from_ini.count(name), 1u) << what;
      EXPECT_EQ(both.from_ini.count(name), 0u) << what;
    }
  }
  fs::remove(ini);
  for (const auto& [name, o] : options())  // no entry for an option that no longer exists
    EXPECT_EQ(all.count(name), 1u) << "--" << name << " is listed by no command";
}

}  // namespace
}  // namespace starring
