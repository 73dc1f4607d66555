// Config: every option of every sub-command, in one plain struct passed explicitly (no globals,
// no environment variables). Parsed by parse_config() in common/config.cc from the command line
// and, with --config FILE, from an INI file (command line wins). Options are grouped by the part
// of the project that reads them.
#pragma once
#include <cstdint>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "common/optimizer.h"

namespace starring {

struct DataConfig {
  std::string dataset = "fashion-mnist";  // "fashion-mnist" | "mnist" (give data_dir) | "synthetic"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int synthetic_train = 8192;  // synthetic: samples
  int synthetic_test = 2048;
  int synthetic_dim = 784;
  int synthetic_classes = 10;
};

struct ModelConfig {
  std::string preset = "default";  // "default" (hidden 256,128) | "wide" (~20M params) | "custom"
  std::vector<int> hidden{256, 128};
  // --preset was given (command line or --config file): `bench-model` then times that model alone
  bool preset_given = false;
};

struct TrainConfig {
  int epochs = 10;
  std::int64_t max_steps = -1;    // stop after this many optimizer steps (-1: run all epochs)
  int untimed_steps = 5;          // first steps left out of throughput and step times (at most 1/4)
  int batch = 64;                 // per worker, per micro-batch
  int accum = 1;                  // gradient accumulation micro-batches per optimizer step
  float lr = 0.05f;               // base learning rate (for one worker)
  std::string lr_scale = "none";  // "none" | "linear" | "sqrt" in the number of workers
  int warmup_steps = 0;           // linear warm-up from lr (step 1) to the scaled lr (step w+1)
  std::string lr_schedule = "constant";  // "constant" | "cosine"
  OptimizerConfig opt;
  std::uint64_t seed = 42;     // init, data order, synthetic data: the same on every rank
  std::string device = "cpu";  // "cpu" | "cuda" | "auto"
  int threads = 1;             // OpenBLAS threads per rank
  bool eval_each_epoch = true;
  std::string straggler;  // "RANK:MS" | "any:MS": one worker sleeps MS ms a step (straggler.h)
  std::string fault;      // "kill|hang|stop:RANK:STEP" for fault tests (trainer/straggler.h)
};

struct OutputConfig {
  std::string metrics_file;  // JSON lines, written by rank 0 (empty: none)
  // "all": each step line also carries every worker's loss (mean, min, max; trainer/step_losses.h)
  // "worker0": worker 0's alone, no messages
  std::string metrics_loss = "all";
  std::string summary_file;       // one JSON object at the end (empty: none)
  std::string trace_file;         // Chrome trace; "%r" replaced by the rank (empty: none)
  std::string progress = "auto";  // "auto" | "bar" | "lines" | "off"
  int log_every = 50;             // steps between progress lines when not a terminal
  std::string run_name;
};

struct SyncConfig {
  std::string backend = "local";  // registry name: local | ring | ring-p2p | mpi | nccl | ps
  double timeout_s = 60.0;        // every wait
  double bucket_mb = 25.0;        // gradient bucket size (ring/mpi/nccl, and PS push granularity)
  bool overlap = true;            // start a bucket's sync while backward continues
  std::string compress = "none";  // "none" | "fp16" | "bf16"
  std::size_t segment_bytes = 1 << 20;  // ring pipelining segment
  bool nccl_force_ring = false;         // set NCCL_ALGO=Ring for the communicator
  // parameter server
  std::string servers = "1";           // number of dedicated server ranks, or "colocated"
  std::string ps_partition = "range";  // "range" (balanced key ranges) | "tensor" (round-robin)
  std::size_t ps_chunk_bytes = 4 << 20;
  bool ps_shared_memory = true;  // workers and servers on one host exchange data in shared memory
  std::string consistency = "bsp";  // "bsp" | "asp" | "ssp"
  int staleness = 2;                // ssp bound
};

// Checkpoints (trainer/checkpoint.h): one file per checkpoint, written by worker 0.
struct CheckpointConfig {
  std::string dir;         // where checkpoints are written (empty: none)
  std::int64_t every = 0;  // optimizer steps between checkpoints (0: only at the end)
  int keep = 2;            // newest checkpoints kept in `dir`; older ones are deleted
  std::string resume;      // a checkpoint file, "latest" (newest valid one in `dir`) or "auto"
};

struct BenchConfig {
  std::size_t min_bytes = 1 << 20;   // -b
  std::size_t max_bytes = 64 << 20;  // -e
  int factor = 2;                    // -f
  int iters = 20;                    // -n
  int warmup = 5;                    // -w
  int check = 1;                     // -c
  bool json = false;
  std::vector<std::string> backends;  // several backends side by side in one run
  bool memcpy_baseline = true;
  // --mode overlap: the overlap benchmark (experiments/bench_overlap.h) instead of bandwidth
  std::string mode = "bandwidth";                               // "bandwidth" | "overlap"
  std::vector<std::string> compute{"sleep", "busy", "serial"};  // overlap: compute kinds
};

struct Config {
  std::string command;             // "train" | "bench" | "bench-model" | "env"
  std::string config_file;         // the INI file read, if any
  std::set<std::string> from_ini;  // options whose value came from it (not the command line)
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  OutputConfig out;
  SyncConfig sync;
  BenchConfig bench;
  CheckpointConfig ckpt;
};

// Parses `argv` for sub-command `command`; argv[0] is skipped (main passes argv + 1, so it is
// the command name). Throws ConfigError with one clear line for unknown flags, bad values,
// unreadable INI files. Returns false for --help, after printing the help to `help_out` (pass
// nullptr on ranks other than 0 so that a multi-rank job prints it once). Calls finalize_config.
bool parse_config(const std::string& command, int argc, const char* const* argv, Config& cfg,
                  std::ostream* help_out = &std::cout);

// Resolves the model preset into hidden widths ("wide" -> 4096,4096; "custom" keeps `hidden`;
// "default" -> 256,128, or becomes "custom" when code changed `hidden` from 256,128) and
// validates everything that can be validated without data; throws ConfigError. Idempotent.
void finalize_config(Config& cfg);

// `starring train` only (common/config_use.cc): refuses, with one ConfigError line naming the
// option, an option set away from its default on the command line that this run would ignore
// (--staleness without ssp, a parameter-server option with another backend, --momentum with
// adamw, --warmup-steps with --lr-scale none, ...) or a --straggler RANK that is not one of the
// `workers`. Such an option set in the --config file is not an error (one INI serves several
// backends, and a command line may switch what it sets up): it is returned as a note to print.
std::vector<std::string> check_train_options_apply(const Config& cfg, int workers);

// `starring bench` (common/config_use.cc), by the same rule: --bucket-mb, --overlap, --compute
// and --consistency outside --mode overlap (the bandwidth table times one buffer's bare
// all-reduce or push-pull), --staleness without ssp, a parameter-server option when --backends
// lists no ps (--servers: no dedicated-server ps), --segment-bytes without a ring,
// --nccl-force-ring without nccl, and --backend beside --backends are refused (notes from the
// --config file).
std::vector<std::string> check_bench_options_apply(const Config& cfg);

// `train` and `bench` (common/config_use.cc): a size the run uses other than as given, one note
// each for rank 0 to print, saying what is used and the nearest valid values (the values are
// accepted, as nccl-tests and BytePS accept sizes they align): --segment-bytes not a multiple of
// 64 (the ring's segments are whole blocks of 16 floats) or, set for backend 'ring', outside the
// shared-memory ring's 4K..256K; --ps-chunk-bytes not a multiple of 4 (whole floats); bench -b
// not a multiple of 4 (its messages are whole floats). Only for backends the command runs.
std::vector<std::string> size_notes(const Config& cfg);

}  // namespace starring
