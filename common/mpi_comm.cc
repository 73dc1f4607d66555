#include "common/mpi_comm.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <thread>

#include "common/clock.h"
#include "common/comm_util.h"
#include "common/error.h"
#include "common/kept_memory.h"
#include "common/stall_watch.h"
#include "common/test_hosts.h"

namespace starring {

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw Error(detail::concat("rank ", rank, ": ", call, " failed: ", std::string(msg, len), " [",
                             file, ":", line, "]"));
}

namespace {

// Polls `req` until it completes or `timeout` passes. Spins on MPI_Test first (the fast path of
// a ring step), then yields, then sleeps with a growing back-off so a silent peer costs no CPU.
// An MPI_Test that fails (the communicator returns errors, see MpiComm::MpiComm) ends it too,
// with its error code in *rc (MPI_SUCCESS otherwise).
bool poll_until(MPI_Request* req, MPI_Status* st, Seconds timeout, int* rc) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(timeout);
  auto sleep = std::chrono::microseconds(5);
  for (long iter = 0;; ++iter) {
    int done = 0;
    *rc = MPI_Test(req, &done, st);
    if (done || *rc != MPI_SUCCESS) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    const auto waited = now - start;
    if (waited < std::chrono::microseconds(200)) continue;  // spin
    if (waited < std::chrono::milliseconds(5)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
}

int checked_count(const MpiComm& comm, std::size_t bytes, int peer, int tag, bool is_send) {
  STARRING_CHECK(bytes <= static_cast<std::size_t>(INT_MAX), comm.where(), ": message of ", bytes,
                 " bytes exceeds MPI's int count in ", describe_op(is_send, peer, tag),
                 " (send it in chunks)");
  STARRING_CHECK(tag >= 0 && tag <= tags::kMaxTag, comm.where(), ": tag ", tag, " out of range");
  STARRING_CHECK((!is_send && peer == kAnySource) || (peer >= 0 && peer < comm.size()),
                 comm.where(), ": peer rank ", peer, " out of range (size ", comm.size(), ")");
  return static_cast<int>(bytes);
}

// The window in which abandoned receives wait for their messages (~MpiRequest), one for the
// process: MPI moves every transfer of the process at each MPI_Test, so the receives one failure
// leaves, waited for one after another, have all had the first one's wait, and share its limit.
// Kept as the window's end (Clock's count): a receive left less than its limit after that end
// gets no wait of its own (it was moving all through the window); one left later opens a new one.
std::atomic<Clock::rep> abandon_window_end{Clock::time_point::min().time_since_epoch().count()};

Clock::time_point abandon_deadline(Seconds limit) {
  const auto now = Clock::now();
  const auto span = std::chrono::duration_cast<Clock::duration>(limit);
  Clock::rep end = abandon_window_end.load();
  for (;;) {
    const Clock::time_point until{Clock::duration(end)};
    // never past this receive's own limit: windows are shared across communicators, whose
    // --timeout may differ
    if (until != Clock::time_point::min() && now - until < span) return std::min(until, now + span);
    if (abandon_window_end.compare_exchange_weak(end, (now + span).time_since_epoch().count()))
      return now + span;
  }
}

}  // namespace

class MpiRequest : public Request {
 public:
  MpiRequest(MpiComm* comm, bool is_send, int peer, int tag, const void* buf, std::size_t bytes)
      : comm_(comm),
        is_send_(is_send),
        peer_(peer),
        tag_(tag),
        buf_(buf),
        bytes_(bytes),
        cancel_limit_(comm->timeout()) {}
  ~MpiRequest() override {
    if (req_ == MPI_REQUEST_NULL) return;
    // Abandoned: a send is released and finishes in the background; a receive is cancelled and
    // then completed, so that MPI never writes into freed memory. Errors are swallowed here.
    if (is_send_) {
      MPI_Request_free(&req_);
      return;
    }
    MPI_Cancel(&req_);
    // MPI says a cancelled request's wait is local, but Open MPI (ob1) cannot cancel a receive
    // that has matched a message: it completes only once the whole message is in, and the rest
    // of one above the eager limit (64 KiB over TCP, 4 KiB over shared memory) moves only while
    // the sender makes MPI calls. A sender stopped (SIGSTOP) or stuck mid-message held MPI_Wait
    // here for good, before this rank had said why: over TCP, ring-p2p -np 2 with a rank stopped
    // mid-training never ended in 2 of 4 jobs, ps with its server stopped in 2 of 13 (the
    // workers' reply receives); docs/LIMITS.md. So the receive gets as long as any wait, the
    // communicator's --timeout, shared by the receives one failure leaves (abandon_deadline): a
    // live sender's message arrives (an unmatched receive completes at the first test), and one
    // still short then is freed as it stands (MPI completes it on its own). Its buffer may still
    // be written should that sender resume while this process makes MPI calls (a receive is
    // left so only by a rank failing the run, a peer silent for --timeout, which soon exits):
    // it is noted, and its owner keeps that memory instead of freeing it (common/kept_memory.h).
    MPI_Status st;
    int done = 0;
    int rc = MPI_Test(&req_, &done, &st);
    if (done || rc != MPI_SUCCESS) return;
    const Seconds left = abandon_deadline(cancel_limit_) - Clock::now();
    if (!poll_until(&req_, &st, std::max(left, Seconds(0)), &rc) && req_ != MPI_REQUEST_NULL) {
      note_left_to_mpi(buf_, bytes_);
      MPI_Request_free(&req_);
    }
  }
  MPI_Request* raw() { return &req_; }

