#include "common/sub_comm.h"

#include "common/comm_util.h"
#include "common/error.h"

namespace starring {

// Wraps a parent request: translates the source rank and counts bytes on the SubComm.
class SubRequest : public Request {
 public:
  SubRequest(SubComm* comm, std::unique_ptr<Request> inner, bool is_send)
      : comm_(comm), inner_(std::move(inner)), is_send_(is_send) {}
  bool test() override {
    if (!inner_->test()) return false;
    finish();
    return true;
  }
  bool may_be_done() override { return done_ || inner_->may_be_done(); }
  RecvStatus wait(Seconds timeout) override {
    inner_->wait(timeout);
    finish();
    return status_;
  }
  RecvStatus status() const override { return status_; }
  void note_if_unfinished() noexcept override { inner_->note_if_unfinished(); }

 private:
  void finish() {
    if (done_ || is_send_) {
      done_ = true;
      return;
    }
    done_ = true;
    RecvStatus st = inner_->status();
    int sub = comm_->sub_rank(st.source);
    STARRING_CHECK(sub >= 0, comm_->where(), ": received a message from parent rank ", st.source,
                   ", which is not a member of this sub-communicator");
    status_ = RecvStatus{sub, st.bytes};
    comm_->on_recv_done(st.bytes);
  }
  SubComm* comm_;
  std::unique_ptr<Request> inner_;
  bool is_send_;
  bool done_ = false;
  RecvStatus status_;
};

SubComm::SubComm(std::shared_ptr<Comm> parent, std::vector<int> members)
    : parent_(std::move(parent)), members_(std::move(members)) {
  STARRING_CHECK(parent_, "SubComm: null parent");
  to_sub_.assign(parent_->size(), -1);
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
    int m = members_[i];
    STARRING_CHECK(m >= 0 && m < parent_->size(), parent_->where(), ": SubComm member ", m,
                   " out of range (parent size ", parent_->size(), ")");
    STARRING_CHECK(to_sub_[m] < 0, parent_->where(), ": SubComm member ", m, " listed twice");
    to_sub_[m] = i;
  }
  rank_ = to_sub_[parent_->rank()];
  STARRING_CHECK(rank_ >= 0, parent_->where(), ": SubComm built on a rank that is not a member");
  set_timeout(parent_->timeout());
}

int SubComm::sub_rank(int parent_rank) const {
  if (parent_rank < 0 || parent_rank >= static_cast<int>(to_sub_.size())) return -1;
  return to_sub_[parent_rank];
}

int SubComm::check_peer(int peer, bool any_ok) const {
  if (any_ok && peer == kAnySource) return kAnySource;
  STARRING_CHECK(peer >= 0 && peer < size(), where(), ": peer rank ", peer, " out of range (size ",
                 size(), ")");
  return members_[peer];
}

std::unique_ptr<Request> SubComm::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  const int to = check_peer(peer, false);
  count_sent(bytes);  // before the peer can have it (see Comm::counters)
  auto r = parent_->isend(buf, bytes, to, tag);
  return std::make_unique<SubRequest>(this, std::move(r), true);
}

std::unique_ptr<Request> SubComm::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  auto r = parent_->irecv(buf, bytes, check_peer(peer, true), tag);
  return std::make_unique<SubRequest>(this, std::move(r), false);
}

void SubComm::barrier(Seconds timeout) { barrier_over_p2p(*this, timeout); }

}  // namespace starring
