// Files written whole or not at all (checkpoints, their "latest" pointer, the summary file).
//
// The bytes go to a temporary file in the same folder, "<file>.<host>.<pid>.<8 hex>.tmp" (host:
// this host's name, any character other than a letter, digit, '-' or '_' as '_'; pid: the
// writer's; hex: random), created anew (O_EXCL: a name that exists is never reused or followed
// through a link), written, fsync'ed, then renamed over <file> (atomic on POSIX), and the folder
// fsync'ed. Two writers of one file (two jobs sharing a --checkpoint-dir or a --summary-file, two
// threads) each write their own temporary file, so every rename installs one writer's whole bytes
// and the last one wins. Until 2026-12-02 every writer used "<file>.tmp": a second writer's
// O_TRUNC emptied the first's file while it wrote, and the first's rename installed the second's
// half-written bytes, or failed when the second had renamed it already.
//
// A temporary file outlives its writer only when the writer was killed by SIGKILL (an interrupt
// removes its own: common/fault.h). remove_stale_temporary_files removes such a file when
//   - it was written on this host by a process that no longer exists (no process has its pid), or
//   - it was last modified over kStaleTemporaryAge ago: another host's (a pid says nothing there),
//     this host's whose pid was reused, and "<file>.tmp" files of builds before the names above.
// So a live writer's file is never removed: here its process exists, elsewhere its writer
// modified it within the hour (every write does; the fsync and rename follow). Hosts are told apart
// by name: containers sharing one folder need names of their own (Docker's and Kubernetes'
// defaults are).
#pragma once
#include <chrono>
#include <functional>
#include <string>

namespace starring {

inline constexpr std::chrono::hours kStaleTemporaryAge{1};

// Writes `bytes` to `path` atomically (above). Error naming `where`, the temporary file and the
// cause when a step fails; the temporary file is then removed and `path` keeps what it held.
void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& where);

// The parts of a temporary file's name (no folder): "<file>.<host>.<pid>.<hex>.tmp", or (an
// earlier build's) "<file>.tmp" with host empty and pid -1. False for any other name.
struct TemporaryName {
  std::string file, host;
  long pid = -1;
};
bool parse_temporary_name(const std::string& name, TemporaryName& out);

// This host's name as the temporary names spell it.
const std::string& temporary_host_tag();

// Removes the stale temporary files (above) in `dir` of the files for which `of(file name)` is
// true. Files it cannot look at or remove are left; returns how many it removed.
int remove_stale_temporary_files(const std::string& dir,
                                 const std::function<bool(const std::string&)>& of);

}  // namespace starring
