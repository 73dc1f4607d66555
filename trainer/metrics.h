// Output of a training run on worker 0:
//  - MetricsWriter: JSON lines (one per step, plus eval and checkpoint events), written to
//    "<file>.partial" and renamed to "<file>" when the run finishes, so a crashed run never
//    leaves a file that looks complete.
//  - Progress: a progress bar on a terminal (step, epoch, loss, samples/s, ETA), or one plain line
//    every N steps when stderr is not a terminal (logs, CI).
//  - write_json_atomically: temp file + rename, for summaries.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace starring {

void write_json_atomically(const std::string& path, const nlohmann::json& j);

// A float as the double with the same shortest decimal form, for JSON: --lr 0.05 is the float
// 0.0500000007..., which a plain conversion wrote as 0.05000000074505806.
double json_float(float f);

// One metrics line (a step's), formatted without an nlohmann::json object: worker 0 writes one
// every step, and building a 20-key object, adding the gathered losses and dumping it took
// 30-200 us of the step (np 1-4 on 2 cores, 2026-12-01), counted as the line's other_s. Numbers
// are written in their shortest form that reads back as the same double (an integral double with
// ".0", as nlohmann::json writes it); not-a-number and infinities as null; keys in the order added.
class MetricsLine {
 public:
  MetricsLine() = default;
  MetricsLine(std::nullptr_t) {}  // NOLINT: a worker other than 0 passes none
  void add(std::string_view key, double v) { push({std::string(key), v, 0, false}); }
  void add_int(std::string_view key, std::int64_t v) { push({std::string(key), 0, v, true}); }
  bool empty() const { return fields_.empty(); }
  // Appends {"key":value,...} to `out`, the value of time_s shifted by `time_offset`.
  void format(std::string& out, double time_offset = 0) const;

 private:
  struct Field {
    std::string key;
    double value;
    std::int64_t ivalue;
    bool integer;
  };
  void push(Field f) {
    if (fields_.empty()) fields_.reserve(24);  // a step line's fields, in one allocation
    fields_.push_back(std::move(f));
  }
  std::vector<Field> fields_;
};

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // empty path: disabled
  ~MetricsWriter();
  bool enabled() const { return !path_.empty(); }
  void write(const nlohmann::json& record);
  void write(const MetricsLine& line);  // a step's line (the same as a record of its fields)
  // A resumed run: writes the earlier run's lines (kept up to the checkpoint), then shifts the
  // `time_s` of every later line by `earlier_s` (worker 0's training seconds in the earlier runs,
  // from the checkpoint), or by the last of theirs if later, so the file's clock never runs back.
  void write_earlier(const std::vector<std::string>& lines, double earlier_s = 0);
  void flush();   // to the .partial file (a checkpoint's lines survive a crash after it)
  void finish();  // flush and rename into place
  // A run that stops to be resumed (trainer/stop_vote.h): flush, leaving the lines in the .partial
  // file; throws the first failed write as finish() does.
  void keep_partial();

 private:
  void check_stream(const char* doing);  // notes (and reports) the first failed write

  std::string failure_;  // the first failed write, thrown by finish()

  std::string path_;
  std::ofstream out_;
  bool finished_ = false;
  double time_offset_ = 0;  // added to time_s (write_earlier)
  std::string buf_;         // a MetricsLine's text, reused
};

class Progress {
 public:
  // mode: "auto" | "bar" | "lines" | "off"; total_steps for the ETA.
  Progress(const std::string& mode, std::int64_t total_steps, int log_every, bool enabled);
  void update(std::int64_t step, int epoch, double loss, double samples_per_s);
  // A resumed run starts at `step`: the ETA counts only the steps this run has trained.
  void resume_at(std::int64_t step);
  void message(const std::string& line);  // a line that doesn't break the bar
  void done();

 private:
  bool bar_ = false, lines_ = false;
  std::int64_t total_, first_step_ = 0;
  int log_every_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace starring
