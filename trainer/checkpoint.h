// Checkpoints: save a training run and resume it, bit for bit, on any backend.
//
// A checkpoint is one file, written by worker 0 (what PyTorch DDP users do: rank 0 saves, every
// rank loads). Layout (little-endian):
//   0   8 bytes  magic "STARCKPT"
//   8   u32      format version (kCheckpointVersion)
//   12  u32      0 (reserved)
//   16  u64      M, bytes of the JSON metadata
//   24  M bytes  JSON metadata: format, model widths and num_params, the optimizer config, the
//                position (step, epoch, next_batch, epoch loss so far), seed, batch, accum, global
//                batch, lr settings and lr_workers (the workers --lr-scale scales for; absent
//                before it was added: the world size then), the job so far (legs, train_s,
//                leg_train_s, worker0_train_s, history: see CheckpointData; absent from files
//                written before they were added, which still load), and - informational - the
//                backend and world size it was written with. JSON has no NaN or infinity: a
//                diverged run's losses are null there, read back as NaN
//   ..  3 x u64  P, S1, S2: float counts of the parameters and the two optimizer state vectors
//                (momentum / Adam m, and Adam v; S2 = 0 for sgd)
//   ..  floats   params, state1, state2 (float32)
//   end u32      zlib crc32 of every byte before it
// A truncated file, a flipped byte, a wrong magic or version, a path that is not a regular file
// (a FIFO, a device) fail with one ConfigError naming the file, what is wrong, and the rank that
// read it.
//
// Files in --checkpoint-dir: "ckpt-<step, 10 digits>.ckpt", and "latest", a one-line pointer to
// the newest. Every write goes to a temporary file of its own in the same folder
// ("<name>.<host>.<pid>.<hex>.tmp"), is fsync'ed, then renamed (atomic on POSIX), and the folder
// fsync'ed (write_file_atomically, trainer/atomic_file.h); "latest" is replaced the same way
// afterwards, and only then are older checkpoints deleted (the newest --keep-checkpoints stay,
// always including the one just written). A run killed at any point therefore leaves the previous
// good checkpoint, perhaps plus a *.tmp file that resume ignores and a later save removes once its
// writer is known to be gone (atomic_file.h: never another live job's).
//
// What is saved is exact under synchronous training (local, ring, mpi, nccl, ps bsp): resuming
// gives bit for bit the parameters of an uninterrupted run. Under ps asp/ssp the checkpoint is
// taken after every worker flushed, with the servers' parameters and optimizer state of that
// moment (worker 0 adopts those parameters, as a pull would); asynchronous training itself is not
// reproducible run to run.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/config.h"
#include "trainer/atomic_file.h"
#include "trainer/trainer.h"

