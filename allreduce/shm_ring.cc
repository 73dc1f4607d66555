#include "allreduce/shm_ring.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "allreduce/progress_waiter.h"
#include "common/census.h"
#include "common/comm_util.h"
#include "common/error.h"
#include "common/mpi_comm.h"
#include "common/stall_watch.h"

namespace starring {

namespace {

constexpr std::size_t kHeader = 128;     // head and tail on separate cache lines:
constexpr std::size_t kTailOffset = 64;  // head at 0, tail at 64
constexpr std::size_t kSlotHeader = 64;  // (step, lo) of the segment; keeps data 64-byte aligned
// segment_bytes is clamped to these for a slot's data (common/config_use.cc's size note says so)
constexpr std::size_t kMinSlotBytes = 4 << 10, kMaxSlotBytes = 256 << 10;
// ~ShmRing's wait for the node's votes (see there); close() waits the Comm's timeout instead
constexpr Seconds kDestructorGrace{120};

std::uint64_t load(const std::uint64_t* p) {
  return std::atomic_ref<const std::uint64_t>(*p).load(std::memory_order_acquire);
}
void store(std::uint64_t* p, std::uint64_t v) {
  std::atomic_ref<std::uint64_t>(*p).store(v, std::memory_order_release);
}

#if defined(__SSE2__)
// o_nt = o2 = (a + b) * s, with o_nt written by streaming (non-temporal) stores: the output is
// not read again during the all-reduce, so it need not be fetched into cache before it is
// overwritten (that read-for-ownership would add a third of the memory traffic). o2 may be
// null. The stores are ordered by the _mm_sfence at the end of run(). Neither `a` nor `o_nt` is
// restrict: in place a == o_nt (same index), and an object written through a restrict pointer
// must not be read through another one, whichever of the two carries the qualifier.
void add_stream(const float* a, const float* __restrict b, float* o_nt, float* __restrict o2,
                std::size_t n, float s) {
  std::size_t i = 0;
  auto one = [&](std::size_t k) {
    const float v = (a[k] + b[k]) * s;
    o_nt[k] = v;
    if (o2) o2[k] = v;
  };
  for (; i < n && (reinterpret_cast<std::uintptr_t>(o_nt + i) & 15); ++i) one(i);
  const __m128 vs = _mm_set1_ps(s);
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_mul_ps(_mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)), vs);
    _mm_stream_ps(o_nt + i, v);
    if (o2) _mm_storeu_ps(o2 + i, v);
  }
  for (; i < n; ++i) one(i);
}
void copy_stream(const float* __restrict a, float* __restrict o_nt, float* __restrict o2,
                 std::size_t n) {
  std::size_t i = 0;
  auto one = [&](std::size_t k) {
    o_nt[k] = a[k];
    if (o2) o2[k] = a[k];
  };
  for (; i < n && (reinterpret_cast<std::uintptr_t>(o_nt + i) & 15); ++i) one(i);
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(a + i);
    _mm_stream_ps(o_nt + i, v);
    if (o2) _mm_storeu_ps(o2 + i, v);
  }
  for (; i < n; ++i) one(i);
}
void fence() { _mm_sfence(); }
#else
void add_stream(const float* a, const float* b, float* o_nt, float* o2, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) {
    o_nt[i] = (a[i] + b[i]) * s;
    if (o2) o2[i] = o_nt[i];
  }
}
void copy_stream(const float* a, float* o_nt, float* o2, std::size_t n) {
  std::memcpy(o_nt, a, n * sizeof(float));
  if (o2) std::memcpy(o2, a, n * sizeof(float));
}
void fence() {}
#endif

