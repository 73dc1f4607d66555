// Command-line and INI parsing for every `starring` sub-command (Boost.Program_options).
//
// One scheme, both sources:
//  - Every option has a long kebab-case name (`--batch`, `--lr-scale`, ...). The same name is the
//    key in an INI file given with `--config FILE`:   batch = 64
//  - INI section headers (`[train]`, `[sync]`, ...) are labels for the reader only: they are
//    ignored, so `[train] batch = 64` and a bare `batch = 64` mean the same. Comments start with
//    '#' or ';' at the start of a line or after a blank (elsewhere they are part of the value, as
//    on the command line). Booleans take true/false, on/off, yes/no, 1/0.
//  - The command line wins over the INI file; the INI file wins over the built-in defaults.
//  - The command line accepts only the option groups relevant to the sub-command (those shown
//    by `starring <command> --help`); an INI file may hold any known option, so one experiment
//    file can serve `train` and `bench` alike.
//  - `--hidden` sets the preset to "custom"; `--preset` and `--hidden` from the same source
//    conflict unless the preset is "custom"; otherwise the one from the higher source wins
//    (`--preset custom` keeps the widths given anywhere, default 256,128).
// Values are checked in finalize_config (common/config_check.cc); every problem throws one
// ConfigError line naming the option.
#include "common/config.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <type_traits>
#include <vector>

#include "common/config_detail.h"
#include "common/config_ini.h"
#include "common/error.h"

namespace starring {
namespace po = boost::program_options;
namespace {

// Options read as text first, converted and checked after parsing.
struct Staged {
  std::string hidden, overlap, segment_bytes, ps_chunk_bytes, ps_shm, min_bytes, max_bytes,
      backends, compute, seed;
};

template <typename T>
po::typed_value<T>* val(T* field) {
  if constexpr (std::is_floating_point_v<T>) {
    // Shown as the shortest text that reads back as the same value (0.05, not 0.0500000007).
    return po::value<T>(field)->default_value(*field, format_number(*field));
  } else {
    return po::value<T>(field)->default_value(*field);
  }
}
// A bool that may be given bare (`--json`) or with a value (`--json=false`, INI `json = off`).
po::typed_value<bool>* flag(bool* field) {
  return po::value<bool>(field)
      ->default_value(*field, *field ? "true" : "false")
      ->implicit_value(true, "true");
}
po::typed_value<std::string>* text(std::string* s, const std::string& shown) {
  return po::value<std::string>(s)->default_value(shown);
}

// All option groups. Which are shown and accepted on the command line depends on the command.
struct Groups {
  po::options_description general{"General"}, data{"Data"}, model{"Model"}, train{"Training"},
      runtime{"Runtime"}, output{"Output"}, ckpt{"Checkpoints"}, sync{"Gradient sync"},
      ps{"Parameter server (--backend ps)"}, timing{"Benchmark timing"},
      sizes{"Benchmark message sizes"};

  Groups(Config& c, Staged& s) {
    general.add_options()("help,h", "show this help and exit")(
        "config", po::value(&c.config_file)->value_name("FILE"),
        "INI file of options (keys = long option names; the command line wins)")(
        "run-name", val(&c.out.run_name),
        "a label copied into the summary (train) and the --json rows (bench, bench-model)");
    add_data(c.data);
    add_model(c.model, s);
    add_train(c.train);
    runtime.add_options()(
        "seed", text(&s.seed, std::to_string(c.train.seed)),
        "seed of the initial parameters, the data order (with the epoch), synthetic "
        "data and --straggler any: the same on every rank")(
        "device", val(&c.train.device), "cpu | cuda | auto (no usable GPU: falls back to cpu)")(
        "threads", val(&c.train.threads),
        "OpenBLAS threads per rank (at most the library's MAX_THREADS)")(
        "timeout", val(&c.sync.timeout_s), "seconds any wait may block before failing");
    output.add_options()("metrics-file", val(&c.out.metrics_file),
                         "JSON-lines metrics, one line per step and per evaluation (worker 0)")(
        "metrics-loss", val(&c.out.metrics_loss),
        "all (each step line adds global_loss, loss_min, loss_max over the workers, gathered "
        "off the step's path) | worker0 (worker 0's loss alone, no messages)")(
        "summary-file", val(&c.out.summary_file),
        "one JSON summary at the end (rank 0, schema starring.run.v1)")(
        "trace", val(&c.out.trace_file), "Chrome trace file per rank ('%r' = rank)")(
        "progress", val(&c.out.progress), "auto | bar | lines | off")(
        "log-every", val(&c.out.log_every), "steps between progress lines when not a terminal");
    add_checkpoint(c.ckpt);
    add_sync(c.sync, s);
    add_bench(c.bench, s);
  }