  bool test() override {
    if (!error_.empty()) throw Error(error_);
    if (done_) return true;
    MPI_Status st;
    int flag = 0;
    const int rc = MPI_Test(&req_, &flag, &st);
    if (rc != MPI_SUCCESS) failed(rc, st);
    if (flag) finish(st);
    return done_;
  }

  bool may_be_done() override {
    if (done_) return true;
    int flag = 0;
    CHECK_MPI(MPI_Request_get_status(req_, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  }

  RecvStatus wait(Seconds timeout) override {
    if (!error_.empty()) throw Error(error_);
    if (done_) return status_;
    MPI_Status st;
    int rc = MPI_SUCCESS;
    if (!poll_until(&req_, &st, timeout, &rc)) {
      throw TimeoutError(timeout_message(*comm_, timeout, describe_op(is_send_, peer_, tag_)));
    }
    if (rc != MPI_SUCCESS) failed(rc, st);
    finish(st);
    return status_;
  }

  RecvStatus status() const override { return status_; }

  // A send released unfinished may be read by MPI after its request goes (its peer, stopped
  // before it took the message, goes on while this rank makes its last MPI calls): its buffer
  // freed, MPI sends whatever the memory then holds, or faults where it was unmapped.
  void note_if_unfinished() noexcept override {
    if (!is_send_ || req_ == MPI_REQUEST_NULL) return;  // a receive: the destructor notes it
    int done = 0;
    if (MPI_Test(&req_, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
      done_ = true;  // req_ is MPI_REQUEST_NULL now
      return;
    }
    note_left_to_mpi(buf_, bytes_);
  }

 private:
  // A failed completion: a message longer than the receive buffer is named as InProcComm names
  // it (common/inproc_comm.cc); any other error as CHECK_MPI does.
  // Every later test() or wait() throws it again.
  [[noreturn]] void failed(int rc, const MPI_Status& st) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (!is_send_ && cls == MPI_ERR_TRUNCATE) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      error_ =
          detail::concat(comm_->where(), ": message of ", count, " bytes from rank ", st.MPI_SOURCE,
                         " (tag ", tag_, ") truncated: receive buffer holds ", bytes_);
    } else {
      try {
        check_mpi(rc, is_send_ ? "MPI_Test (send)" : "MPI_Test (receive)", __FILE__, __LINE__);
      } catch (const Error& e) {
        error_ = e.what();
      }
    }
    done_ = true;  // req_ as MPI left it: the destructor cancels one still active
    throw Error(error_);
  }

  void finish(const MPI_Status& st) {
    done_ = true;
    req_ = MPI_REQUEST_NULL;
    if (is_send_) return;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    status_.source = st.MPI_SOURCE;
    status_.bytes = static_cast<std::size_t>(count);
    comm_->on_recv_done(status_.bytes);
  }

  MpiComm* comm_;
  bool is_send_;
  int peer_, tag_;
  const void* buf_;       // the buffer
  std::size_t bytes_;     // its size (a receive's capacity)
  Seconds cancel_limit_;  // an abandoned receive's wait for its message (see the destructor)
  bool done_ = false;
  std::string error_;  // set when the request completed with an error (failed())
  MPI_Request req_ = MPI_REQUEST_NULL;
  RecvStatus status_;
};

MPI_Comm host_comm(MPI_Comm comm, int key) {
  const int test_host = test_host_index();  // before any collective: it may throw
  MPI_Comm node = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &node));
  if (test_host < 0) return node;
  MPI_Comm part = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(node, test_host, key, &part);
  MPI_Comm_free(&node);
  CHECK_MPI(rc);
  return part;
}

