// StallGate: a deterministic stopped sender for the MPI tests. Rank 0 makes no MPI call (as a
// rank stopped by SIGSTOP) until rank 1 opens the gate, outside MPI: rank 1 creates a file, named
// after its PID so that concurrent jobs do not meet. Used by the cases of receives abandoned
// mid-message (test_comm_mpi, test_ring; docs/LIMITS.md).
#pragma once
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace starring::testing {

class StallGate {
 public:
  // Collective over MPI_COMM_WORLD (rank 1's PID names the file).
  explicit StallGate(const std::string& name) {
    int rank = 0, pid1 = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) pid1 = static_cast<int>(::getpid());
    MPI_Bcast(&pid1, 1, MPI_INT, 1, MPI_COMM_WORLD);
    file_ = std::filesystem::temp_directory_path() /
            (name + "_" + std::to_string(::getuid()) + "_" + std::to_string(pid1));
    owner_ = rank == 1;
  }
  ~StallGate() {
    std::error_code ec;
    if (owner_) std::filesystem::remove(file_, ec);
  }
  StallGate(const StallGate&) = delete;
  StallGate& operator=(const StallGate&) = delete;

  // Rank 0: sleeps, making no MPI call, until the gate is open or `limit` passed.
  void wait(std::chrono::duration<double> limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!std::filesystem::exists(file_) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Rank 1.
  void open() const { std::ofstream{file_}; }

 private:
  std::filesystem::path file_;
  bool owner_ = false;
};

}  // namespace starring::testing
