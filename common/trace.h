// Trace: Chrome trace-event timeline for one rank (open in Perfetto or chrome://tracing).
// Thread-safe; a disabled Trace costs one branch per event. Events are "complete" events
// (ph:"X") with microsecond timestamps from one steady clock shared by all threads of the rank
// (now_us() counts from the Trace's creation; the file holds the host's monotonic time, so the
// ranks of one host line up); pid = rank, tid = a small id per named thread ("compute", "comm").
//
//   Trace trace(rank);  trace.open("trace.%r.json");     // "%r" -> rank
//   { TraceScope s(&trace, "backward", "compute"); ... }
//   trace.close();  // writes the file (also done by the destructor)
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace starring {

// A --trace pattern's file for `rank`: every "%r" replaced by the rank.
std::string expand_rank(const std::string& pattern, int rank);

class Trace {
 public:
  explicit Trace(int rank = 0);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  void open(const std::string& path_pattern);  // enables recording
  bool enabled() const { return enabled_; }
  void close();  // writes the JSON file atomically (temp file + rename)

  double now_us() const;  // microseconds since this Trace was created
  // A finished interval on the calling thread (thread name set with set_thread_name).
  void complete(const std::string& name, const std::string& cat, double start_us, double dur_us,
                const std::map<std::string, double>& args = {});
  void counter(const std::string& name, double value);
  void set_thread_name(const std::string& name);  // for the calling thread

 private:
  int thread_id();
  struct Event {
    std::string name, cat;
    char ph;
    double ts, dur;
    int tid;
    std::map<std::string, double> args;
  };
  int rank_;
  std::atomic<bool> enabled_{false};
  std::string path_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::vector<Event> events_;
  std::map<std::size_t, int> tids_;  // hash(std::thread::id) -> tid
  std::map<int, std::string> thread_names_;
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