  void add_checkpoint(CheckpointConfig& k) {
    ckpt.add_options()("checkpoint-dir", val(&k.dir),
                       "write checkpoints here (worker 0), and one at the end of training")(
        "checkpoint-every", val(&k.every),
        "optimizer steps between checkpoints (0: only at the end)")(
        "keep-checkpoints", val(&k.keep), "newest checkpoints kept in --checkpoint-dir")(
        "resume", val(&k.resume),
        "PATH (a checkpoint file), 'latest' (newest valid one in --checkpoint-dir) or 'auto' "
        "(latest, or a fresh run while the folder holds none: a requeued job's one command)");
  }

  void add_data(DataConfig& d) {
    data.add_options()("dataset", val(&d.dataset),
                       "fashion-mnist | mnist (IDX files in --data-dir) | synthetic")(
        "data-dir", val(&d.data_dir), "folder of the IDX files (.gz or plain)")(
        "synthetic-train", val(&d.synthetic_train), "synthetic: training samples")(
        "synthetic-test", val(&d.synthetic_test), "synthetic: test samples")(
        "synthetic-dim", val(&d.synthetic_dim), "synthetic: features per sample")(
        "synthetic-classes", val(&d.synthetic_classes), "synthetic: classes");
  }
  void add_model(ModelConfig& m, Staged& s) {
    model.add_options()("preset", val(&m.preset),
                        "default (hidden 256,128) | wide (4096,4096, ~20M params) | custom")(
        "hidden", text(&s.hidden, join_ints(m.hidden)),
        "hidden widths, comma-separated, e.g. 256,128 (sets --preset custom)");
  }
  void add_train(TrainConfig& t) {
    train.add_options()("epochs", val(&t.epochs), "passes over the training set")(
        "max-steps", val(&t.max_steps), "stop after this many optimizer steps (-1: all epochs)")(
        "untimed-steps", val(&t.untimed_steps),
        "first steps left out of samples/s and step times (one-time costs: GPU kernel loading, "
        "first-touch memory); at most a quarter of the run's steps")(
        "batch", val(&t.batch), "samples per worker per micro-batch")(
        "accum", val(&t.accum), "micro-batches accumulated per optimizer step")(
        "lr", val(&t.lr), "base learning rate (one worker)")(
        "lr-scale", val(&t.lr_scale), "none | linear | sqrt: scale lr with the number of workers")(
        "warmup-steps", val(&t.warmup_steps), "linear warm-up steps to the scaled lr")(
        "lr-schedule", val(&t.lr_schedule),
        "constant | cosine (half a cosine after the warm-up, to 0 one step after the last)")(
        "optimizer", val(&t.opt.type), "sgd (with momentum) | adamw")(
        "momentum", val(&t.opt.momentum), "sgd momentum")("weight-decay", val(&t.opt.weight_decay),
                                                          "sgd: L2; adamw: decoupled")(
        "beta1", val(&t.opt.beta1), "adamw beta1")("beta2", val(&t.opt.beta2), "adamw beta2")(
        "eps", val(&t.opt.eps), "adamw epsilon")("eval-each-epoch", flag(&t.eval_each_epoch),
                                                 "evaluate on the test set after each epoch")(
        "straggler", val(&t.straggler),
        "RANK:MS: worker RANK sleeps MS ms every step; any:MS: one worker drawn at random per step "
        "sleeps MS ms")(
        "fault", val(&t.fault),
        "kill:RANK:STEP: rank RANK dies (SIGKILL) at step STEP; hang:RANK:STEP: it stays alive "
        "but stops communicating; stop:RANK:STEP: worker RANK asks to stop from step STEP on, as "
        "SIGUSR1 does (fault tests)");
  }
  void add_sync(SyncConfig& y, Staged& s) {
    sync.add_options()("backend", val(&y.backend), "local | ring | ring-p2p | mpi | nccl | ps")(
        "bucket-mb", val(&y.bucket_mb),
        "largest gradient bucket in MiB (buckets of whole tensors)")(
        "overlap", text(&s.overlap, y.overlap ? "on" : "off"),
        "on | off: sync buckets while backward runs")(
        "compress", val(&y.compress), "none | fp16 | bf16 on the wire (ring and ring-p2p only)")(
        "segment-bytes", text(&s.segment_bytes, format_bytes(y.segment_bytes)),
        "ring pipelining segment, 64 to 1G (e.g. 1M)")("nccl-force-ring", flag(&y.nccl_force_ring),
                                                       "force NCCL's ring algorithm");
    ps.add_options()("servers", val(&y.servers),
                     "N dedicated server ranks (the last N: ranks = workers + N), or 'colocated' "
                     "(a server shard in every worker)")(
        "ps-partition", val(&y.ps_partition), "range (balanced by bytes) | tensor (round-robin)")(
        "ps-chunk-bytes", text(&s.ps_chunk_bytes, format_bytes(y.ps_chunk_bytes)),
        "push/pull message chunk (e.g. 4M)")(
        "ps-shared-memory", text(&s.ps_shm, y.ps_shared_memory ? "on" : "off"),
        "on | off: on one host, push/pull data through shared memory (off: in MPI messages, as "
        "between hosts)")("consistency", val(&y.consistency), "bsp | asp | ssp")(
        "staleness", val(&y.staleness), "ssp: max clocks ahead of the slowest worker");
  }
  void add_bench(BenchConfig& b, Staged& s) {
    timing.add_options()("iters,n", val(&b.iters), "timed iterations")(
        "warmup,w", val(&b.warmup), "untimed warm-up iterations")(
        "json", flag(&b.json),
        "print each result as a JSON line (bench: beside the table; bench-model: instead of it)")(
        "mode", val(&b.mode),
        "bandwidth (nccl-tests table) | overlap (communication/computation overlap, OSU-style)")(
        "compute", text(&s.compute, "sleep,busy,serial"),
        "--mode overlap: compute kinds, comma list of sleep | busy | serial (the control)");
    sizes.add_options()("min-bytes,b", text(&s.min_bytes, format_bytes(b.min_bytes)),
                        "smallest message (K/M/G suffixes)")(
        "max-bytes,e", text(&s.max_bytes, format_bytes(b.max_bytes)), "largest message")(
        "factor,f", val(&b.factor), "size multiplier between rows")(
        "check,c", val(&b.check),
        "check results against the closed form (0: off; #wrong then reads N/A)")(
        "backends", text(&s.backends, ""),
        "comma list side by side (default: --backend; ring when that is local): ring, "
        "ring-p2p, mpi, nccl, ps, "
        "ps-colocated; NAME@N runs on ranks 0..N-1 only; mpi-nothread with --mode overlap")(
        "memcpy-baseline", flag(&b.memcpy_baseline), "measure memcpy bandwidth for reference");
  }

