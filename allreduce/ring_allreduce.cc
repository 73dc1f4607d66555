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
  scratch_.resize(static_cast<std::size_t>(opt_.window) * seg_elems_ * wire_bytes(opt_.wire));
  slot_sends_.resize(opt_.window);
}

std::size_t RingAllreduce::chunk_begin(int c, std::size_t count) const {
  if (c >= n_) return count;
  // count * c fits: count < 2^40 in practice; rounded down to 16 elements.
  return (count / n_ * c + count % n_ * c / n_) / 16 * 16;
}

void RingAllreduce::build_items(std::size_t count) {
  items_.clear();
  for (int t = 0; t <= 2 * n_ - 3; ++t) {
    int c = ((rank_ - t - 1) % n_ + n_) % n_;
    for (std::size_t lo = chunk_begin(c, count), end = chunk_begin(c + 1, count); lo < end;
         lo += seg_elems_) {
      items_.push_back(Item{t, lo, std::min(end, lo + seg_elems_)});
    }
  }
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
  const void* base = in + lo0;
  if (opt_.wire != WireType::kFloat32) {
    stage0_.resize(std::max(stage0_.size(), (end - lo0) * wb));
    encode(opt_.wire, in + lo0, stage0_.data(), end - lo0);
    base = stage0_.data();
  }
  for (std::size_t lo = lo0; lo < end; lo += seg_elems_) {
    std::size_t n = std::min(end, lo + seg_elems_) - lo;
    sends_.push_back(
        comm_.isend(static_cast<const char*>(base) + (lo - lo0) * wb, n * wb, next_, opt_.tag));
  }
}

void RingAllreduce::process(std::size_t k, const float* in, float* out, float scale) {
  const Item& it = items_[k];
  const std::size_t n = it.hi - it.lo;
  const bool reduce = it.step <= n_ - 2;       // reduce-scatter step
  const bool last_reduce = it.step == n_ - 2;  // the chunk is complete after this
  const bool forward = it.step + 1 <= 2 * n_ - 3;
  const std::size_t slot = k % opt_.window;
  void* scratch = scratch_.data() + slot * seg_elems_ * wire_bytes(opt_.wire);
  if (opt_.wire == WireType::kFloat32) {
    if (reduce)
      reduce_wire(opt_.wire, in + it.lo, scratch, out + it.lo, n, last_reduce ? scale : 1);
    if (forward) sends_.push_back(comm_.isend(out + it.lo, n * 4, next_, opt_.tag));
    return;
  }
  // Half wire: the slot that received the segment also carries it onward.
  if (reduce) {
    reduce_wire(opt_.wire, in + it.lo, scratch, out + it.lo, n, last_reduce ? scale : 1);
    encode(opt_.wire, out + it.lo, scratch, n);
    if (last_reduce) decode(opt_.wire, scratch, out + it.lo, n);  // owner keeps what others get
  } else {
    decode(opt_.wire, scratch, out + it.lo, n);
  }
  if (forward) slot_sends_[slot] = comm_.isend(scratch, n * 2, next_, opt_.tag);
}

void RingAllreduce::run(const float* in, float* out, std::size_t count, float scale) {
  if (n_ == 1 || count == 0) {
    for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * scale;
    return;
  }
  build_items(count);
  const bool half = opt_.wire != WireType::kFloat32;
  const std::size_t wb = wire_bytes(opt_.wire), window = opt_.window;
  std::vector<std::unique_ptr<Request>> recvs(items_.size());
  post_initial_sends(in, count);
  ProgressWaiter waiter(comm_, opt_.timeout);
  std::size_t head = 0, posted = 0;
  while (head < items_.size()) {
    while (posted < items_.size() && posted < head + window) {
      std::size_t slot = posted % window;
      if (half && slot_sends_[slot]) {
        if (!slot_sends_[slot]->test()) break;
        slot_sends_[slot].reset();
      }
      const Item& it = items_[posted];
      void* dst = (!half && it.step > n_ - 2)
                      ? static_cast<void*>(out + it.lo)
                      : static_cast<void*>(scratch_.data() + slot * seg_elems_ * wb);
      recvs[posted] = comm_.irecv(dst, (it.hi - it.lo) * wb, prev_, opt_.tag);
      ++posted;
    }
    if (head < posted && recvs[head]->test()) {
      RecvStatus st = recvs[head]->status();
      STARRING_CHECK(st.bytes == (items_[head].hi - items_[head].lo) * wb, comm_.where(),
                     ": ring step ", items_[head].step, " got ", st.bytes, " bytes from rank ",
                     prev_, ", expected ", (items_[head].hi - items_[head].lo) * wb);
      recvs[head].reset();
      process(head, in, out, scale);
      ++head;
      waiter.progressed();
      continue;
    }
    waiter.idle([&] {
      return "ring all-reduce step " + std::to_string(items_[head].step) + ", " +
             describe_op(false, prev_, opt_.tag);
    });
  }
  for (auto& s : sends_) s->wait(opt_.timeout);
  for (auto& s : slot_sends_)
    if (s) s->wait(opt_.timeout);
  sends_.clear();
  for (auto& s : slot_sends_) s.reset();
}

}  // namespace starring
