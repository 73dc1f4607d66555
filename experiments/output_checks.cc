// The output checks `starring` makes on each rank before any communication (experiments/main.cc
// preflight): every file and folder a run will write can be written, so a run does not train for
// an hour and then lose its results to a typo.
#include "experiments/output_checks.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/config_detail.h"
#include "common/error.h"
#include "common/trace.h"
#include "trainer/checkpoint.h"

namespace starring {

using detail::concat;

namespace {

// A file can be created in folder `dir` by this process (a probe file, removed again).
void check_writable_folder(const char* option, const std::filesystem::path& dir) {
  std::string probe = (dir / ".starring-write-test-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw ConfigError(concat(option, ": cannot write in folder '", dir.string(), "' (",
                             std::strerror(errno), ")"));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

// `path` (an output file) can be created: its folder exists and this process may write there.
// Outputs are written next to `path` and renamed over it, so an existing `path` must be a plain
// file: renamed over /dev/null, a run as root replaced the device with a regular file.
void check_output(const char* option, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw ConfigError(concat(option, ": '", path, "' is a folder; give a file name"));
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    throw ConfigError(concat(option, ": '", path,
                             "' is not a regular file (a device, pipe or socket); give a file "
                             "name, or leave the option out"));
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw ConfigError(concat(option, ": folder '", dir.string(), "' does not exist"));
  check_writable_folder(option, dir);
}

// --checkpoint-dir is created when the first checkpoint is written (the end of the run at the
// latest): what would stop that is found now, before the training it would lose. A missing folder
// is probed by creating (and removing again) its first missing level, so the error is the one
// that creating it gives: a probe file in the nearest existing folder named that folder with
// another failure's text (/proc/x: "cannot write in folder '/proc' (No such file or directory)").
void check_checkpoint_dir_writable(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path full = fs::absolute(dir, ec);
  fs::path existing = full, missing;
  while (!fs::exists(existing, ec) && existing.has_relative_path()) {
    missing = existing;
    existing = existing.parent_path();
  }
  if (!fs::is_directory(existing, ec))
    throw ConfigError(concat("--checkpoint-dir: cannot create '", dir, "': '", existing.string(),
                             "' is not a folder"));
  if (missing.empty()) return check_writable_folder("--checkpoint-dir", existing);
  if (::mkdir(missing.c_str(), 0777) == 0) {
    ::rmdir(missing.c_str());
  } else if (errno != EEXIST) {  // EEXIST: another rank's probe of the same folder
    const std::string why = std::strerror(errno);
    throw ConfigError(concat("--checkpoint-dir: cannot create ",
                             missing == full ? "" : concat("'", dir, "': cannot create "),
                             "folder '", missing.string(), "' (", why, ")"));
  }
}

// A fresh run (no --resume) must not write into a folder holding another run's checkpoints: the
// rotation keeps the highest steps whoever wrote them, and a later `--resume latest` would
// continue the other run. Nor must a run resumed from a checkpoint outside the folder (--resume
// PATH): it wrote among them, the rotation deleted the other run's files, its step that
// coincided replaced theirs, and 'latest' named its own (a run of 48 steps lost every file).
void check_checkpoint_dir(const CheckpointConfig& ck) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (ck.dir.empty() || ck.resume == "latest" || ck.resume == "auto" ||
      !fs::is_directory(ck.dir, ec))
    return;
  const bool fresh = ck.resume.empty();
  if (!fresh) {
    // A file in the folder continues the folder's run (a link is judged by the file it names);
    // a missing one, or a folder (the checkpoint folder itself), is check_resume's to judge.
    if (!fs::is_regular_file(ck.resume, ec)) return;
    const fs::path from = fs::canonical(ck.resume, ec).parent_path();
    if (ec || fs::equivalent(from, ck.dir, ec)) return;
  }
  // Checkpoint files only: a 'latest' naming none of them leaves nothing to lose
  for (const auto& e : fs::directory_iterator(ck.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_checkpoint_file_name(name)) continue;
    if (fresh)
      throw ConfigError(concat("--checkpoint-dir: folder '", ck.dir,
                               "' already holds checkpoints (", name,
                               "); continue that run with --resume latest, or give an empty "
                               "folder"));
    throw ConfigError(concat("--checkpoint-dir: folder '", ck.dir, "' already holds checkpoints (",
                             name, ") and --resume ", ck.resume,
                             " is not in it: the resumed run's checkpoints would replace and "
                             "delete them (the newest steps are kept, whoever wrote them); give "
                             "an empty folder, or resume from a checkpoint in that folder"));
  }
}

void check_distinct_outputs(const Config& cfg, int size) {
  const auto& o = cfg.out;
  if (size > 1 && !o.trace_file.empty() && o.trace_file.find("%r") == std::string::npos)
    throw ConfigError(concat("--trace ", o.trace_file, ": all ", size,
                             " ranks would write this one file; put '%r' (the rank) in the "
                             "name, e.g. trace.%r.json"));
  namespace fs = std::filesystem;
  auto same = [](const std::string& a, const std::string& b) {
    return !a.empty() && !b.empty() &&
           fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
  };
  if (same(o.metrics_file, o.summary_file))
    throw ConfigError(
        concat("--metrics-file and --summary-file name the same file '", o.metrics_file, "'"));
  // An output on one of the run's inputs replaced it (--summary-file run.ini --config run.ini):
  // the INI file, the checkpoint to resume from, the IDX files.
  std::vector<std::pair<std::string, std::string>> inputs;  // (what, path)
  if (!cfg.config_file.empty()) inputs.emplace_back("the --config file", cfg.config_file);
  const std::string& resume = cfg.ckpt.resume;
  if (!resume.empty() && resume != "latest" && resume != "auto")
    inputs.emplace_back("the --resume checkpoint", resume);
  if (cfg.data.dataset != "synthetic")
    for (const char* prefix : {"train", "t10k"})
      for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"})
        for (const char* ext : {"", ".gz"}) {
          const std::string name = concat(prefix, kind, ext);
          inputs.emplace_back("a --data-dir file", (fs::path(cfg.data.data_dir) / name).string());
        }
  auto check_not_input = [&](const char* flag, const std::string& path) {
    for (const auto& [what, input] : inputs)
      if (same(path, input))
        throw ConfigError(
            concat(flag, " '", path, "' is ", what, ": writing it would replace that input"));
  };
  check_not_input("--metrics-file", o.metrics_file);
  check_not_input("--summary-file", o.summary_file);
  if (o.trace_file.empty()) return;
  for (int r = 0; r < size; ++r) {
    const std::string trace = expand_rank(o.trace_file, r);
    const std::string of_rank = size > 1 ? concat(" of rank ", r) : "";
    for (const auto& [flag, path] :
         {std::pair<const char*, const std::string&>{"--metrics-file", o.metrics_file},
          {"--summary-file", o.summary_file}})
      if (same(path, trace))
        throw ConfigError(
            concat(flag, " and --trace", of_rank, " name the same file '", path, "'"));
    check_not_input("--trace", trace);
  }
}

}  // namespace starring
