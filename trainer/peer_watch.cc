#include "trainer/peer_watch.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "common/watch_clock.h"

namespace starring {
namespace {

constexpr int kNoteTag = tags::kPeerNotes;
constexpr auto kPoll = std::chrono::milliseconds(10);

double secs(PeerWatch::Clock::duration d) { return Seconds(d).count(); }

}  // namespace

PeerWatch::PeerWatch(Comm& workers, bool on)
    : comm_(workers),
      timeout_(workers.timeout()),
      start_(Clock::now()),
      last_step_ns_(start_.time_since_epoch().count()) {
  if (!on || comm_.size() < 2) return;
  pulse_.bind_to_this_thread();
  busy_at_ = start_;
  heard_.assign(static_cast<std::size_t>(comm_.size()), Heard{});
  for (Heard& h : heard_) h.at = start_;  // the silence of a peer never heard counts from here
  in_.req = comm_.irecv(in_.v, sizeof in_.v, kAnySource, kNoteTag);
  thread_ = std::thread([this] { loop(); });
}

PeerWatch::~PeerWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Notes still in flight (16 bytes: sent eagerly, so complete but for the last test) are
  // released by their requests' destructors; the posted receive is cancelled.
  in_.req.reset();
  out_.clear();
}

// Every ~10 ms: takes the notes that arrived, and sends its own every timeout/4 (or at once when
// the trainer reached a meeting).
void PeerWatch::loop() {
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::clamp(timeout_ / 4, Seconds(0.01), Seconds(60.0)));
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    // A meeting's note still to send goes out before the thread stops: a peer may still wait
    // for it after this worker left that meeting (its own wait ended by the peer's note).
    const bool stopping = stop_;
    if (stopping && !send_now_) return;
    const bool now = send_now_ || Clock::now() - last_sent_ >= period;
    send_now_ = false;
    lk.unlock();
    std::string failed;
    try {
      if (now) send_notes();
      drain();
    } catch (const std::exception& e) {
      failed = e.what();
    }
    lk.lock();
    ++drains_;
    if (!failed.empty()) {
      error_ = failed;  // await() throws it; the peers name this worker as silent
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
    if (stopping) return;
    cv_.wait_for(lk, kPoll, [this] { return stop_ || send_now_; });
  }
}

void PeerWatch::drain() {
  while (in_.req->test()) {
    const RecvStatus st = in_.req->status();
    if (st.bytes == sizeof in_.v && st.source >= 0 && st.source < comm_.size()) {
      std::lock_guard<std::mutex> lk(mu_);
      Heard& h = heard_[static_cast<std::size_t>(st.source)];
      h.at = Clock::now();
      h.meetings = std::max(h.meetings, in_.v[0]);
      h.idle = std::chrono::nanoseconds(in_.v[1]);
    }
    in_.req = comm_.irecv(in_.v, sizeof in_.v, kAnySource, kNoteTag);
  }
}

void PeerWatch::send_notes() {
  out_.remove_if([](Note& n) { return n.req->test(); });
  last_sent_ = Clock::now();
  if (pulse_.alive_since_last_check(last_sent_)) busy_at_ = last_sent_;
  const std::int64_t met = meetings_.load(std::memory_order_acquire);
  const auto idle =
      last_sent_.time_since_epoch().count() -
      std::max(last_step_ns_.load(std::memory_order_relaxed), busy_at_.time_since_epoch().count());
  // A worker waiting at a meeting is not idle: a peer that went on to the next one waits for it.
  const std::int64_t idle_ns =
      in_await_.load(std::memory_order_acquire)
          ? 0
          : std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::duration(idle)).count();
  for (int r = 0; r < comm_.size(); ++r) {
    if (r == comm_.rank()) continue;
    Note& n = out_.emplace_back();
    n.v[0] = met;
    n.v[1] = std::max<std::int64_t>(idle_ns, 0);
    n.req = comm_.isend(n.v, sizeof n.v, r, kNoteTag);
  }
}

