// MPI's set-up collectives (MPI_Comm_dup, MPI_Comm_split_type, MPI_Comm_create_group,
// MPI_Win_allocate_shared, the MPI_Allreduce and MPI_Barrier around them) wait for every member
// without a time limit: a rank stopped (SIGSTOP, a debugger) or stuck just before one holds the
// others there for good, and mpirun with them. A SetupWatch bounds such a call: if it is still
// alive after the set-up limit (--timeout + 10 s once the options are known; see
// set_setup_limit), this rank prints
//   starring: error: rank 0: <what> did not complete within 40 s (--timeout + 10 s): another
//   rank is stopped or stuck before it (MPI's set-up collectives have no time limit)
// and exits 1, and mpirun stops the job, the stopped rank with it. The stopped rank cannot be
// named there (the collective does not say who is missing); the bounded waits before each such
// call (experiments/main.cc's meetings, first_error) name it when it stops earlier.
#pragma once
#include <memory>
#include <string>

namespace starring {

// The limit every later SetupWatch uses: `timeout_s` + 10 s. Before any call: the default
// --timeout's.
void set_setup_limit(double timeout_s);
double setup_limit_s();

class SetupWatch {
 public:
  explicit SetupWatch(std::string what);
  ~SetupWatch();
  SetupWatch(const SetupWatch&) = delete;
  SetupWatch& operator=(const SetupWatch&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace starring