  // The named options of a group only, for a command that uses a few of them.
  static po::options_description pick(const std::string& caption, const po::options_description& g,
                                      std::initializer_list<const char*> names) {
    po::options_description out(caption);
    for (const char* name : names)
      for (const auto& o : g.options())
        if (o->long_name() == name) out.add(o);
    return out;
  }

  // The groups a command shows and accepts on its command line: only options it uses, so a
  // flag that would do nothing there (bench --summary-file) is an error, not silently ignored.
  // An INI file may still hold any option (one file can serve every command).
  void select(const std::string& command, po::options_description& out) const {
    // env writes no record for --run-name to label
    out.add(command == "env" ? pick("General", general, {"help", "config"}) : general);
    if (command == "train") {
      out.add(data).add(model).add(train).add(runtime).add(output).add(ckpt).add(sync).add(ps);
    } else if (command == "bench") {
      // its data is a closed form of (rank, index): no --seed
      out.add(pick("Runtime", runtime, {"device", "threads", "timeout"}))
          .add(sync)
          .add(ps)
          .add(timing)
          .add(sizes);
    } else if (command == "bench-model" || command == "bench_model") {
      out.add(model)
          .add(pick("Training step", train,
                    {"batch", "optimizer", "momentum", "weight-decay", "beta1", "beta2", "eps"}))
          .add(runtime)
          .add(pick("Benchmark timing", timing, {"iters", "warmup", "json"}));
    } else if (command == "env") {
      out.add(pick("Runtime", runtime, {"threads", "timeout"}));
    } else {
      all(out, false);
    }
  }
  void all(po::options_description& out, bool with_general) const {
    if (with_general) out.add(general);
    out.add(data)
        .add(model)
        .add(train)
        .add(runtime)
        .add(output)
        .add(ckpt)
        .add(sync)
        .add(ps)
        .add(timing)
        .add(sizes);
  }
};

// An unsigned 64-bit seed. Read as text: Boost converts '-1' to 2^64 - 1 without a word.
std::uint64_t parse_seed(const std::string& text) {
  const std::string t = trim(text);
  std::uint64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size())
    throw ConfigError(
        detail::concat("--seed: '", text, "' is not an integer from 0 to 18446744073709551615"));
  return v;
}

// Where an option's value came from: 2 command line, 1 INI file, 0 default.
int source_of(const std::string& name, const po::parsed_options& cmd,
              const po::parsed_options* ini) {
  for (const auto& o : cmd.options)
    if (o.string_key == name) return 2;
  if (ini)
    for (const auto& o : ini->options)
      if (o.string_key == name) return 1;
  return 0;
}

void apply_staged(const Staged& s, const po::parsed_options& cmd, const po::parsed_options* ini,
                  Config& cfg) {
  int hidden_src = source_of("hidden", cmd, ini), preset_src = source_of("preset", cmd, ini);
  if (hidden_src > 0 && hidden_src == preset_src && cfg.model.preset != "custom")
    throw ConfigError(detail::concat("--hidden and --preset ", cfg.model.preset,
                                     " both given: --hidden means --preset custom"));
  auto given = [&](const char* name) { return source_of(name, cmd, ini) > 0; };
  cfg.model.preset_given = preset_src > 0;
  // The widths apply where they outrank the preset, or where the preset that won is custom (INI
  // widths with --preset custom on the command line: the file's widths, not the default ones).
  if (hidden_src > 0 && (hidden_src >= preset_src || cfg.model.preset == "custom")) {
    cfg.model.hidden = parse_int_list("--hidden", s.hidden);
    if (hidden_src > preset_src) cfg.model.preset = "custom";
  } else if (preset_src > 0 && cfg.model.preset != "custom") {
    cfg.model.hidden = preset_hidden(cfg.model.preset);  // a higher source chose a preset
  }
  if (given("seed")) cfg.train.seed = parse_seed(s.seed);
  if (given("overlap")) cfg.sync.overlap = parse_on_off("--overlap", s.overlap);
  if (given("segment-bytes"))
    cfg.sync.segment_bytes = parse_bytes("--segment-bytes", s.segment_bytes);
  if (given("ps-chunk-bytes"))
    cfg.sync.ps_chunk_bytes = parse_bytes("--ps-chunk-bytes", s.ps_chunk_bytes);
  if (given("ps-shared-memory"))
    cfg.sync.ps_shared_memory = parse_on_off("--ps-shared-memory", s.ps_shm);
  if (given("min-bytes")) cfg.bench.min_bytes = parse_bytes("--min-bytes", s.min_bytes);
  if (given("max-bytes")) cfg.bench.max_bytes = parse_bytes("--max-bytes", s.max_bytes);
  if (given("backends")) cfg.bench.backends = split_list("--backends", s.backends);
  if (given("compute")) cfg.bench.compute = split_list("--compute", s.compute);
  cfg.from_ini.clear();
  if (ini)
    for (const auto& o : ini->options)
      if (source_of(o.string_key, cmd, ini) == 1) cfg.from_ini.insert(o.string_key);
}

// nccl-tests' all_reduce_perf options that `starring bench` does not take, and what it does
// instead: a user of nccl-tests types them first, and '-d half' read only "unrecognised option".
std::string nccl_tests_hint(std::string name) {
  name.erase(0, name.find_first_not_of('-'));
  static const char* const kHints[][3] = {
      {"d", "datatype", "the bench always moves float32 (nccl-tests' -d float)"},
      {"o", "op", "the bench always sums (nccl-tests' -o sum)"},
      {"i", "stepbytes", "sizes grow by -f/--factor only (no linear steps)"},
      {"a", "average", "time is always the slowest worker's mean (nccl-tests' -a 3)"},
      {"r", "root", "all-reduce and push-pull have no root"},
      {"g", "ngpus", "one buffer per rank: start more ranks (mpirun -np)"},
      {"t", "nthreads", "one buffer per rank: start more ranks (mpirun -np)"},
  };
  for (const auto& h : kHints)
    if (name == h[0] || name == h[1])
      return detail::concat("; nccl-tests' -", h[0], "/--", h[1], " is not offered: ", h[2]);
  return "";
}

// An option given without its value takes the next word as its value, even another option:
// '--data-dir --epochs 1' reads as data-dir = '--epochs' and a stray '1'. A value that is one of
// this command's long options (bare or as --name=value) is named as the missing value instead.
void check_no_option_as_value(const std::string& command, const po::parsed_options& cmd,
                              const po::options_description& visible) {
  for (const auto& o : cmd.options) {
    if (o.unregistered || o.position_key >= 0 || o.value.size() != 1) continue;
    const std::string& v = o.value[0];
    if (v.size() < 3 || v.compare(0, 2, "--") != 0) continue;
    const std::string name = v.substr(2, v.find('=') - 2);
    if (visible.find_nothrow(name, false))
      throw ConfigError(detail::concat("starring ", command, ": --", o.string_key,
                                       " needs a value (it got the option '", v, "'; see --help)"));
  }
}

}  // namespace

