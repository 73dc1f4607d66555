// SubComm: a subset of another Comm's ranks, renumbered 0..k-1 in the order given (e.g. the
// worker ranks when the ps backend adds server ranks). Messages go through the parent with the
// same tags; kAnySource receives are restricted to members (a non-member's message with the
// same tag is an error). Timeout errors from the parent name PARENT ranks. Bytes are counted
// on both the SubComm and its parent.
#pragma once
#include <memory>
#include <vector>

#include "common/comm.h"

namespace starring {

class SubComm : public Comm {
 public:
  // `members`: distinct parent ranks; the calling rank (parent->rank()) must be one of them.
  SubComm(std::shared_ptr<Comm> parent, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  void barrier(Seconds timeout) override;
  // Its messages travel on the parent's communicator: the parent keeps it (see Comm).
  void collective_left_pending() noexcept override { parent_->collective_left_pending(); }

  const std::vector<int>& members() const { return members_; }
  int parent_rank(int sub_rank) const { return members_.at(sub_rank); }
  // Sub rank of a parent rank, or -1 when it is not a member.
  int sub_rank(int parent_rank) const;
  Comm& parent() { return *parent_; }

 private:
  friend class SubRequest;
  void on_recv_done(std::size_t bytes) { count_recv(bytes); }
  // The parent rank of `peer`; kAnySource passes through where `any_ok` (receives).
  int check_peer(int peer, bool any_ok) const;
  std::shared_ptr<Comm> parent_;
  std::vector<int> members_;
  std::vector<int> to_sub_;  // parent rank -> sub rank or -1
  int rank_ = -1;
};

}  // namespace starring
