#include "trainer/stop_vote.h"

#include <cstdio>

#include "common/error.h"

namespace starring {
namespace {

constexpr int kVoteTag = tags::kStopVote;
// Send buffers that outlive any request (an abandoned send finishes in the background).
constexpr unsigned char kFlags[2] = {0, 1};

}  // namespace

StopVote::StopVote(Comm& workers, int lag, int every, std::string off_reason)
    : comm_(workers),
      lag_(lag),
      every_(every < 1 ? 1 : every),
      off_reason_(std::move(off_reason)) {}

std::string StopVote::off_reason_for_run(bool checkpoints) {
  return checkpoints ? "under --consistency asp the workers drift apart without bound, so there "
                       "is no step to agree on; training goes on"
                     : "no --checkpoint-dir to save the run to; training goes on";
}

StopVote::~StopVote() = default;  // abandoned receives are cancelled by their requests

bool StopVote::after_step(std::int64_t step, bool mine) {
  if (lag_ < 0) {
    if (mine && !warned_ && !off_reason_.empty()) {
      std::fprintf(
          stderr,
          "[starring] %s: stop request (SIGUSR1 or --fault stop) at step %lld ignored: %s\n",
          comm_.where().c_str(), static_cast<long long>(step), off_reason_.c_str());
      std::fflush(stderr);
      warned_ = true;
    }
    return false;
  }
  asked_ = asked_ || mine;
  if (step % every_ == 0) {
    auto r = std::make_unique<Round>();
    r->step = step;
    r->in.assign(static_cast<std::size_t>(comm_.size()), 0);
    r->in[static_cast<std::size_t>(comm_.rank())] = asked_ ? 1 : 0;
    for (int p = 0; p < comm_.size(); ++p) {
      if (p == comm_.rank()) continue;
      r->reqs.push_back(comm_.irecv(&r->in[static_cast<std::size_t>(p)], 1, p, kVoteTag));
      r->reqs.push_back(comm_.isend(&kFlags[asked_ ? 1 : 0], 1, p, kVoteTag));
    }
    open_.push_back(std::move(r));
  }
  if (open_.empty() || open_.front()->step + lag_ > step) return false;
  std::unique_ptr<Round> due = std::move(open_.front());
  open_.pop_front();
  if (!wait_round(*due)) return false;
  decided_ = due->step;
  for (std::size_t w = 0; w < due->in.size(); ++w)
    if (due->in[w]) requested_by_.push_back(static_cast<int>(w));
  finish();  // every worker posted the same later rounds: complete them before leaving
  return true;
}

bool StopVote::wait_round(Round& r) {
  try {
    for (auto& q : r.reqs) q->wait(comm_.timeout());
  } catch (const TimeoutError& e) {  // it names the peer and the tag; what was waited for:
    throw TimeoutError(detail::concat(e.what(), ": the workers' vote on stop requests after step ",
                                      r.step, " did not complete (SIGUSR1, --fault stop)"));
  }
  for (unsigned char f : r.in)
    if (f) return true;
  return false;
}

void StopVote::finish() {
  while (!open_.empty()) {
    wait_round(*open_.front());
    open_.pop_front();
  }
}

}  // namespace starring
