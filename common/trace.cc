// Trace: records complete ("X") and counter ("C") events under one mutex into a buffer that a
// writer thread appends to "<file>.partial" whenever it holds kFlushEvents events or
// kFlushPeriod has passed, so the recording threads only copy an event into a vector, as when
// every event stayed in memory until the end, and a rank killed mid-run (mpirun's SIGKILL on
// Ctrl-C or when another rank fails) leaves every event flushed so far.
//
// The .partial is Chrome's JSON Array Format, one event per line: 15 spaces, "[", then the
// events, each line but the last ending with ','. Its closing ']' is optional for both viewers:
// catapult's importer (tracing/tracing/extras/importer/trace_event_importer.html,
// TraceEventImporter) trims the text, and where it starts with '[' strips a trailing comma and
// appends the ']' ("some tracing implementations cannot guarantee that a ']' gets written to
// the trace file"); Perfetto's tokenizer (src/trace_processor/importers/json/
// json_trace_tokenizer.cc, ParseInternal, kTraceEventsArray) reads the array one dictionary at
// a time and takes the end of the data as "needs more data", with nothing to do at end of file
// (its GuessTraceType drops whitespace before looking for '[{"'). So "partial + ']'" parses as
// JSON whenever the last write was whole. Metadata events ("M": the process's name, and each
// thread's name once set) go into the .partial as they become known, so its tracks are named.
//
// close() writes the last buffer, the names of threads never named ("thread N"), the closing
// "]" and ',"displayTimeUnit":"ms"}', then writes '{"traceEvents":' over the leading spaces:
// the file is the same JSON object as when it was written in one go at the end, with no copy,
// however long the run. The .partial is then renamed to the file, so a reader never sees half
// a file. Timestamps are microseconds of the UTC day (the wall clock, read once beside the
// steady clock when the Trace is made; the steady clock's intervals after that), so the files of
// all ranks line up when merged (scripts/merge_traces.py): those of one host to within the gap
// between two clock readings (the wall clock and the steady clock are slewed alike; only a step
// of the wall clock between two ranks' starts moves one against the other), those of different
// hosts as well as their wall clocks agree (NTP: about a millisecond or better). The host's
// monotonic clock, used before, counts from each host's boot, hours or days apart, and after
// weeks of uptime leaves a double too few bits below the nanosecond: Perfetto reads
// llround(ts * 1000) ns, and an interval ending where the next starts could then overlap it by
// 1-4 ns, and be dropped. The process_name event's args.utc_day names the day (a run that
// starts on one side of a midnight and another rank on the other: the merge shifts it).
#include "common/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>

#include "common/error.h"

