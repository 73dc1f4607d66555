#include "trainer/step_losses.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "common/error.h"

namespace starring {
namespace {

constexpr int kLossTag = tags::kStepLosses;

// True when a is a higher loss than b: not-a-number above everything (a diverged worker).
bool higher(double a, double b) {
  if (std::isnan(b)) return false;
  return std::isnan(a) || a > b;
}

}  // namespace

StepLosses::StepLosses(Comm& workers, MetricsWriter& metrics, bool on, int lag)
    : comm_(workers), metrics_(metrics), fields_(on), on_(on && workers.size() > 1), lag_(lag) {}

namespace {

// Sends given up on unfinished (see ~StepLosses): their buffers are kept until the process ends
// (this vector's destructor runs after main has returned or std::exit was called, so after
// MPI_Finalize), never freed while MPI may still read them. A static of its own: MPI's pending
// sends are the process's, not any object's.
std::vector<std::shared_ptr<void>>& given_up() {
  static std::vector<std::shared_ptr<void>> kept;
  return kept;
}
std::mutex given_up_mu;

}  // namespace

StepLosses::~StepLosses() {
  // Abandoned (an error unwound the run): a send is freed once complete. Its request cannot be
  // cancelled (Open MPI does not cancel sends) and, released unfinished, MPI still reads its
  // buffer in the background; so every unfinished send is waited for, all of them within
  // kGiveUpAfter (or --timeout, if shorter): a live peer's transport takes 16 bytes at once, a
  // peer that is gone or stopped never does, and this must not hang then. What is still
  // unfinished is released and its buffer kept until the process ends (given_up). A failing
  // wait counts as unfinished: nothing is thrown from here.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::min(comm_.timeout(), kGiveUpAfter));
  for (auto& s : sent_) {
    bool done = false;
    try {
      done = s->req->test();
      if (!done) {
        const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
        s->req->wait(std::chrono::duration_cast<Seconds>(left));
        done = true;
      }
    } catch (...) {
    }
    if (done) continue;
    s->req.reset();
    std::lock_guard<std::mutex> lk(given_up_mu);
    given_up().emplace_back(std::move(s));
  }
}

void StepLosses::after_step(std::int64_t step, double loss, MetricsLine line) {
  if (!on_) {
    if (!metrics_.enabled()) return;
    auto h = std::make_unique<Held>();
    h->step = step;
    h->line = std::move(line);
    h->in = {static_cast<double>(step), loss};
    write(*h);
    return;
  }
  const int me = comm_.rank(), W = comm_.size();
  if (me != 0) {
    while (!sent_.empty() && sent_.front()->req->test()) sent_.pop_front();
    auto s = std::make_unique<Sent>();
    s->msg[0] = static_cast<double>(step);
    s->msg[1] = loss;
    s->req = comm_.isend(s->msg, sizeof s->msg, 0, kLossTag);
    sent_.push_back(std::move(s));
    return;
  }
  auto h = std::make_unique<Held>();
  h->step = step;
  h->line = std::move(line);
  h->in.assign(2 * static_cast<std::size_t>(W), 0.0);
  h->in[0] = static_cast<double>(step);
  h->in[1] = loss;
  for (int p = 1; p < W; ++p)
    h->reqs.push_back(comm_.irecv(&h->in[2 * p], 2 * sizeof(double), p, kLossTag));
  held_.push_back(std::move(h));
  write_ready(step);
}

// With a lag, a line is completed when it is `lag` steps old and not tested before: a test of a
// receive that is not there yet makes MPI progress on the compute thread (with the backend's
// communication thread in MPI at once, on oversubscribed cores), which took 1-2.3 ms of worker 0's
// step at np 4 on 2 cores (2026-12-01), and synchronous training has delivered the losses by then.
// Without one (asp) the lines are tested after each step and written as their losses come.
void StepLosses::write_ready(std::int64_t step) {
  while (!held_.empty()) {
    Held& h = *held_.front();
    if (lag_ >= 0) {
      if (h.step + lag_ > step) return;
    } else {
      bool done = true;
      for (auto& r : h.reqs) done = r->test() && done;
      if (!done) return;
    }
    complete(h);
    write(h);
    held_.pop_front();
  }
}

void StepLosses::complete(Held& h) {
  for (std::size_t i = 0; i < h.reqs.size(); ++i) {
    const int p = static_cast<int>(i) + 1;
    try {
      h.reqs[i]->wait(comm_.timeout());
    } catch (const TimeoutError& e) {
      throw TimeoutError(detail::concat(e.what(), ": worker ", p, "'s loss of step ", h.step,
                                        " for the metrics file (--metrics-loss all) did not come"));
    }
    const std::size_t bytes = h.reqs[i]->status().bytes;
    STARRING_CHECK(bytes == 2 * sizeof(double), comm_.where(), ": worker ", p, " sent ", bytes,
                   " bytes for its loss of step ", h.step, " (tag ", kLossTag, "), expected ",
                   2 * sizeof(double));
    const double got = h.in[2 * i + 2];
    STARRING_CHECK(got == static_cast<double>(h.step), comm_.where(), ": worker ", p,
                   " sent its loss of step ", got, " where step ", h.step, " was expected");
  }
}

void StepLosses::write(Held& h) {
  if (!metrics_.enabled()) return;
  if (fields_) {
    const std::size_t W = h.in.size() / 2;
    double sum = 0, lo = h.in[1], hi = h.in[1];
    std::size_t arg = 0;
    for (std::size_t w = 0; w < W; ++w) {
      const double l = h.in[2 * w + 1];
      sum += l;
      if (std::isnan(lo) || l < lo) lo = l;
      if (higher(l, hi)) hi = l, arg = w;
    }
    h.line.add("global_loss", sum / static_cast<double>(W));
    h.line.add("loss_min", lo);
    h.line.add("loss_max", hi);
    h.line.add_int("loss_max_worker", static_cast<std::int64_t>(arg));
  }
  metrics_.write(h.line);
}

void StepLosses::drain() {
  if (!on_) return;
  if (comm_.rank() != 0) {
    for (auto& s : sent_) s->req->wait(comm_.timeout());
    sent_.clear();
    return;
  }
  while (!held_.empty()) {
    complete(*held_.front());
    write(*held_.front());
    held_.pop_front();
  }
}

}  // namespace starring
