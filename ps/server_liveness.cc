// A parameter server's verdict on silent workers and untaken replies (ServerLoop::check_liveness).
//
// A worker is silent when it has nothing pending at this server and the server has not heard
// from it for the timeout; a reply is untaken when its send has not completed within it. Both
// count only time the server was watching: the loop checks every ~10 ms, and of a longer pause
// between two checks (the server descheduled on a loaded machine, the whole process stopped,
// e.g. by a sanitizer's runtime, or one long message) only max(timeout / 4, 50 ms) counts: the
// rest is added to every worker's last-heard time and every pending send's start. And no worker
// is named while a message from it is waiting in the receive slots: it is handled first (the rule
// is common/watch_clock.h's, shared with the workers' reply deadlines). Without these, a server
// whose loop stood still longer than the timeout named a worker whose push was already in its
// slots. When it does name one, the message says what this server has from every worker (its last
// message, replies owed, pushes per chunk, the rounds under way).
#include <algorithm>
#include <cstdio>

#include "common/clock.h"
#include "common/error.h"
#include "ps/server_loop.h"

namespace starring::ps {

static std::string secs(Clock::duration d) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f", Seconds(d).count());
  return b;
}

void ServerLoop::check_liveness() {
  const auto now = Clock::now();
  const auto excused = watch_.check(now);  // this server was not watching: nobody's silence
  if (excused > Clock::duration::zero()) {
    for (auto& t : last_heard_) t = WatchClock::excuse(t, excused, now);
    for (auto& p : sends_) p.since = WatchClock::excuse(p.since, excused, now);
  }
  for (const auto& p : sends_)
    if (now - p.since > opt_.timeout)
      throw TimeoutError(detail::concat(where_, ": timeout after ", opt_.timeout.count(),
                                        " s: ", who(p.worker), " did not take ", p.what, " (",
                                        progress(now), ")"));
  int silent = -1;
  for (int w = 0; w < workers_; ++w) {
    const auto wi = static_cast<std::size_t>(w);
    if (done_[wi] || (core_ && core_->awaiting(w) > 0)) continue;
    bool sending = false;
    for (const auto& p : sends_) sending |= p.worker == w;
    if (sending || now - last_heard_[wi] <= opt_.timeout) continue;
    if (silent < 0 || last_heard_[wi] < last_heard_[static_cast<std::size_t>(silent)]) silent = w;
  }
  if (silent < 0) return;
  // A message from it already in the slots is handled before any verdict. Posted receives are
  // matched in order, so its message can only sit in the run of completed slots from the head;
  // messages from the others do not delay the verdict (a busy server would put it off forever).
  const int silent_rank = group_.worker_ranks.at(static_cast<std::size_t>(silent));
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[(head_ + i) % slots_.size()];
    if (!s.req || !s.req->test()) break;
    if (s.req->status().source == silent_rank) return;
  }
  throw TimeoutError(detail::concat(where_, ": timeout after ", opt_.timeout.count(),
                                    " s: ", who(silent), " (worker ", silent,
                                    ") sent nothing while this server waited for it",
                                    acked_ ? "" : " to start", " (", progress(now), ")"));
}

// bsp and ssp: a worker whose replies this server holds back (bsp: the round waits for a slower
// worker's push; ssp: it is --staleness steps ahead of a slower worker), which is alive
// (check_liveness names a silent one), would name this server when its reply deadline ran out,
// and a slower worker's step may outlast --timeout (common/thread_pulse.h). So a worker owed
// replies that this server told nothing for timeout/4 gets a heartbeat (a 32-byte kHeartbeat on
// the control tag, booked as control, as acks are), which renews its deadlines. A bsp run whose
// rounds close within timeout/4 of the previous reply sends none. Never under asp, which holds
// no reply.
void ServerLoop::heartbeat_held() {
  if (!core_ || !acked_ || core_->spec().consistency == "asp") return;
  const auto now = Clock::now();
  for (int w = 0; w < workers_; ++w) {
    auto& told = last_told_[static_cast<std::size_t>(w)];
    if (done_[static_cast<std::size_t>(w)] || core_->awaiting(w) == 0 ||
        now - told <= opt_.timeout / 4)
      continue;
    told = now;
    ++heartbeats_out_;
    send_ctl(w, Op::kHeartbeat, "", false);
  }
}

// What this server has from every worker, for a timeout message.
std::string ServerLoop::progress(Clock::time_point now) const {
  std::string s;
  for (int w = 0; w < workers_; ++w) {
    const auto wi = static_cast<std::size_t>(w);
    s += detail::concat(w ? "; " : "", "worker ", w, done_[wi] ? " (done)" : "", ": last message ",
                        secs(now - last_heard_[wi]), " s ago");
    if (core_) s += detail::concat(", ", core_->awaiting(w), " replies owed");
  }
  if (core_) s += "; " + core_->progress();
  return s + "; this server's loop " + watch_.summary();
}

}  // namespace starring::ps
