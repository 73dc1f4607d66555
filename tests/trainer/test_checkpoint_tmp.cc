// The temporary files of atomic writes (write_file_atomically, trainer/atomic_file.h):
//   - two writers of one file (two jobs sharing a --checkpoint-dir or a --summary-file) never
//     write into each other's temporary file: every writer's is "<file>.<host>.<pid>.<hex>.tmp",
//     created anew (until 2026-12-02 all used "<file>.tmp": a second writer's O_TRUNC emptied
//     the first's half-written file, and one writer's rename installed the other's bytes);
//   - a save removes the temporary files of writers that are gone (this host's, no process with
//     their pid; any host's, untouched for an hour) and leaves a live writer's alone;
//   - a full disk (here a file-size limit) keeps the previous file and leaves no temporary file.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "tests/scratch_dir.h"
#include "trainer/checkpoint.h"

namespace starring {
namespace {
namespace fs = std::filesystem;

CheckpointData sample(std::int64_t step) {
  CheckpointData c;
  c.meta = {{"widths", {4, 3, 2}}, {"optimizer", {{"type", "sgd"}}}};
  c.step = step;
  for (int i = 0; i < 200; ++i) {
    c.params.push_back(0.01f * static_cast<float>(i));
    c.state1.push_back(1e-3f * static_cast<float>(i));
  }
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// This host as the temporary names spell it (the documented format: letters, digits, '-', '_').
std::string host_tag() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  std::string s = buf;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  return s.empty() ? "host" : s;
}
std::string tmp_name(const std::string& file, const std::string& host, long pid) {
  return file + "." + host + "." + std::to_string(pid) + ".0badc0de.tmp";
}
// A pid no process has now (from the top of the range down).
long gone_pid() {
  long max = 32768;
  std::ifstream("/proc/sys/kernel/pid_max") >> max;
  for (long p = max - 1; p > 1; --p)
    if (::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH) return p;
  return -1;
}
void age(const std::string& path, std::chrono::hours by) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - by);
}

// Another writer of the same file is in the middle of its write: its temporary file (the old
// fixed name, and a live process's own name) stays as it was, and this write still lands whole.
// Before: the write truncated "<file>.tmp" and renamed it away.
TEST(AtomicFile, AnotherWritersTemporaryFileIsLeftAlone) {
  const std::string dir = testing::scratch_dir("ckpt_tmp_other");
  const std::string name = checkpoint_file_name(20), path = dir + "/" + name;
  const std::string fixed = name + ".tmp", live = tmp_name(name, host_tag(), ::getppid());
  spit(dir + "/" + fixed, "another job's first half");
  spit(dir + "/" + live, "another job's, being written");
  const std::string bytes = encode_checkpoint(sample(20));
  write_file_atomically(path, bytes, "rank 0");
  EXPECT_EQ(slurp(path), bytes);
  EXPECT_EQ(slurp(dir + "/" + fixed), "another job's first half");
  EXPECT_EQ(slurp(dir + "/" + live), "another job's, being written");
  std::vector<std::string> want{name, fixed, live};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names_in(dir), want);  // this write's own temporary file was renamed
}

// Writers of one file at once (threads here, jobs or ranks elsewhere): every write succeeds, the
// file ends as one writer's whole bytes, and no temporary file is left. Before: a writer's rename
// could take another's half-written file, and the other's rename then failed (No such file).
TEST(AtomicFile, WritersOfOneFileAtOnceEachInstallWholeBytes) {
  const std::string dir = testing::scratch_dir("ckpt_tmp_race");
  const std::string path = dir + "/summary.json";
  constexpr int kWriters = 4, kWrites = 100;
  std::vector<std::string> contents;
  for (int t = 0; t < kWriters; ++t) contents.push_back(std::string(20000 + 997 * t, 'a' + t));
  std::vector<std::string> errors(kWriters);
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kWrites; ++i) write_file_atomically(path, contents[t], "rank 0");
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kWriters; ++t) EXPECT_EQ(errors[t], "") << "writer " << t;
  const std::string got = slurp(path);
  EXPECT_NE(std::find(contents.begin(), contents.end(), got), contents.end())
      << "a mixed file of " << got.size() << " bytes";
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"summary.json"});
}

