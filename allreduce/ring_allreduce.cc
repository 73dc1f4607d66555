#include "allreduce/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "allreduce/progress_waiter.h"
#include "common/error.h"

namespace starring {

RingAllreduce::RingAllreduce(Comm& comm, RingOptions opt)
    : comm_(comm),
      opt_(opt),
      n_(comm.size()),
      rank_(comm.rank()),
      next_((comm.rank() + 1) % comm.size()),
      prev_((comm.rank() - 1 + comm.size()) % comm.size()) {
  STARRING_CHECK(opt_.segment_bytes >= 64, comm.where(), ": ring segment of ", opt_.segment_bytes,
                 " bytes is too small (minimum 64)");
  STARRING_CHECK(opt_.window >= 1, comm.where(), ": ring window must be >= 1");
  seg_elems_ = opt_.segment_bytes / sizeof(float) / 16 * 16;
}

std::size_t ring_chunk_begin(int c, int n, std::size_t count) {
  if (c >= n) return count;
  // floor(count * c / n) without overflow, rounded down to 16 elements (64-byte aligned).
  return (count / n * c + count % n * c / n) / 16 * 16;
}

std::vector<RingItem> ring_receives(int rank, int n, std::size_t count, std::size_t seg_elems) {
  std::vector<RingItem> items;
  for (int t = 0; t <= 2 * n - 3; ++t) {
    int c = ((rank - t - 1) % n + n) % n;
    for (std::size_t lo = ring_chunk_begin(c, n, count), end = ring_chunk_begin(c + 1, n, count);
         lo < end; lo += seg_elems) {
      items.push_back(RingItem{t, lo, std::min(end, lo + seg_elems)});
    }
  }
  return items;
}

std::uint64_t RingAllreduce::wire_bytes_per_run(std::size_t count) const {
  if (n_ == 1) return 0;
  std::uint64_t elems = 0;
  for (int t = 0; t <= 2 * n_ - 3; ++t) {
    int c = ((rank_ - t) % n_ + n_) % n_;
    elems += chunk_begin(c + 1, count) - chunk_begin(c, count);
  }
  return elems * wire_bytes(opt_.wire);
}

void RingAllreduce::post_initial_sends(const float* in, std::size_t count) {
  const std::size_t lo0 = chunk_begin(rank_, count), end = chunk_begin(rank_ + 1, count);
  const std::size_t wb = wire_bytes(opt_.wire);
  const char* base = reinterpret_cast<const char*>(in);
  if (opt_.wire != WireType::kFloat32) {
    encode(opt_.wire, in + lo0, stage_.data() + lo0 * wb, end - lo0);
    base = reinterpret_cast<const char*>(stage_.data());
  }
  for (std::size_t lo = lo0; lo < end; lo += seg_elems_) {
    std::size_t n = std::min(end, lo + seg_elems_) - lo;
    sends_.push_back(comm_.isend(base + lo * wb, n * wb, next_, opt_.tag));
  }
  first_sends_ = sends_.size() - send_base_;
}

// Drives the transport while this rank computes: Open MPI moves data (and answers rendezvous
// handshakes) only inside MPI calls, so a long reduction without one stalls the neighbours.
void RingAllreduce::poke() {
  for (std::size_t k = head_ + 1; k < posted_; ++k)
    if (!recvs_[k]->test()) return;  // one MPI_Test on a pending request progresses everything
  if (!sends_.empty()) sends_.back()->test();
}

template <typename F>
void RingAllreduce::in_pieces(std::size_t n, F&& f) {
  constexpr std::size_t kPiece = 32 * 1024;  // floats between progress calls (128 KiB)
  for (std::size_t a = 0; a < n; a += kPiece) {
    if (a) poke();
    f(a, std::min(n, a + kPiece));
  }
}

void RingAllreduce::process(std::size_t k, const float* in, float* out, float scale) {
  const Item& it = items_[k];
  const std::size_t n = it.hi - it.lo, wb = wire_bytes(opt_.wire);
  const bool forward = it.step + 1 <= 2 * n_ - 3;
  const bool reduce = it.step <= n_ - 2;
  const float s = it.step == n_ - 2 ? scale : 1.0f;  // the chunk is complete after this step
  const auto* slot = scratch_.data() + (k % opt_.window) * slot_elems_ * wb;
  const float* src = in + it.lo;
  float* dst = out + it.lo;
  if (opt_.wire == WireType::kFloat32) {
    // Reduce from the slot straight into the output, then pass the output segment on while it
    // is still in cache; all-gather segments were received into the output directly.
    if (reduce)
      in_pieces(n, [&](std::size_t a, std::size_t b) {
        reduce_wire(opt_.wire, src + a, slot + a * wb, dst + a, b - a, s);
      });
    if (forward) sends_.push_back(comm_.isend(dst, n * wb, next_, opt_.tag));
    return;
  }
  // Half wire: segments travel in stage_ (each element has its own place; an all-gather receive
  // reuses a place only once the send that read it completed: plan_reuse).
  auto* stage = stage_.data() + it.lo * wb;
  if (reduce && it.step < n_ - 2) {
    in_pieces(n, [&](std::size_t a, std::size_t b) {
      reduce_wire(opt_.wire, src + a, slot + a * wb, dst + a, b - a, 1.0f);
      encode(opt_.wire, dst + a, stage + a * wb, b - a);
    });
  } else if (reduce) {
    in_pieces(n, [&](std::size_t a, std::size_t b) {
      reduce_wire(opt_.wire, src + a, slot + a * wb, dst + a, b - a, s);
      encode(opt_.wire, dst + a, stage + a * wb, b - a);
      decode(opt_.wire, stage + a * wb, dst + a, b - a);  // keep exactly what the others get
    });
  } else {
    decode(opt_.wire, stage, dst, n);  // all-gather: received into stage_, passed on unchanged
  }
  if (forward) sends_.push_back(comm_.isend(stage, n * wb, next_, opt_.tag));
}

// reuses_[k]: the send (counted from send_base_) that read the memory item k receives into, or
// -1. Sends go out in a fixed order: this rank's chunk first, then item j's forward as send
// first_sends + j (every item before one of step <= N-3 is forwarded too).
void RingAllreduce::plan_reuse(bool aliased_first_sends, std::size_t count) {
  const std::size_t lo0 = chunk_begin(rank_, count);
  const std::size_t first_sends =
      (chunk_begin(rank_ + 1, count) - lo0 + seg_elems_ - 1) / seg_elems_;
  std::vector<std::size_t> first(2 * n_ - 2, items_.size());  // each step's first item
  for (std::size_t k = items_.size(); k-- > 0;) first[items_[k].step] = k;
  reuses_.assign(items_.size(), -1);
  for (std::size_t k = 0; k < items_.size(); ++k) {
    const Item& it = items_[k];
    if (it.step == n_ - 1 && aliased_first_sends) {
      reuses_[k] = static_cast<std::ptrdiff_t>((it.lo - lo0) / seg_elems_);  // own chunk
    } else if (it.step >= n_) {  // the same segment of the same chunk, step - N
      reuses_[k] =
          static_cast<std::ptrdiff_t>(first_sends + first[it.step - n_] + k - first[it.step]);
    }
  }
}

// Whether item k's receive buffer is ours: the send that read it (if any) ran and completed.
bool RingAllreduce::buffer_free(std::size_t k) {
  if (reuses_[k] < 0) return true;
  const std::size_t s = send_base_ + static_cast<std::size_t>(reuses_[k]);
  return s < sends_.size() && sends_[s]->test();
}

// What the loop waits for: the oldest receive, or (none posted) the send the next one reuses.
std::string RingAllreduce::waiting_for() const {
  if (head_ < posted_)
    return "ring all-reduce step " + std::to_string(items_[head_].step) + ", " +
           describe_op(false, prev_, opt_.tag);
  return "ring all-reduce step " + std::to_string(items_[head_].step) + ", " +
         describe_op(true, next_, opt_.tag) + " (whose buffer that step receives into)";
}

// What the end of a run waits for: send s, the oldest not complete (its step as the successor
// receives it).
std::string RingAllreduce::unfinished_send(std::size_t s) const {
  std::string step = "(a send of an earlier run that failed)";
  if (s >= send_base_) {
    const std::size_t j = s - send_base_;  // first sends, then item j - first_sends_'s forward
    step = "step " + std::to_string(j < first_sends_ ? 0 : items_[j - first_sends_].step + 1);
  }
  return "ring all-reduce " + step + ", " + describe_op(true, next_, opt_.tag) +
         " (the end of the run: send " + std::to_string(s + 1) + " of " +
         std::to_string(sends_.size()) + " not complete)";
}

void RingAllreduce::post_receives(float* out) {
  const std::size_t wb = wire_bytes(opt_.wire), window = opt_.window;
  for (; posted_ < items_.size() && posted_ < head_ + window; ++posted_) {
    if (!buffer_free(posted_)) break;  // and the ones behind it: matching is in posting order
    const Item& it = items_[posted_];
    void* dst = scratch_.data() + (posted_ % window) * slot_elems_ * wb;  // reduce-scatter
    if (it.step > n_ - 2)
      dst = opt_.wire == WireType::kFloat32 ? static_cast<void*>(out + it.lo)
                                            : static_cast<void*>(stage_.data() + it.lo * wb);
    recvs_[posted_] = comm_.irecv(dst, (it.hi - it.lo) * wb, prev_, opt_.tag);
  }
}

void RingAllreduce::run(const float* in, float* out, std::size_t count, float scale) {
  if (n_ == 1 || count == 0) {
    for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * scale;
    return;
  }
  items_ = ring_receives(rank_, n_, count, seg_elems_);
  const std::size_t wb = wire_bytes(opt_.wire);
  // Scratch slots as long as this run's longest reduce-scatter segment (rounded up to 16 floats,
  // as segments are, so slots stay 64-byte apart), not segment_bytes: a segment far above the
  // chunks (--segment-bytes 256M: 1 GiB of zeroed scratch per rank for a 1 MiB all-reduce; 4G:
  // std::bad_alloc) then costs only what the run receives.
  slot_elems_ = 0;
  for (const Item& it : items_)
    if (it.step <= n_ - 2) slot_elems_ = std::max(slot_elems_, it.hi - it.lo);
  slot_elems_ = (slot_elems_ + 15) / 16 * 16;
  recvs_.clear();  // none left posted: a failed run let go of its receives (below)
  recvs_.resize(items_.size());
  const std::size_t scratch = static_cast<std::size_t>(opt_.window) * slot_elems_ * wb;
  if (scratch_.size() < scratch) scratch_.resize(scratch);
  if (opt_.wire != WireType::kFloat32 && stage_.size() < count * wb) stage_.resize(count * wb);
  head_ = posted_ = 0;
  send_base_ = sends_.size();  // a failed run's sends, still unfinished, come first
  plan_reuse(in == out || opt_.wire != WireType::kFloat32, count);
  try {
    move_data(in, out, count, scale);
  } catch (...) {
    // The receives are let go before the failure leaves run(): `out` is the caller's, freed as
    // the error unwinds. One that had matched the message of a sender stopped mid-message is
    // released unfinished after --timeout and noted (common/mpi_comm.cc); the owners of what it
    // may still write into keep that memory (scratch_ and stage_ are ReceiveVectors, the
    // caller's `out` its owner's business: common/kept_memory.h, docs/LIMITS.md). The sends not
    // complete stay until the next run or the ring's end, and MPI may read their buffers later
    // still (a successor stopped before it took them goes on): `in`, `out` and stage_ are noted
    // now, before the caller frees its buffers, and kept by their owners the same way.
    recvs_.clear();
    for (auto& s : sends_) s->note_if_unfinished();
    throw;
  }
}

void RingAllreduce::move_data(const float* in, float* out, std::size_t count, float scale) {
  const std::size_t wb = wire_bytes(opt_.wire);
  post_initial_sends(in, count);
  ProgressWaiter waiter(comm_, opt_.timeout, std::chrono::microseconds(opt_.spin_us), 500,
                        liveness_);
  while (head_ < items_.size()) {
    post_receives(out);
    if (head_ < posted_ && recvs_[head_]->test()) {
      const Item& it = items_[head_];
      RecvStatus st = recvs_[head_]->status();
      STARRING_CHECK(st.bytes == (it.hi - it.lo) * wb, comm_.where(), ": ring step ", it.step,
                     " got ", st.bytes, " bytes from rank ", prev_, ", expected ",
                     (it.hi - it.lo) * wb);
      recvs_[head_].reset();
      process(head_, in, out, scale);
      ++head_;
      waiter.progressed();
      continue;
    }
    waiter.idle([&] { return waiting_for(); });
  }
  // The last sends are waited for as the receives were: a successor that died or stopped before
  // it took one is named with the step and the census (or the PeerLiveness's verdict), not as a
  // bare "timeout ... in send to rank N" (Request::wait). Tested in order, the oldest unfinished
  // one named; one that completed before an older one is found complete when its turn comes.
  for (std::size_t s = 0; s < sends_.size();) {
    if (sends_[s]->test()) {
      ++s;
      waiter.progressed();
      continue;
    }
    waiter.idle([&] { return unfinished_send(s); });
  }
  sends_.clear();
}

}  // namespace starring
