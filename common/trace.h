// Trace: Chrome trace-event timeline for one rank (open in Perfetto or chrome://tracing).
// Thread-safe; a disabled Trace costs one branch per event. Events are "complete" events
// (ph:"X"; counter() writes counter events, ph:"C") with microsecond timestamps from one steady
// clock shared by all threads of the rank (now_us() counts from the Trace's creation; the file
// holds microseconds of the UTC day on the wall clock, read once at creation, so the ranks of
// every host line up; the day is the process_name's args.utc_day); pid = rank, tid = a small
// id per thread, named with set_thread_name ("compute", "comm"), or per row of complete_on.
// Events stream to "<file>.partial" while the run goes (a writer thread appends them every
// kFlushEvents events or kFlushPeriod), so a run killed mid-way still leaves a viewable
// timeline; close() turns it into the file itself.
//
//   Trace trace(rank);  trace.open("trace.%r.json");     // "%r" -> rank; creates .partial
//   { TraceScope s(&trace, "backward", "compute"); ... }
//   trace.close();  // writes trace.<rank>.json, removes the .partial (also done by ~Trace)
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace starring {

// A --trace pattern's file for `rank`: every "%r" replaced by the rank.
std::string expand_rank(const std::string& pattern, int rank);

class Trace {
 public:
  // The writer appends the buffer to the .partial once it holds this many events, or after
  // this long, whichever comes first.
  static constexpr std::size_t kFlushEvents = 4096;
  static constexpr std::chrono::milliseconds kFlushPeriod{250};

  // `role` is added to the process's name: "rank 2 (server 0)" ("": "rank 2").
  explicit Trace(int rank = 0, std::string role = {});
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Enables recording and creates (or empties) "<file>.partial"; an error names the rank and
  // the file. A trace already open is closed first.
  void open(const std::string& path_pattern);
  bool enabled() const { return enabled_; }
  // Appends the events recorded so far to "<file>.partial" now (the writer thread does it on
  // its own; for tests and for callers about to block).
  void flush();
  // Completes the .partial (its last events, the closing bracket, the names of threads never
  // named) and renames it to the file, so the file appears whole or not at all; where that
  // fails, the error says the events stay in the .partial.
  void close();

  double now_us() const;  // microseconds since this Trace was created
  // `t` on the same clock (what now_us() would have said at `t`)
  double us_at(std::chrono::steady_clock::time_point t) const;
  // A finished interval on the calling thread (thread name set with set_thread_name).
  void complete(const std::string& name, const std::string& cat, double start_us, double dur_us,
                const std::map<std::string, double>& args = {});
  // A finished interval on a row of its own named `track` (a track id beside the threads'), for
  // intervals that overlap others recorded by the same thread: a PS chunk's push and pull in
  // flight beside the other chunks'. The intervals of one row must nest or follow each other:
  // Perfetto drops one that starts inside another and ends after it.
  void complete_on(const std::string& track, const std::string& name, const std::string& cat,
                   double start_us, double dur_us, const std::map<std::string, double>& args = {});
  // A counter event (ph:"C", one series `name`) at now_us(), on the calling thread.
  void counter(const std::string& name, double value);
  void set_thread_name(const std::string& name);  // for the calling thread

 private:
  struct Event {
    std::string name, cat;
    char ph;
    double ts, dur;
    int tid;
    std::map<std::string, double> args;
  };
  int thread_id();                         // caller holds mu_
  int track_id(const std::string& track);  // caller holds mu_
  void record(int tid, const std::string& name, const std::string& cat, double start_us,
              double dur_us, const std::map<std::string, double>& args);  // caller holds mu_
  void write_loop();
  void write_partial(const std::string& text);  // caller holds file_mu_
  void finish();                                // the .partial -> the file

  int rank_;
  std::string role_;
  std::atomic<bool> enabled_{false};
  std::chrono::steady_clock::time_point t0_;
  double origin_us_;      // t0_ in microseconds since 00:00 UTC of utc_day_
  std::int64_t utc_day_;  // days since 1970-01-01
  // Recording: the events not yet written, and the threads.
  std::mutex mu_;
  std::condition_variable wake_;  // the writer: a full buffer, or close()
  bool stop_ = false;
  std::vector<Event> events_;
  std::map<std::size_t, int> tids_;    // hash(std::thread::id) -> tid
  std::map<std::string, int> tracks_;  // complete_on's rows -> tid
  int next_tid_ = 0;
  std::map<int, std::string> thread_names_;
  // Writing (lock order: close_mu_, file_mu_, mu_).
  std::mutex close_mu_;
  std::mutex file_mu_;
  std::string path_;
  int fd_ = -1;  // the .partial
  std::vector<Event> batch_;
  std::map<int, std::string> names_written_;  // thread names already in the .partial
  std::string write_error_;                   // the first failed write
  std::thread writer_;
};

// RAII interval; no-op when trace is null or disabled.
class TraceScope {
 public:
  TraceScope(Trace* trace, const char* name, const char* cat);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Trace* trace_;
  const char* name_;
  const char* cat_;
  double start_ = 0;
};

}  // namespace starring