MpiComm::MpiComm(MPI_Comm parent, int thread_level) {
  int init = 0;
  MPI_Initialized(&init);
  STARRING_CHECK(init, "MpiComm: MPI is not initialised (call MPI_Init_thread first)");
  int provided = 0;
  CHECK_MPI(MPI_Query_thread(&provided));
  {
    StallWatch watch("MPI_Comm_dup and MPI_Comm_split_type (setting up a communicator)");
    CHECK_MPI(MPI_Comm_dup(parent, &comm_));
    // Errors come back as codes (thrown by CHECK_MPI and MpiRequest, naming the rank), not
    // MPI_ERRORS_ARE_FATAL's abort of the job: a message longer than its receive buffer (a peer
    // of another build, another protocol on a tag) ended every rank with Open MPI's banner.
    // Communicators made from this one (SubComm's, the ring's private one) inherit it.
    CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    CHECK_MPI(MPI_Comm_size(comm_, &size_));
    MPI_Comm node = host_comm(comm_, rank_);  // the ranks sharing this host, ordered by rank
    CHECK_MPI(MPI_Comm_rank(node, &node_rank_));
    CHECK_MPI(MPI_Comm_free(&node));
  }
  STARRING_CHECK(provided >= thread_level, where(), ": the MPI library provides thread level ",
                 provided, ", StarRing needs ", thread_level,
                 thread_level == MPI_THREAD_MULTIPLE ? " (MPI_THREAD_MULTIPLE)" : "",
                 ": rebuild Open MPI with thread support or initialise with MPI_Init_thread");
  void* ub = nullptr;
  int flag = 0;
  CHECK_MPI(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag));
  STARRING_CHECK(flag && *static_cast<int*>(ub) >= tags::kMaxTag, where(), ": MPI_TAG_UB ",
                 flag ? *static_cast<int*>(ub) : 0, " is below the tags StarRing uses (",
                 tags::kMaxTag, ")");
}

MpiComm::~MpiComm() {
  int fin = 0;
  MPI_Finalized(&fin);
  // Not under a collective left pending (collective_left_pending): leaked.
  if (!fin && comm_ != MPI_COMM_NULL && !collective_left_) MPI_Comm_free(&comm_);
}

std::unique_ptr<Request> MpiComm::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  int n = checked_count(*this, bytes, peer, tag, true);
  auto r = std::make_unique<MpiRequest>(this, true, peer, tag, buf, bytes);
  count_sent(bytes);  // before the peer can have it (see Comm::counters)
  CHECK_MPI(MPI_Isend(buf, n, MPI_BYTE, peer, tag, comm_, r->raw()));
  return r;
}

std::unique_ptr<Request> MpiComm::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  int n = checked_count(*this, bytes, peer, tag, false);
  auto r = std::make_unique<MpiRequest>(this, false, peer, tag, buf, bytes);
  CHECK_MPI(MPI_Irecv(buf, n, MPI_BYTE, peer == kAnySource ? MPI_ANY_SOURCE : peer, tag, comm_,
                      r->raw()));
  return r;
}

void MpiComm::barrier(Seconds timeout) {
  MPI_Request req;
  CHECK_MPI(MPI_Ibarrier(comm_, &req));
  MPI_Status st;
  int rc = MPI_SUCCESS;
  if (!poll_until(&req, &st, timeout, &rc)) {
    // MPI forbids freeing or cancelling a pending collective: the request is left behind (the
    // caller is about to fail the run anyway), and the communicator with it.
    collective_left_pending();
    throw TimeoutError(timeout_message(*this, timeout, "barrier"));
  }
  CHECK_MPI(rc);
}

MPI_Comm mpi_comm_of(const Comm& comm, const char* what) {
  auto* m = dynamic_cast<const MpiComm*>(&comm);
  if (!m)
    throw ConfigError(detail::concat(comm.where(), ": ", what,
                                     " needs an MPI communicator (run under mpirun with the "
                                     "world Comm), got an in-process or sub communicator"));
  return m->mpi_comm();
}

}  // namespace starring
