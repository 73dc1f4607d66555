// The MPI job a test binary runs in (tests/test_main.cc initialises MPI; the plain ctest is one
// rank, the _mpi ctests N under mpirun): its size, this process's rank, and the skips that keep
// MPI cases to the mpirun runs and in-process cases to the plain one. Shared by the suites that
// run under mpirun (tests/common/comm_cases.h, tests/ps/test_ps_mpi.cc,
// tests/trainer/test_mixed_hosts.cc, and through tests/allreduce/allreduce_test_util.h the
// allreduce, bench and GPU suites).
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

namespace starring::testing {

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace starring::testing

// MPI cases run only under mpirun (np >= 2); in-process cases once, in the plain test.
#define MPI_ONLY() \
  if (::starring::testing::world_size() < 2) GTEST_SKIP() << "needs mpirun -np >= 2"
#define INPROC_ONLY()                        \
  if (::starring::testing::world_size() > 1) \
  GTEST_SKIP() << "in-process cases run in the plain test"