namespace starring {

std::string expand_rank(const std::string& pattern, int rank) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      out += std::to_string(rank);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

namespace {

// The .partial starts with as many spaces as close() needs to turn the array into the object.
constexpr std::string_view kObjectStart = "{\"traceEvents\":";
constexpr std::string_view kObjectEnd = ",\"displayTimeUnit\":\"ms\"}\n";

void put_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {  // control characters, newlines
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  out += '"';
}

// The shortest text that reads back as `v`, in fixed notation where it fits in 48 characters
// (1000000 is "1000000.0", as nlohmann writes it, not the shortest form "1e+06": JSON allows
// both, but timestamps and durations read as plain decimals by every viewer), with ".0" on
// whole numbers; null where not finite (as nlohmann does).
void put_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[48];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (ec != std::errc()) end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  const std::string_view text(buf, static_cast<std::size_t>(end - buf));
  out += text;
  if (text.find_first_of(".eE") == std::string_view::npos) out += ".0";
}

std::string metadata_line(const char* what, int pid, int tid, const char* key,
                          const std::string& value, bool quoted) {
  std::string out = "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"";
  out += key;
  out += "\":";
  if (quoted)
    put_string(out, value);
  else
    out += value;
  out += "}}";
  return out;
}

// The process's name ("rank 2 (server 0)"), with the UTC day its times count from (args.utc_day,
// days since 1970-01-01), and its sort index.
std::string process_lines(int rank, const std::string& role, std::int64_t utc_day) {
  std::string name =
      metadata_line("process_name", rank, 0, "name",
                    "rank " + std::to_string(rank) + (role.empty() ? "" : " (" + role + ")"), true);
  name.insert(name.size() - 2, ",\"utc_day\":" + std::to_string(utc_day));  // before "}}"
  return name + ",\n" +
         metadata_line("process_sort_index", rank, 0, "sort_index", std::to_string(rank), false);
}

constexpr std::int64_t kDayNs = 86400LL * 1000 * 1000 * 1000;

// The steady clock's reading `t0` and the wall clock's nanoseconds since 1970 at that moment: of
// a few tries, the wall reading with the shortest gap between the steady readings around it (a
// rank descheduled between two readings would misplace its whole timeline by that long).
std::int64_t wall_ns_at(std::chrono::steady_clock::time_point& t0) {
  using std::chrono::nanoseconds;
  nanoseconds best_gap = nanoseconds::max();
  std::int64_t wall_ns = 0;
  for (int i = 0; i < 5; ++i) {
    const auto s1 = std::chrono::steady_clock::now();
    const auto wall = std::chrono::system_clock::now();
    const auto s2 = std::chrono::steady_clock::now();
    if (s2 - s1 >= best_gap) continue;
    best_gap = s2 - s1;
    t0 = s1 + (s2 - s1) / 2;
    wall_ns = std::chrono::duration_cast<nanoseconds>(wall.time_since_epoch()).count();
  }
  return wall_ns;
}

template <class Event>
void put_event(std::string& out, const Event& e, int pid, double origin_us) {
  out += "{\"ph\":\"";
  out += e.ph;
  out += "\",\"name\":";
  put_string(out, e.name);
  out += ",\"cat\":";
  put_string(out, e.cat);
  out += ",\"ts\":";
  put_number(out, origin_us + e.ts);
  if (e.ph == 'X') {
    out += ",\"dur\":";
    put_number(out, e.dur);
  }
  out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(e.tid);
  if (!e.args.empty()) {
    out += ",\"args\":{";
    const char* sep = "";
    for (const auto& [key, value] : e.args) {
      out += sep;
      put_string(out, key);
      out += ':';
      put_number(out, value);
      sep = ",";
    }
    out += '}';
  }
  out += '}';
}

}  // namespace

Trace::Trace(int rank, std::string role) : rank_(rank), role_(std::move(role)) {
  const std::int64_t wall_ns = wall_ns_at(t0_);
  utc_day_ = wall_ns / kDayNs;  // after 1970: no negative times
  origin_us_ = static_cast<double>(wall_ns - utc_day_ * kDayNs) / 1000.0;
}

Trace::~Trace() {
  try {
    close();
  } catch (const std::exception& e) {
    const std::string line = detail::concat("rank ", rank_, ": trace: ", e.what(), "\n");
    std::fwrite(line.data(), 1, line.size(), stderr);  // one write: other ranks share stderr
  }
}

void Trace::open(const std::string& path_pattern) {
  STARRING_CHECK(!path_pattern.empty(), "rank ", rank_, ": trace path is empty");
  close();
  std::lock_guard<std::mutex> closing(close_mu_);
  std::lock_guard<std::mutex> file_lock(file_mu_);
  path_ = expand_rank(path_pattern, rank_);
  const std::string partial = path_ + ".partial";
  // A stale .partial of an earlier run at this path is emptied here.
  fd_ = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0)
    throw Error(detail::concat("rank ", rank_, ": --trace: cannot write ", partial, ": ",
                               std::strerror(errno)));
  write_error_.clear();
  names_written_.clear();
  batch_.clear();
  write_partial(std::string(kObjectStart.size(), ' ') + "[\n" +
                process_lines(rank_, role_, utc_day_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
    events_.reserve(kFlushEvents);
    stop_ = false;
    enabled_ = true;
  }
  writer_ = std::thread([this] { write_loop(); });
}

double Trace::now_us() const { return us_at(std::chrono::steady_clock::now()); }

double Trace::us_at(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - t0_).count();
}

int Trace::thread_id() {  // caller holds mu_
  const std::size_t key = std::hash<std::thread::id>{}(std::this_thread::get_id());
  auto it = tids_.find(key);
  if (it != tids_.end()) return it->second;
  tids_.emplace(key, next_tid_);
  return next_tid_++;
}

int Trace::track_id(const std::string& track) {  // caller holds mu_
  const auto [it, added] = tracks_.try_emplace(track, next_tid_);
  if (added) thread_names_[next_tid_++] = track;
  return it->second;
}

