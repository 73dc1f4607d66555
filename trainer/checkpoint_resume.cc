// Resuming from a checkpoint on every worker: worker 0 reads the file and sends its bytes to the
// others (only worker 0 wrote it, so only worker 0 must see it: no shared file system needed), the
// checkpoint is checked against this run, and the earlier metrics lines are recovered.
#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

#include "common/comm_util.h"
#include "common/error.h"
#include "common/kept_memory.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_fields.h"

namespace starring {
namespace {

constexpr int kResumeTag = tags::kResume;

void send_resume(Comm& c, const std::string& s, int dst) {
  send_text(c, s, dst, kResumeTag, c.timeout());
}

std::string recv_resume(Comm& c, int src, std::uint64_t limit, const char* what) {
  return recv_text(c, src, kResumeTag, c.timeout(), limit, what);
}

// The one refusal of a checkpoint that is valid but not this run's.
ConfigError does_not_fit(const std::string& where, const std::string& file,
                         const std::string& what) {
  return ConfigError(where + ": checkpoint " + file + " does not fit this run: " + what);
}

std::string widths_text(const std::vector<int>& w) {
  std::string s;
  for (std::size_t i = 0; i < w.size(); ++i) s += (i ? "," : "") + std::to_string(w[i]);
  return s;
}

// The position against this run's epochs of `per_epoch` optimizer steps (its training samples
// over the global batch, the checkpoint's): inside an epoch (next_batch == per_epoch: an epoch's
// end as an earlier build wrote it), adding up to the step, and the epoch's step count matching
// it. A position past an epoch resumed at the next one's start, silently.
template <typename Fail>
void check_position(const CheckpointData& c, std::int64_t per_epoch, const CheckpointFields& f,
                    const Fail& fail) {
  // the trainer refuses such a run itself; a negative position is check_checkpoint_fits's
  if (per_epoch <= 0 || c.epoch < 0 || c.next_batch < 0) return;
  if (c.next_batch > per_epoch)
    fail(detail::concat("next_batch ", c.next_batch, " in the checkpoint is past the ", per_epoch,
                        " steps of an epoch of this run (training samples / global batch)"));
  // step == epoch x per_epoch + next_batch, without overflow
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  if (c.epoch > (max - c.next_batch) / per_epoch || c.step != c.epoch * per_epoch + c.next_batch)
    f.bad("step", c.step,
          detail::concat("epoch ", c.epoch, " x ", per_epoch, " steps + next_batch ", c.next_batch,
                         " (its position in this run's epochs)"));
  // the steps of the epoch so far (at an epoch's end: the finished epoch's)
  if (c.next_batch > 0 ? c.epoch_steps != c.next_batch : c.epoch_steps > per_epoch)
    f.bad("epoch_steps", c.epoch_steps,
          c.next_batch > 0
              ? detail::concat("its next_batch ", c.next_batch, " (steps of the epoch so far)")
              : detail::concat("at most the ", per_epoch, " steps of an epoch"));
}

}  // namespace

std::vector<int> checkpoint_widths(const CheckpointData& c, const std::string& file,
                                   const std::string& where) {
  const CheckpointFields f(where, file);
  const nlohmann::json* w = c.meta.contains("widths") ? &c.meta["widths"] : nullptr;
  if (!w || !w->is_array() || w->size() < 2)
    f.bad("widths", w, "a model's layer widths (2 or more)");
  std::vector<int> out;
  for (std::size_t i = 0; i < w->size(); ++i)
    out.push_back(
        static_cast<int>(f.integer({{"v", (*w)[i]}}, "v", 1, std::numeric_limits<int>::max(),
                                   std::nullopt, detail::concat("widths[", i, "]"))));
  return out;
}

void check_checkpoint_fits(const CheckpointData& c, const std::vector<int>& widths,
                           std::size_t num_params, const std::string& optimizer,
                           const std::string& file, const std::string& where) {
  auto bad = [&](const std::string& what) { return does_not_fit(where, file, what); };
  const std::vector<int> saved = checkpoint_widths(c, file, where);
  const CheckpointFields f(where, file);
  const nlohmann::json& m = c.meta;
  const nlohmann::json* type =
      m.contains("optimizer") && m["optimizer"].is_object() && m["optimizer"].contains("type")
          ? &m["optimizer"]["type"]
          : nullptr;
  if (!type || !type->is_string()) f.bad("optimizer.type", type, "an optimizer's name");
  const std::string saved_opt = type->get<std::string>();
  if (saved != widths)
    throw bad("model widths " + widths_text(saved) + " in the checkpoint, " + widths_text(widths) +
              " in this run (--hidden / --preset / the data)");
  if (c.params.size() != num_params)
    throw bad(std::to_string(c.params.size()) + " parameters in the checkpoint, " +
              std::to_string(num_params) + " in this model");
  // the file's own record of that count (absent before it was added) names its parameters'
  if (c.meta.contains("num_params") &&
      f.integer(c.meta, "num_params", 0, std::numeric_limits<std::int64_t>::max()) !=
          static_cast<std::int64_t>(c.params.size()))
    f.bad("num_params", c.meta["num_params"].dump(),
          detail::concat("the ", c.params.size(), " parameters the file holds"));
  if (saved_opt != optimizer)
    throw bad("optimizer '" + saved_opt + "' in the checkpoint, --optimizer " + optimizer +
              " in this run");
  const std::size_t want2 = optimizer == "adamw" ? num_params : 0;
  if (c.state1.size() != num_params || c.state2.size() != want2)
    throw bad("optimizer state of " + std::to_string(c.state1.size()) + " + " +
              std::to_string(c.state2.size()) + " floats, expected " + std::to_string(num_params) +
              " + " + std::to_string(want2));
  if (c.step < 0 || c.epoch < 0 || c.next_batch < 0)
    throw bad("negative position (step " + std::to_string(c.step) + ")");
}

void check_resume_fits_run(const CheckpointData& c, const Config& cfg, int workers,
                           std::int64_t train_samples, const std::string& file,
                           const std::string& where) {
  const auto fail = [&](const std::string& what) { throw does_not_fit(where, file, what); };
  const CheckpointFields f(where, file);
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const auto& m = c.meta;
  // The step counts optimizer steps of one global batch: the schedule, Adam's bias correction and
  // the run's length are in those units, so a resume must keep the global batch (workers may
  // change with it: 2 workers x 64 resume as 1 x 128).
  const auto& t = cfg.train;
  const std::int64_t saved_gb = f.integer(m, "global_batch", 0, kMax, 0);
  // The file's own world (informational, and --lr-scale's basis: lr_workers) must add up to its
  // global batch: workers x batch x accum, lr_workers one of its divisors. An lr_workers of
  // 2^40 + 3 was cut to an int, 3: the rate scaled for 3 workers.
  if (saved_gb > 0) {
    const std::int64_t w = f.integer(m, "workers", 1, saved_gb, 1);
    const std::int64_t b = f.integer(m, "batch", 1, saved_gb, 0);
    const std::int64_t a = f.integer(m, "accum", 1, saved_gb, 0);
    if (saved_gb % w != 0 || (b > 0 && (saved_gb / w) % b != 0) ||
        (b > 0 && a > 0 && saved_gb / w / b != a))
      f.bad("workers x batch x accum",
            detail::concat(w, " x ", b > 0 ? std::to_string(b) : "?", " x ",
                           a > 0 ? std::to_string(a) : "?"),
            detail::concat("its global_batch ", saved_gb));
    const std::int64_t lw = f.integer(m, "lr_workers", 1, saved_gb, 1);
    if (saved_gb % lw != 0)
      f.bad("lr_workers", lw,
            detail::concat("a number of workers its global_batch ", saved_gb, " is made of"));
  }
  const auto gb = static_cast<std::int64_t>(t.batch) * t.accum * workers;
  if (saved_gb != gb)
    fail(detail::concat("global batch ", saved_gb, " in the checkpoint, ", gb,
                        " in this run (workers x --batch x --accum = ", workers, " x ", t.batch,
                        " x ", t.accum, ")"));
  // The data order is a function of (seed, epoch) over the training set, and the checkpoint's
  // position (epoch, next batch) is in that order: another seed or other data would resume at a
  // position of another order (and train on samples the epoch already had). A checkpoint of a
  // build that did not record the sample count is not checked for it; one that records a value
  // of the wrong type is refused (it was skipped).
  if (m.contains("seed") && f.unsigned_integer(m, "seed") != t.seed)
    fail(detail::concat("seed ", m["seed"].get<std::uint64_t>(), " in the checkpoint, --seed ",
                        t.seed, " in this run (the data order follows it)"));
  if (m.contains("dataset") && !m["dataset"].is_string())
    f.bad("dataset", &m["dataset"], "a data set's name");
  if (m.contains("dataset") && m["dataset"].get<std::string>() != cfg.data.dataset)
    fail("data set '" + m["dataset"].get<std::string>() + "' in the checkpoint, --dataset " +
         cfg.data.dataset + " in this run");
  const std::int64_t saved_n = f.integer(m, "train_samples", 0, kMax, -1);
  if (train_samples >= 0 && saved_n >= 0 && saved_n != train_samples)
    fail(detail::concat(saved_n, " training samples in the checkpoint, ", train_samples,
                        " in this run (the epoch's order and the position in it depend on them)"));
  if (train_samples >= 0 && gb > 0) check_position(c, train_samples / gb, f, fail);
}

std::string resume_setting_changes(const CheckpointData& c, const Config& cfg,
                                   std::int64_t total_steps) {
  const TrainConfig& t = cfg.train;
  std::string out;
  const auto note = [&](const std::string& option, const nlohmann::json& saved, const auto& now) {
    using T = std::decay_t<decltype(now)>;
    // Not recorded (null) by the build that wrote the file, or not of the option's type: no word.
    if (std::is_arithmetic_v<T> ? !saved.is_number() : !saved.is_string()) return;
    if constexpr (std::is_integral_v<T>) {  // a crafted 1e30 is not cast into an int
      if (saved.is_number_integer() && saved.get<double>() == static_cast<double>(now)) return;
      out += detail::concat(out.empty() ? "" : ", ", "--", option, " ", now, " (", saved.dump(),
                            " in the checkpoint)");
      return;
    }
    const T was = saved.get<T>();  // a float option's value round-trips exactly through double
    if (was == now) return;
    out += detail::concat(out.empty() ? "" : ", ", "--", option, " ", now, " (", was,
                          " in the checkpoint)");
  };
  const auto at = [](const nlohmann::json& m, const char* group, const char* key) {
    return m.contains(group) && m[group].is_object() && m[group].contains(key) ? m[group][key]
                                                                               : nlohmann::json();
  };
  const nlohmann::json& m = c.meta;
  note("lr", at(m, "lr", "lr"), t.lr);
  note("lr-scale", at(m, "lr", "lr_scale"), t.lr_scale);
  note("warmup-steps", at(m, "lr", "warmup_steps"), t.warmup_steps);
  note("lr-schedule", at(m, "lr", "lr_schedule"), t.lr_schedule);
  if (t.opt.type == "sgd") {
    note("momentum", at(m, "optimizer", "momentum"), t.opt.momentum);
  } else {
    note("beta1", at(m, "optimizer", "beta1"), t.opt.beta1);
    note("beta2", at(m, "optimizer", "beta2"), t.opt.beta2);
    note("eps", at(m, "optimizer", "eps"), t.opt.eps);
  }
  note("weight-decay", at(m, "optimizer", "weight_decay"), t.opt.weight_decay);
  const nlohmann::json was = at(m, "lr", "schedule_steps");
  if (total_steps >= 0 && t.lr_schedule == "cosine" && at(m, "lr", "lr_schedule") == "cosine" &&
      was.is_number_integer() && was.get<std::int64_t>() != total_steps)
    out += detail::concat(out.empty() ? "" : ", ", "the cosine schedule's length ", total_steps,
                          " steps (", was.get<std::int64_t>(),
                          " in the checkpoint; --epochs and --max-steps set it)");
  return out;
}

void agree_with_worker0(Comm& workers, const std::string& error_on_0, const std::string& what) {
  if (workers.rank() != 0) {
    const std::string status = recv_resume(workers, 0, kMaxNoteBytes, "worker 0's verdict");
    if (status != "ok")
      throw Error(workers.where() + ": " + what + " failed on worker 0: " + status);
    return;
  }
  for (int r = 1; r < workers.size(); ++r)
    send_resume(workers, error_on_0.empty() ? "ok" : error_on_0, r);
}

CheckpointData load_resume_on_workers(const Config& cfg, Comm& workers, std::string& path) {
  const std::string where = workers.where();
  if (workers.rank() != 0) {
    agree_with_worker0(workers, "", "loading the checkpoint to resume from");
    path = recv_resume(workers, 0, kMaxNoteBytes, "the checkpoint's path");
    if (path.empty()) return CheckpointData{};  // --resume auto, nothing written yet
    // No limit of its own (a checkpoint that does not fit this model is refused by every worker
    // alike once decoded): memory is taken as the pieces arrive, and each piece is checked.
    return decode_checkpoint(recv_resume(workers, 0, UINT64_MAX, "the checkpoint"), path, where);
  }
  CheckpointData c;
  std::string error;
  std::exception_ptr failed;  // any failure, not only bad input: the others wait for the verdict
  try {
    c = load_resume(cfg.ckpt, where, path);
  } catch (const std::exception& e) {
    error = *e.what() ? e.what() : where + ": loading the checkpoint failed";
    failed = std::current_exception();
  }
  agree_with_worker0(workers, error, "loading the checkpoint to resume from");
  if (failed) std::rethrow_exception(failed);
  if (workers.size() > 1) {
    std::string bytes = path.empty() ? "" : encode_checkpoint(c);  // re-encoded, verified
    try {
      for (int r = 1; r < workers.size(); ++r) {
        send_resume(workers, path, r);
        if (!path.empty()) send_resume(workers, bytes, r);
      }
    } catch (...) {
      keep_if_left_to_mpi(bytes);  // a send that timed out may still read it (Comm::send)
      throw;
    }
  }
  return c;
}

nlohmann::json checkpoint_meta(const Config& cfg, const std::vector<int>& widths,
                               std::size_t num_params, const std::string& backend, int workers,
                               std::int64_t train_samples) {
  const TrainConfig& t = cfg.train;
  return {{"widths", widths},
          {"num_params", num_params},
          {"optimizer",
           {{"type", t.opt.type},
            {"momentum", t.opt.momentum},
            {"weight_decay", t.opt.weight_decay},
            {"beta1", t.opt.beta1},
            {"beta2", t.opt.beta2},
            {"eps", t.opt.eps}}},
          {"seed", t.seed},
          {"batch", t.batch},
          {"accum", t.accum},
          {"global_batch", static_cast<std::int64_t>(t.batch) * t.accum * workers},
          {"lr",
           {{"lr", t.lr},
            {"lr_scale", t.lr_scale},
            {"warmup_steps", t.warmup_steps},
            {"lr_schedule", t.lr_schedule}}},
          {"dataset", cfg.data.dataset},
          {"train_samples", train_samples},
          {"backend", backend},
          {"workers", workers},
          {"byte_order", "little-endian float32"}};
}

ResumePoint resume_point(const Config& cfg, Comm& workers, const std::vector<int>& widths,
                         std::size_t num_params, std::int64_t train_samples) {
  ResumePoint r;
  if (cfg.ckpt.resume.empty()) return r;
  r.data = load_resume_on_workers(cfg, workers, r.path);
  if (r.path.empty()) return r;  // --resume auto on an empty folder: a fresh run
  // Every worker holds the same bytes, so every worker reaches the same verdict.
  check_checkpoint_fits(r.data, widths, num_params, cfg.train.opt.type, r.path, workers.where());
  check_resume_fits_run(r.data, cfg, workers.size(), train_samples, r.path, workers.where());
  if (workers.rank() == 0)
    r.metrics_lines = metrics_lines_before(cfg.out.metrics_file, r.data.step);
  return r;
}

std::vector<std::string> metrics_lines_before(const std::string& path, std::int64_t step) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  // A .partial file is the newest run's: every run writes one and renames it to `path` when it
  // finishes, so one that is there belongs to a run that started after the last finished one (a
  // finished run extended with --resume, then stopped or killed) and continues it. An empty one
  // is a run that failed before its first line.
  std::error_code ec;
  const std::string partial = path + ".partial";
  std::ifstream in;
  if (const auto size = std::filesystem::file_size(partial, ec); !ec && size > 0) in.open(partial);
  if (!in.is_open()) in.open(path);
  if (!in) return out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) break;  // a line cut short by a crash: everything after is lost anyway
    if (j.contains("step") && !j.contains("event") && j["step"].get<std::int64_t>() > step) break;
    out.push_back(line);
  }
  return out;
}

}  // namespace starring