namespace starring {

inline constexpr std::uint32_t kCheckpointVersion = 1;

struct CheckpointData {
  nlohmann::json meta = nlohmann::json::object();  // see above; position fields mirrored below
  std::int64_t step = 0;                           // optimizer steps done
  int epoch = 0;                                   // epoch of the next step (0-based)
  std::int64_t next_batch = 0;                     // optimizer steps of `epoch` already done
  double epoch_loss_sum = 0;     // sum of the step losses of `epoch` so far (the workers' mean)
                                 // (next_batch 0: of the epoch that just ended)
  std::int64_t epoch_steps = 0;  // ... over this many steps
  // The job up to this step, so that a resumed run's summary covers every leg: the runs that
  // trained its steps (the one that wrote this file included; 0: unknown, a file written before
  // this was recorded, whose train_s and history are then empty), their training seconds over
  // those steps (TrainResult::wall_s's clock: no evaluation, checkpoints, restarts or steps a
  // later run redid; each run's slowest worker's), the same per run (leg_train_s, one per leg,
  // summing to train_s; empty in files written before it was recorded), worker 0's training
  // seconds over them (worker0_train_s, the clock of the history and of the metrics file's
  // time_s; files written before it was recorded: train_s, which was worker 0's then), and the
  // epochs evaluated so far (EpochRecord::wall_s on worker 0's clock).
  int legs = 0;
  double train_s = 0;
  std::vector<double> leg_train_s;
  double worker0_train_s = 0;
  std::vector<EpochRecord> history;
  std::vector<float> params, state1, state2;
};

// The bytes of a checkpoint file (meta gains the position fields and "format").
std::string encode_checkpoint(const CheckpointData& c);
// Epoch records as the checkpoint's metadata and the run's summary both write them.
nlohmann::json history_json(const std::vector<EpochRecord>& history);
// Parses and verifies the bytes of `file` (named in errors, with `where`, e.g. "rank 0").
CheckpointData decode_checkpoint(const std::string& bytes, const std::string& file,
                                 const std::string& where);
// Reads and verifies a checkpoint file.
CheckpointData read_checkpoint(const std::string& path, const std::string& where);

std::string checkpoint_file_name(std::int64_t step);  // "ckpt-0000000042.ckpt"
// Whether a file name (no folder) is a checkpoint's, "ckpt-<step>.ckpt": what the rotation after a
// save, --resume latest / auto and the preflight's check of a fresh run's folder look at.
bool is_checkpoint_file_name(const std::string& name);

// Saves c into k.dir as checkpoint_file_name(c.step), then updates "latest", then deletes the
// stale temporary files of checkpoints and "latest" (remove_stale_temporary_files) and all but the
// newest k.keep checkpoints. Returns the file's path.
std::string save_checkpoint(const CheckpointConfig& k, const CheckpointData& c,
                            const std::string& where);

// --resume: k.resume is a file, or "latest" (the file "latest" in k.dir names, or failing that
// the newest checkpoint there that verifies). Returns the checkpoint and sets `path`. ConfigError
// when there is none or it does not verify. "auto" is "latest", except that a folder holding no
// checkpoint file at all gives an empty `path` and data: a fresh run (a "latest" left there,
// naming a file that is gone, is reported on stderr and ignored).
CheckpointData load_resume(const CheckpointConfig& k, const std::string& where, std::string& path);

// The model's layer widths the checkpoint records; ConfigError naming the file, "widths" and
// `where` unless they are 2 or more integers >= 1 (checkpoint_fields.h).
std::vector<int> checkpoint_widths(const CheckpointData& c, const std::string& file,
                                   const std::string& where);

// Throws ConfigError unless the checkpoint fits this run: same widths, parameter count (and the
// file's num_params) and optimizer type, and state vectors of the right length.
void check_checkpoint_fits(const CheckpointData& c, const std::vector<int>& widths,
                           std::size_t num_params, const std::string& optimizer,
                           const std::string& file, const std::string& where);

// Throws ConfigError unless the checkpoint fits this run's data order: the same global batch
// (`workers` x --batch x --accum), --seed, data set and training-sample count (skipped when
// `train_samples` < 0: not known yet), its own workers x batch x accum and lr_workers adding up to
// its global batch, and (train_samples known) its position inside this run's epochs: next_batch
// at most the steps of an epoch, step = epoch x those + next_batch, epoch_steps matching. Checked
// by rank 0 before any communication (experiments/main.cc) and again by every worker in
// resume_point.
void check_resume_fits_run(const CheckpointData& c, const Config& cfg, int workers,
                           std::int64_t train_samples, const std::string& file,
                           const std::string& where);

// The learning-rate and optimizer settings (--lr, --lr-scale, --warmup-steps, --lr-schedule,
// --momentum, --weight-decay, --beta1, --beta2, --eps) this run changes from the checkpoint's, as
// "--lr 0.01 (0.02 in the checkpoint), ..."; empty when none (or the file did not record them).
// A resume may change them on purpose (a lower rate to fine-tune), so they are reported, not
// refused. Under --lr-schedule cosine in both runs, `total_steps` (this run's, >= 0) against
// the checkpoint's names a changed schedule length too: --epochs and --max-steps set it, and a
// run cut short by --max-steps then resumed for longer jumped from its decayed rate back up.
std::string resume_setting_changes(const CheckpointData& c, const Config& cfg,
                                   std::int64_t total_steps = -1);

// Worker 0 tells every other worker of `workers` whether its part of a collective step succeeded
// (`error_on_0` empty: yes). On the others a failure throws Error naming `what` and worker 0's
// message, so no worker waits out a timeout for a peer that already failed.
void agree_with_worker0(Comm& workers, const std::string& error_on_0, const std::string& what);

// Worker 0 loads the checkpoint named by cfg.ckpt (load_resume) and sends it to every other
// worker (so only worker 0 needs to see the file, as only worker 0 wrote it: no shared file
// system needed); a failure on worker 0 throws its ConfigError there and an Error naming it on
// every other worker. Returns the checkpoint and its path on every worker.
CheckpointData load_resume_on_workers(const Config& cfg, Comm& workers, std::string& path);

// The metadata a checkpoint of this run carries (the position is added by encode_checkpoint).
nlohmann::json checkpoint_meta(const Config& cfg, const std::vector<int>& widths,
                               std::size_t num_params, const std::string& backend, int workers,
                               std::int64_t train_samples);

// What a resumed run starts from: load_resume_on_workers + check_checkpoint_fits, the data order's
// inputs (global batch, --seed, data set and its training-sample count: the epoch's order and the
// position in it are functions of them) checked against the checkpoint's, and on worker 0
// the earlier run's metrics lines to keep. Empty `path`: a fresh run (cfg.ckpt.resume is empty, or
// "auto" with no checkpoint yet).
struct ResumePoint {
  std::string path;
  CheckpointData data;
  std::vector<std::string> metrics_lines;
};
ResumePoint resume_point(const Config& cfg, Comm& workers, const std::vector<int>& widths,
                         std::size_t num_params, std::int64_t train_samples);

// The lines of an earlier run's metrics file (`path`.partial when the newest run did not finish
// and wrote one, else `path`) up to the first per-step record with "step" > `step`: what a resumed
// run keeps. Empty when neither file exists.
std::vector<std::string> metrics_lines_before(const std::string& path, std::int64_t step);

}  // namespace starring