void Trace::record(int tid, const std::string& name, const std::string& cat, double start_us,
                   double dur_us, const std::map<std::string, double>& args) {  // holds mu_
  events_.push_back(Event{name, cat, 'X', start_us, dur_us, tid, args});
  if (events_.size() == kFlushEvents) wake_.notify_one();
}

void Trace::complete(const std::string& name, const std::string& cat, double start_us,
                     double dur_us, const std::map<std::string, double>& args) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;  // closed meanwhile: its last buffer is written
  record(thread_id(), name, cat, start_us, dur_us, args);
}

void Trace::complete_on(const std::string& track, const std::string& name, const std::string& cat,
                        double start_us, double dur_us, const std::map<std::string, double>& args) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  record(track_id(track), name, cat, start_us, dur_us, args);
}

void Trace::counter(const std::string& name, double value) {
  if (!enabled_) return;
  const double ts = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  events_.push_back(Event{name, "counter", 'C', ts, 0.0, thread_id(), {{name, value}}});
  if (events_.size() == kFlushEvents) wake_.notify_one();
}

void Trace::set_thread_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  thread_names_[thread_id()] = name;
}

void Trace::write_partial(const std::string& text) {  // caller holds file_mu_
  if (fd_ < 0 || !write_error_.empty()) return;       // after a failed write, the rest is dropped
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      write_error_ = n < 0 ? std::strerror(errno) : "nothing written";
      return;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void Trace::flush() {
  std::lock_guard<std::mutex> file_lock(file_mu_);
  if (fd_ < 0) return;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch_.swap(events_);  // both keep their capacity
    for (const auto& [tid, name] : thread_names_) {
      auto& written = names_written_[tid];
      if (written == name) continue;
      written = name;
      text += ",\n" + metadata_line("thread_name", rank_, tid, "name", name, true);
    }
  }
  for (const Event& e : batch_) {
    text += ",\n";
    put_event(text, e, rank_, origin_us_);
  }
  batch_.clear();
  if (!text.empty()) write_partial(text);
}

void Trace::write_loop() {
  try {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      wake_.wait_for(lock, kFlushPeriod,
                     [this] { return stop_ || events_.size() >= kFlushEvents; });
      if (stop_) break;
      lock.unlock();
      flush();
      lock.lock();
    }
  } catch (const std::exception& e) {  // out of memory: close() reports it
    std::lock_guard<std::mutex> file_lock(file_mu_);
    if (write_error_.empty()) write_error_ = e.what();
  }
}

void Trace::close() {
  std::lock_guard<std::mutex> closing(close_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!enabled_) return;
    enabled_ = false;
    stop_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
  flush();  // the last buffer
  finish();
}

void Trace::finish() {  // caller holds close_mu_
  const std::string partial = path_ + ".partial";
  std::lock_guard<std::mutex> file_lock(file_mu_);
  std::string tail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, tid] : tids_)  // the threads never named
      if (!names_written_.count(tid))
        tail += ",\n" + metadata_line("thread_name", rank_, tid, "name",
                                      "thread " + std::to_string(tid), true);
  }
  write_partial(tail + "\n]" + std::string(kObjectEnd));
  if (write_error_.empty() && ::pwrite(fd_, kObjectStart.data(), kObjectStart.size(), 0) !=
                                  static_cast<ssize_t>(kObjectStart.size()))
    write_error_ = std::strerror(errno);
  if (::close(fd_) != 0 && write_error_.empty()) write_error_ = std::strerror(errno);
  fd_ = -1;
  if (!write_error_.empty())
    throw Error(detail::concat("rank ", rank_, ": --trace: writing ", partial,
                               " failed: ", write_error_, "; the events before that stay in it"));
  if (std::rename(partial.c_str(), path_.c_str()) != 0)
    throw Error(detail::concat("rank ", rank_, ": --trace: cannot rename ", partial, " to ", path_,
                               ": ", std::strerror(errno), "; the events recorded stay in ",
                               partial));
}

TraceScope::TraceScope(Trace* trace, const char* name, const char* cat)
    : trace_(trace && trace->enabled() ? trace : nullptr), name_(name), cat_(cat) {
  if (trace_) start_ = trace_->now_us();
}

TraceScope::~TraceScope() {
  if (trace_) trace_->complete(name_, cat_, start_, trace_->now_us() - start_);
}

}  // namespace starring