bool parse_config(const std::string& command, int argc, const char* const* argv, Config& cfg,
                  std::ostream* help_out) {
  cfg.command = command;
  Staged staged;
  Groups groups(cfg, staged);
  po::options_description visible("Usage: starring " + command + " [options]");
  groups.select(command, visible);
  po::options_description all;
  groups.all(all, true);  // --run-name too ('config' and 'help' parse_ini refuses by name)

  po::variables_map vm;
  po::parsed_options cmd(nullptr);
  po::parsed_options ini(nullptr);
  bool have_ini = false;
  try {
    int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    cmd = po::command_line_parser(argc, argv).options(visible).style(style).run();
    check_no_option_as_value(command, cmd, visible);
    auto stray = po::collect_unrecognized(cmd.options, po::include_positional);
    if (!stray.empty())
      throw ConfigError(detail::concat("starring ", command, ": unexpected argument '", stray[0],
                                       "' (options start with --; see --help)"));
    po::store(cmd, vm);
    if (vm.count("help")) {
      if (help_out) *help_out << visible << std::endl;
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      ini = parse_ini(path, all);
      have_ini = true;
      try {
        po::store(ini, vm);
      } catch (const po::error& e) {
        throw ConfigError(detail::concat(path, ": ", e.what()));
      }
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::string hint = command == "bench" ? nccl_tests_hint(e.get_option_name()) : "";
    if (hint.empty()) hint = did_you_mean(e.get_option_name(), visible, "--");
    throw ConfigError(detail::concat("starring ", command, ": ", e.what(), hint, " (see --help)"));
  } catch (const po::error& e) {
    throw ConfigError(detail::concat("starring ", command, ": ", e.what(), " (see --help)"));
  }
  apply_staged(staged, cmd, have_ini ? &ini : nullptr, cfg);
  finalize_config(cfg);
  return true;
}

}  // namespace starring