// o1 = o2 = (a + b) * s;  o2 may be null; a may be o1 (in place), so neither is restrict.
void add_to(const float* a, const float* __restrict b, float* o1, float* __restrict o2,
            std::size_t n, float s) {
  if (o2) {
    for (std::size_t i = 0; i < n; ++i) o1[i] = o2[i] = (a[i] + b[i]) * s;
  } else {
    for (std::size_t i = 0; i < n; ++i) o1[i] = (a[i] + b[i]) * s;
  }
}
void copy_to(const float* __restrict a, float* __restrict o1, float* __restrict o2, std::size_t n) {
  if (o2) {
    for (std::size_t i = 0; i < n; ++i) o1[i] = o2[i] = a[i];
  } else {
    std::memcpy(o1, a, n * sizeof(float));
  }
}

}  // namespace

std::unique_ptr<ShmRing> ShmRing::create(Comm& comm, const RingOptions& opt) {
  auto* m = dynamic_cast<MpiComm*>(&comm);
  if (!m || comm.size() < 2 || opt.wire != WireType::kFloat32) return nullptr;
  // Bounds the constructor's MPI_Win_allocate_shared and MPI_Barrier too (returned from here).
  StallWatch watch(
      "MPI_Comm_split_type, MPI_Allreduce, MPI_Win_allocate_shared and MPI_Barrier (the "
      "shared-memory ring's set-up)");
  MPI_Comm node = host_comm(m->mpi_comm(), comm.rank());
  int node_size = 0;
  CHECK_MPI(MPI_Comm_size(node, &node_size));
  int all_local = node_size == comm.size(), everywhere = 0;
  CHECK_MPI(MPI_Allreduce(&all_local, &everywhere, 1, MPI_INT, MPI_MIN, m->mpi_comm()));
  if (!everywhere) {
    MPI_Comm_free(&node);
    return nullptr;
  }
  return std::unique_ptr<ShmRing>(new ShmRing(comm, opt, node));
}