// A save removes what killed writers left (a SIGKILL gives no chance to remove it) and only that:
// this host's files of a pid no process has, and any file untouched for over an hour (another
// host's, whose pid says nothing here; the "<file>.tmp" of an earlier build). A live process's,
// another host's recent one, an earlier build's recent one, and files not of checkpoints stay.
TEST(AtomicFile, ASaveRemovesOnlyTemporaryFilesWhoseWriterIsGone) {
  CheckpointConfig k;
  k.dir = testing::scratch_dir("ckpt_tmp_stale");
  k.keep = 5;
  const std::string host = host_tag();
  const long gone = gone_pid();
  ASSERT_GT(gone, 1);
  const auto ck = [](int s) { return checkpoint_file_name(s); };
  const std::vector<std::string> removed{
      tmp_name(ck(10), host, gone),            // this host, its writer gone
      tmp_name("latest", host, gone),          // the pointer's, likewise
      tmp_name(ck(11), "another-host", 4242),  // another host's, aged below
      ck(12) + ".tmp",                         // an earlier build's, aged below
      "latest.tmp",                            // likewise
  };
  const std::vector<std::string> kept{
      tmp_name(ck(13), host, ::getppid()),     // a live writer here
      tmp_name("latest", host, ::getppid()),   // likewise, of the pointer
      tmp_name(ck(14), "another-host", 4242),  // another host's, written just now
      ck(15) + ".tmp",                         // an earlier build's, written just now
      tmp_name("notes.txt", host, gone),       // not a checkpoint's
      "notes.tmp",                             // likewise, aged below
  };
  for (const auto& n : removed) spit(k.dir + "/" + n, "left over");
  for (const auto& n : kept) spit(k.dir + "/" + n, "in use");
  for (const auto& n : {removed[2], removed[3], removed[4], kept[5]})
    age(k.dir + "/" + n, std::chrono::hours(2));
  save_checkpoint(k, sample(20), "rank 0");
  std::vector<std::string> want = kept;
  want.push_back(ck(20));
  want.push_back("latest");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names_in(k.dir), want);
  for (const auto& n : kept) EXPECT_EQ(slurp(k.dir + "/" + n), "in use") << n;
  // none of them is taken for a checkpoint
  k.resume = "latest";
  std::string path;
  EXPECT_EQ(load_resume(k, "rank 0", path).step, 20);
  EXPECT_EQ(path, k.dir + "/" + ck(20));
}

// A full disk while writing (here the file-size limit, which fails the write the same way): an
// Error naming the file's temporary name and the cause; the temporary file is removed and the
// file it was to replace keeps its old content.
TEST(AtomicFile, AFullDiskKeepsThePreviousFile) {
  const std::string dir = testing::scratch_dir("ckpt_tmp_full");
  const std::string path = dir + "/" + checkpoint_file_name(20);
  spit(path, "the previous content");
  std::string msg = "no error";
  {
    struct Limit {  // SIGXFSZ ignored: the write returns EFBIG instead of ending the process
      rlimit was{};
      void (*old)(int) = std::signal(SIGXFSZ, SIG_IGN);
      Limit() {
        ::getrlimit(RLIMIT_FSIZE, &was);
        rlimit small = was;
        small.rlim_cur = 64;
        ::setrlimit(RLIMIT_FSIZE, &small);
      }
      ~Limit() {
        ::setrlimit(RLIMIT_FSIZE, &was);
        std::signal(SIGXFSZ, old);
      }
    } limit;
    try {
      write_file_atomically(path, encode_checkpoint(sample(20)), "rank 1");
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  EXPECT_NE(msg.find("rank 1: writing " + path + "."), std::string::npos) << msg;
  EXPECT_NE(msg.find(".tmp failed: File too large"), std::string::npos) << msg;
  EXPECT_EQ(names_in(dir), std::vector<std::string>{checkpoint_file_name(20)});
  EXPECT_EQ(slurp(path), "the previous content");
}

}  // namespace
}  // namespace starring
