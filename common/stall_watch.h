// Some MPI calls wait for every member without a time limit: MPI_Init, the set-up collectives
// (MPI_Comm_dup, MPI_Comm_split_type, MPI_Comm_create_group, MPI_Win_allocate_shared, the
// MPI_Allreduce and MPI_Barrier around them) and bench's `mpi` rows (the blocking MPI_Allreduce,
// timed as nccl-tests times the vendor's collective). A rank stopped (SIGSTOP, a debugger) or
// stuck just before one holds the others there for good, and mpirun with them. A StallWatch
// bounds such calls: if it is still alive after the limit (--timeout + 10 s once the options are
// known; see set_stall_limit) with no progress() in that time, this rank prints
//   starring: error: rank 0: <what> did not complete within 11 s (--timeout + 10 s): <why>
// and exits 1, and mpirun stops the job, the stopped rank with it. The stopped rank cannot be
// named there (the collective does not say who is missing); the bounded waits before each such
// call (experiments/main.cc's meetings, first_error) name it when it stops earlier.
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace starring {

// The limit every later StallWatch uses: `timeout_s` + 10 s. Before any call, or where
// `timeout_s` is not a valid --timeout (not finite, <= 0, > 1e6 s): the default --timeout's.
void set_stall_limit(double timeout_s);
double stall_limit_s();

class StallWatch {
 public:
  static constexpr const char* kSetupWhy =
      "another rank is stopped or stuck before it (MPI's set-up collectives have no time limit)";
  explicit StallWatch(std::string what, std::string why = kSetupWhy);
  // For tests (tests/common/test_stall_watch.cc), which cannot wait the 10 s and more of the real
  // limit: `limit_s` instead of stall_limit_s() (the line then says "within 0.5 s (the limit
  // given)"), and `on_fire`, when set, called with the line (without "starring: error: ") instead
  // of printing it and exiting; the watch is then over.
  using OnFire = std::function<void(const std::string& line)>;
  StallWatch(std::string what, std::string why, double limit_s, OnFire on_fire);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;
  // One of a series of calls completed: the limit starts again (a relaxed atomic increment).
  void progress();

 private:
  struct State;
  void start(std::string what, std::string why, double limit_s, std::string limit_note,
             OnFire on_fire);
  std::shared_ptr<State> state_;
};

}  // namespace starring