bool PeerWatch::peers_alive(std::string* why) {
  why->clear();
  if (!enabled()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  if (!error_.empty()) {
    *why = "this worker's notes failed: " + error_;
    return false;
  }
  const auto now = Clock::now();
  const auto limit = std::chrono::duration_cast<Clock::duration>(timeout_);
  int silent = -1;
  Clock::duration quiet{};
  bool alive = false;
  for (int r = 0; r < comm_.size(); ++r) {
    if (r == comm_.rank()) continue;
    const Heard& h = heard_[static_cast<std::size_t>(r)];
    if (now - h.at > limit) {
      if (silent < 0) silent = r, quiet = now - h.at;
    } else if (now - h.at + h.idle <= limit) {
      alive = true;
    }
  }
  if (silent < 0) {
    silent_recheck_ = -1;
    return alive;
  }
  // Its note may be waiting for the next drain (this process was descheduled): named only after
  // one whole drain that brought nothing from it. Counted afresh for each silence (another rank,
  // or a note came since): a wait that ended before it asked again left the grace set, and a
  // later silence was named at its first ask.
  const Clock::time_point heard_at = heard_[static_cast<std::size_t>(silent)].at;
  if (silent_recheck_ < 0 || silent != silent_rank_ || heard_at != silent_heard_at_) {
    silent_recheck_ = drains_ + 2;
    silent_rank_ = silent;
    silent_heard_at_ = heard_at;
  }
  if (drains_ < silent_recheck_) return true;
  *why = detail::concat("rank ", silent, " sent nothing for ", secs(quiet),
                        " s (stopped, dead or stuck; a live peer in a step longer than the timeout "
                        "is waited for while its notes come)");
  return false;
}

void PeerWatch::await(const std::string& what) {
  if (!enabled()) return;
  begin_step();
  in_await_.store(true, std::memory_order_release);
  struct Leave {
    PeerWatch* w;
    ~Leave() {
      w->begin_step();
      w->in_await_.store(false, std::memory_order_release);
    }
  } leave{this};
  const std::int64_t m = meetings_.fetch_add(1, std::memory_order_acq_rel) + 1;
  std::unique_lock<std::mutex> lk(mu_);
  send_now_ = true;
  cv_.notify_all();
  WatchClock watch(timeout_, Clock::now());
  const auto limit = std::chrono::duration_cast<Clock::duration>(timeout_);
  std::int64_t recheck_at = -1;  // a late peer: its note may be waiting for the next drain
  while (true) {
    if (!error_.empty()) throw Error(error_);
    const auto now = Clock::now();
    const auto excused = watch.check(now);
    int late = -1;
    bool silent = false, all = true;
    Clock::duration quiet{};
    for (int r = 0; r < comm_.size(); ++r) {
      if (r == comm_.rank()) continue;
      Heard& h = heard_[static_cast<std::size_t>(r)];
      h.at = WatchClock::excuse(h.at, excused, now);
      if (h.meetings >= m) continue;
      all = false;
      if (late >= 0) continue;
      if (now - h.at > limit) {
        late = r, silent = true, quiet = now - h.at;
      } else if (now - h.at + h.idle > limit) {
        late = r, quiet = now - h.at + h.idle;
      }
    }
    if (all) break;
    if (late >= 0 && recheck_at < 0) {
      recheck_at = drains_ + 2;  // one whole drain after this check
    } else if (late >= 0 && drains_ >= recheck_at) {
      char head[96];
      std::snprintf(head, sizeof head, ": timeout after %.1f s waiting for rank %d at ",
                    timeout_.count(), late);
      throw TimeoutError(detail::concat(
          comm_.where(), head, what,
          silent ? detail::concat(": nothing came from it for ", secs(quiet),
                                  " s (stopped, dead or stuck; a slower worker is waited for "
                                  "while its notes come)")
                 : detail::concat(": it began no step and showed no sign of life for ", secs(quiet),
                                  " s and has not reached it (its training stopped or stuck; a "
                                  "slower worker is waited for while it begins steps or "
                                  "computes)"),
          "; this worker ", watch.summary()));
    } else if (late < 0) {
      recheck_at = -1;
    }
    cv_.wait_for(lk, kPoll);
  }
}

}  // namespace starring
