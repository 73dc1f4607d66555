// Scratch folders for tests that write checkpoints and run outputs: scratch_dir("resume_x") is a
// fresh, empty folder of this test process alone, removed when the process ends.
//  - Of this process alone (its user id and pid in the name; a folder another user's process
//    left with this pid could not be removed): two suites running at once on one machine (a
//    sanitizer build beside the plain one, or two engineers' builds) shared fixed folders such
//    as /tmp/starring_ps_edges_ckpt, and each run deleted the other's checkpoints mid-run.
//  - On tmpfs (/dev/shm) where there is one, else the temp folder: these tests check what is
//    written, not how fast a disk flushes. On a machine busy with other jobs' writes, one fsync
//    of a 10 KB checkpoint (written 04:04:02, its 'latest' pointer 04:04:32) took the other
//    in-process workers' whole 30 s --timeout (PsTrainerBytes.CheckpointsLeaveTheStepBytesAlone:
//    "rank 1: timeout after 30.0 s in recv from rank 0"); the fsync calls are still made.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace starring::testing {

inline std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  struct Made {  // one per process: removes every folder it handed out at exit
    std::mutex mu;
    fs::path root;
    ~Made() {
      std::error_code ec;
      if (!root.empty()) fs::remove_all(root, ec);
    }
  };
  static Made made;
  std::lock_guard<std::mutex> lk(made.mu);
  if (made.root.empty()) {
    std::error_code ec;
    const fs::path shm = "/dev/shm";
    const bool tmpfs = fs::is_directory(shm, ec) && ::access(shm.c_str(), W_OK) == 0;
    made.root = (tmpfs ? shm : fs::temp_directory_path()) /
                ("starring_test_" + std::to_string(::getuid()) + "_" + std::to_string(::getpid()));
    fs::remove_all(made.root, ec);  // a folder of an earlier process with this pid
  }
  const fs::path d = made.root / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

}  // namespace starring::testing
