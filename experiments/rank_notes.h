// The ranks' meeting notes for experiments/main.cc: where the next step is a collective that
// waits without a time limit (MPI_Allreduce, MPI_Finalize), every rank first tells every other
// one it is here, so that a rank that never comes (stopped, stuck) can be named after a bound.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace starring {

// Every rank tells every other one it is here: a one-int note on `tag` of `comm`, sent to each
// and received from each; missing() names the ranks whose notes have not come.
class Notes {
 public:
  Notes(MPI_Comm comm, int tag, int rank, int size)
      : got_(size, 0), recvs_(size, MPI_REQUEST_NULL), sends_(size, MPI_REQUEST_NULL) {
    static const int note = 1;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      MPI_Irecv(&got_[r], 1, MPI_INT, r, tag, comm, &recvs_[r]);
      MPI_Isend(&note, 1, MPI_INT, r, tag, comm, &sends_[r]);
    }
  }
  bool all_in() {
    int done = 0;
    MPI_Testall(static_cast<int>(recvs_.size()), recvs_.data(), &done, MPI_STATUSES_IGNORE);
    return done;
  }
  std::vector<int> missing() {
    std::vector<int> out;
    for (std::size_t r = 0; r < recvs_.size(); ++r) {
      int in = 1;
      if (recvs_[r] != MPI_REQUEST_NULL) MPI_Test(&recvs_[r], &in, MPI_STATUS_IGNORE);
      if (!in) out.push_back(static_cast<int>(r));
    }
    return out;
  }
  // Every rank is here (its note came, or it took part in a collective after sending it).
  void finish() {
    MPI_Waitall(static_cast<int>(recvs_.size()), recvs_.data(), MPI_STATUSES_IGNORE);
    MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
  }

 private:
  std::vector<int> got_;
  std::vector<MPI_Request> recvs_, sends_;
};

}  // namespace starring