ShmRing::ShmRing(Comm& comm, const RingOptions& opt, MPI_Comm node)
    : comm_(comm),
      opt_(opt),
      n_(comm.size()),
      rank_(comm.rank()),
      next_((comm.rank() + 1) % comm.size()),
      prev_((comm.rank() - 1 + comm.size()) % comm.size()),
      node_(node) {
  // Segments of at most 256 KiB. While every rank has a core, 2 MiB of them per rank keeps the
  // hand-over in cache; with more ranks than cores a rank must be able to run far ahead within
  // its time slice, so 16 MiB (measured at 16 MiB all-reduces on 2 cores: np 2 ran 1.9x
  // MPI_Allreduce with 2 MiB of slots and 1.5x with 16 MiB; np 4 ran 1.4x with 2 MiB and 1.85x
  // with 16 MiB).
  slot_elems_ = std::clamp(opt.segment_bytes, kMinSlotBytes, kMaxSlotBytes) / sizeof(float);
  slot_elems_ = slot_elems_ / 16 * 16;
  slot_bytes_ = kSlotHeader + slot_elems_ * sizeof(float);
  const bool oversubscribed =
      static_cast<unsigned>(n_) > std::max(1u, std::thread::hardware_concurrency());
  const std::size_t ring_bytes = opt.shm_ring_bytes ? opt.shm_ring_bytes
                                 : oversubscribed   ? 16 << 20
                                                    : 2 << 20;
  slots_ = std::max<std::size_t>(opt.window, ring_bytes / (slot_elems_ * sizeof(float)));
  // While every rank has a core, slots are shared out so that reduced segments find one free
  // (drain()); with more ranks than cores a rank publishes all it can within its time slice, as
  // the 16 MiB of slots are there for (np 4 on 2 cores, 64 MiB: the shared-out slots read 0.30,
  // 0.38, 0.29 GB/s busbw against 0.42, 0.57, 0.52 taking every free slot, alternating runs at
  // load 9-15).
  own_cap_ = oversubscribed ? slots_ : std::max<std::size_t>(1, slots_ / 2);
  keep_free_ = !oversubscribed && slots_ >= 2 ? 1 : 0;
  MPI_Info info;
  CHECK_MPI(MPI_Info_create(&info));
  CHECK_MPI(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  const MPI_Aint bytes = kHeader + slots_ * slot_bytes_;
  void* base = nullptr;
  CHECK_MPI(MPI_Win_allocate_shared(bytes, 1, info, node_, &base, &win_));
  MPI_Info_free(&info);
  MPI_Aint size = 0;
  int disp = 0;
  void* prev_base = nullptr;
  CHECK_MPI(MPI_Win_shared_query(win_, prev_, &size, &disp, &prev_base));  // node rank == rank
  auto* mine = static_cast<unsigned char*>(base);
  auto* theirs = static_cast<unsigned char*>(prev_base);
  my_head_ = reinterpret_cast<std::uint64_t*>(mine);
  my_tail_ = reinterpret_cast<std::uint64_t*>(mine + kTailOffset);
  prev_head_ = reinterpret_cast<std::uint64_t*>(theirs);
  prev_tail_ = reinterpret_cast<std::uint64_t*>(theirs + kTailOffset);
  my_slots_ = reinterpret_cast<float*>(mine + kHeader);
  prev_slots_ = reinterpret_cast<const float*>(theirs + kHeader);
  store(my_head_, 0);
  store(my_tail_, 0);
  CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
  CHECK_MPI(MPI_Barrier(node_));  // every header is zero before anyone starts
}

ShmRing::~ShmRing() {
  if (closed_) return;
  // Freeing the window is collective (MPI_Win_free returns only when every rank of the node has
  // called it), so the ranks first vote, without blocking, on whether any ring failed. A rank
  // whose ring failed (a peer silent for --timeout, or corrupt data) knows the answer already:
  // it posts its vote and leaves at once, leaking the window, its communicator and the vote in
  // flight (later MPI calls progress it). Waiting would not help: the peer it names may be hung
  // or dead, and the caller then either agrees on the outcome with every rank or stops the job
  // with MPI_Abort (experiments/main.cc). The other ranks wait for the vote and free only when
  // no rank failed, so no rank enters MPI_Win_free without all the others. (np 2, --fault
  // hang:1:5 --timeout 5: a failed rank that waited here for its peers delayed the end by 10 s.)
  // The grace does not depend on --timeout here: ranks may reach this point far apart (one of
  // them failed early elsewhere, another was slow), and one that gave up while the others free
  // would hang them. A peer that never votes is gone: leak, as above.
  vote_and_free(kDestructorGrace);
}

// Posts this rank's vote; unless this rank failed, waits up to `limit` for the node's votes and
// frees the window when no rank failed (see ~ShmRing).
bool ShmRing::vote_and_free(Seconds limit) {
  closed_ = true;
  auto* vote = new int[2]{failed_ ? 1 : 0, 0};  // mine, the maximum: outlives a vote in flight
  MPI_Request req;
  if (MPI_Iallreduce(vote, vote + 1, 1, MPI_INT, MPI_MAX, node_, &req) != MPI_SUCCESS || failed_)
    return true;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(limit);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const bool any_failed = vote[1] != 0;
  delete[] vote;
  if (any_failed) return true;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
  MPI_Comm_free(&node_);
  return true;
}

// The destructor's vote and free (see there), at the end of a run that went well on this rank:
// the ranks got here after the same last all-reduce, so a rank that is not here within --timeout
// is stopped or stuck (SIGSTOP after its last step, a debugger). Without this bound the others
// waited the destructor's fixed 120 s here, then the outcome's agreement without limit.
void ShmRing::close(bool failed) {
  if (closed_) return;
  failed_ = failed_ || failed;
  const Seconds timeout = comm_.timeout();
  if (vote_and_free(timeout)) return;
  failed_ = true;  // the window is leaked: a rank that did vote may be freeing it (see above)
  throw TimeoutError(timeout_message(comm_, timeout,
                                     "shared-memory ring, waiting for the node's ranks to finish "
                                     "with it at the end of the run") +
                     census(comm_, census_grace(timeout)));
}

CommCounters ShmRing::counters() const {
  return CommCounters{bytes_sent_.load(), bytes_recv_.load(), msgs_sent_.load(), msgs_recv_.load()};
}

bool ShmRing::slot_free() const { return produced_ - load(my_tail_) < slots_; }

// Slot m's data; its header sits just before it.
float* ShmRing::my_slot(std::uint64_t m) const {
  auto* base = reinterpret_cast<unsigned char*>(my_slots_);
  return reinterpret_cast<float*>(base + (m % slots_) * slot_bytes_ + kSlotHeader);
}

void ShmRing::publish(std::uint64_t step, std::uint64_t lo) {
  auto* h =
      reinterpret_cast<Header*>(reinterpret_cast<unsigned char*>(my_slot(produced_)) - kSlotHeader);
  h->step = step;
  h->lo = lo;
  store(my_head_, ++produced_);  // release: data and header before the count
  msgs_sent_.fetch_add(1, std::memory_order_relaxed);
}

// Whether this rank's own chunk may take one more slot now. While messages to forward are still
// to come, its segments in flight are capped at half the slots (see drain()).
bool ShmRing::own_may_go() {
  if (fwd_left_ == 0) return true;
  const std::uint64_t tail = load(my_tail_);
  while (!own_sent_.empty() && own_sent_.front() < tail) own_sent_.pop_front();
  return own_sent_.size() < own_cap_;
}

// Copies queued messages into free slots, forwards first. Returns true if any moved.
// While messages to forward are still to come (and every rank has a core: see the constructor),
// it leaves one slot free and lets this rank's own chunk hold at most half of them, so that a
// reduced segment usually finds a free slot and is written there as it is computed (process()), not
// reduced into the output and copied from there into a slot later: a fourth pass over the data.
// Taking every free slot, the own chunk kept them all whenever it was longer than the slots: np 2,
// 16 MiB (an 8 MiB chunk, 2 MiB of slots) and 64 MiB copied 32 of 32 and 128 of 128 forwards so
// (the fused path moves the same data in three passes). Neither limit can stall the ring: each
// holds only while messages of this rank wait in its slots, which the successor consumes without
// waiting for anything (process()).
bool ShmRing::drain() {
  bool moved = false;
  const std::size_t keep = fwd_left_ > 0 ? keep_free_ : 0;
  while (produced_ - load(my_tail_) + keep < slots_) {
    std::deque<Pending>* q = &pending_;
    if (q->empty()) {
      if (own_.empty() || !own_may_go()) break;
      own_sent_.push_back(produced_);
      q = &own_;
    }
    const Pending p = q->front();
    q->pop_front();
    std::memcpy(my_slot(produced_), p.src, p.n * sizeof(float));
    bytes_sent_.fetch_add(p.n * sizeof(float), std::memory_order_relaxed);
    publish(p.step, p.lo);
    moved = true;
  }
  return moved;
}

// Handles the predecessor's next message (which must be published).
void ShmRing::process(const float* in, float* out, float scale) {
  auto* base =
      reinterpret_cast<const unsigned char*>(prev_slots_) + (consumed_ % slots_) * slot_bytes_;
  const Header h = *reinterpret_cast<const Header*>(base);
  const float* data = reinterpret_cast<const float*>(base + kSlotHeader);
  auto corrupt = [&] {
    return detail::concat(comm_.where(), ": corrupt shared-memory ring message from rank ", prev_,
                          " (step ", h.step, ", element ", h.lo, ")");
  };
  // The step first: a corrupt one must not reach the int arithmetic below (overflow).
  STARRING_CHECK(h.step <= static_cast<std::uint64_t>(2 * n_ - 3), corrupt());
  const int step = static_cast<int>(h.step);
  const int c = ((rank_ - step - 1) % n_ + n_) % n_;
  const std::size_t begin = ring_chunk_begin(c, n_, count_),
                    end = ring_chunk_begin(c + 1, n_, count_);
  STARRING_CHECK(h.lo >= begin && h.lo < end && (h.lo - begin) % slot_elems_ == 0, corrupt());
  const std::size_t lo = h.lo, n = std::min(end, lo + slot_elems_) - lo;
  const bool forward = step + 1 <= 2 * n_ - 3;
  const bool reduce = step <= n_ - 2, last_reduce = step == n_ - 2;
  // Fused: write the result straight into my next slot when one is free.
  float* slot = forward && slot_free() ? my_slot(produced_) : nullptr;
  float* dst = out + lo;
  // The output is streamed when this rank will not read it again (nothing queued from it).
  const bool stream = slot || !forward;
  if (reduce && !last_reduce && slot) {
    add_to(in + lo, data, slot, nullptr, n, 1.0f);  // a partial sum only travels on
  } else if (reduce) {
    if (stream) {
      add_stream(in + lo, data, dst, slot, n, last_reduce ? scale : 1.0f);
    } else {
      add_to(in + lo, data, dst, nullptr, n, last_reduce ? scale : 1.0f);
    }
  } else if (stream) {
    copy_stream(data, dst, slot, n);
  } else {
    copy_to(data, dst, nullptr, n);
  }
  store(prev_tail_, ++consumed_);  // the predecessor may reuse that slot
  if (forward) --fwd_left_;
  ++seg_done_;
  bytes_recv_.fetch_add(n * sizeof(float), std::memory_order_relaxed);
  msgs_recv_.fetch_add(1, std::memory_order_relaxed);
  if (slot) {
    bytes_sent_.fetch_add(n * sizeof(float), std::memory_order_relaxed);
    publish(step + 1, lo);
  } else if (forward) {
    pending_.push_back(Pending{dst, n, static_cast<std::uint64_t>(step + 1), lo});
  }
}

void ShmRing::run_loop(const float* in, float* out, float scale) {
  ProgressWaiter waiter(comm_, opt_.timeout, std::chrono::microseconds(opt_.spin_us), 500,
                        liveness_);
  while (seg_done_ < seg_total_ || !pending_.empty() || !own_.empty()) {
    bool progress = drain();
    if (seg_done_ < seg_total_ && load(prev_head_) > consumed_) {
      process(in, out, scale);
      progress = true;
    }
    if (progress) {
      waiter.progressed();
      continue;
    }
    waiter.idle([&] {
      if (seg_done_ < seg_total_)
        return "shared-memory ring (" + std::to_string(seg_total_ - seg_done_) +
               " segments to go), waiting for data from rank " + std::to_string(prev_) + " (tag " +
               std::to_string(opt_.tag) + ")";
      return "shared-memory ring, waiting for rank " + std::to_string(next_) +
             " to take data (tag " + std::to_string(opt_.tag) + ")";
    });
  }
}

void ShmRing::run(const float* in, float* out, std::size_t count, float scale) {
  STARRING_CHECK(!failed_, comm_.where(), ": shared-memory ring used after a failure");
  // close() freed (or leaked) the window: slots and counters are gone.
  STARRING_CHECK(!closed_, comm_.where(), ": shared-memory ring used after close()");
  if (count == 0) return;
  count_ = count;
  const std::vector<RingItem> items = ring_receives(rank_, n_, count, slot_elems_);
  seg_total_ = items.size();
  seg_done_ = 0;
  fwd_left_ = static_cast<std::size_t>(std::count_if(
      items.begin(), items.end(), [&](const RingItem& it) { return it.step + 1 <= 2 * n_ - 3; }));
  own_sent_.clear();
  const std::size_t lo0 = ring_chunk_begin(rank_, n_, count);
  const std::size_t end = ring_chunk_begin(rank_ + 1, n_, count);
  for (std::size_t lo = lo0; lo < end; lo += slot_elems_)
    own_.push_back(Pending{in + lo, std::min(end, lo + slot_elems_) - lo, 0, lo});
  try {
    run_loop(in, out, scale);
    fence();  // streamed stores to the output are visible before run() returns
  } catch (...) {
    failed_ = true;
    pending_.clear();
    own_.clear();
    throw;
  }
}

}  // namespace starring
