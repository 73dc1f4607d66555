// Atomic file writes and their temporary files (see atomic_file.h).
#include "trainer/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "common/error.h"
#include "common/fault.h"

namespace starring {
namespace fs = std::filesystem;
namespace {

constexpr char kTmp[] = ".tmp";
constexpr std::size_t kTmpLen = sizeof kTmp - 1;

void fsync_dir(const std::string& dir, const std::string& where) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error(where + ": cannot open folder " + dir + ": " + std::strerror(errno));
  ::fsync(fd);
  ::close(fd);
}

// A fresh name for a temporary file of `path` (the random part from a generator of this thread,
// seeded from the system's entropy: two processes or threads do not repeat each other's).
std::string temporary_name(const std::string& path) {
  thread_local std::mt19937 rng{std::random_device{}()};
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(rng()));
  return path + "." + temporary_host_tag() + "." + std::to_string(::getpid()) + "." + hex + kTmp;
}

bool all_of_kind(const std::string& s, int (*is)(int)) {
  for (const char ch : s)
    if (!is(static_cast<unsigned char>(ch))) return false;
  return !s.empty();
}

// Whether the temporary file `t` (at `p`) has no writer any more.
bool stale(const TemporaryName& t, const fs::path& p) {
  std::error_code ec;
  const auto modified = fs::last_write_time(p, ec);
  if (ec) return false;  // gone meanwhile (its writer renamed it), or not to be looked at
  if (fs::file_time_type::clock::now() - modified > kStaleTemporaryAge) return true;
  if (t.pid <= 0 || t.host != temporary_host_tag() || t.pid == ::getpid()) return false;
  // EPERM: another user's process lives with that pid
  return ::kill(static_cast<pid_t>(t.pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

const std::string& temporary_host_tag() {
  static const std::string tag = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) buf[0] = '\0';
    std::string s = buf;
    for (char& ch : s)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
    return s.empty() ? std::string("host") : s;
  }();
  return tag;
}

bool parse_temporary_name(const std::string& name, TemporaryName& out) {
  if (name.size() <= kTmpLen || name.compare(name.size() - kTmpLen, kTmpLen, kTmp) != 0)
    return false;
  const std::string stem = name.substr(0, name.size() - kTmpLen);
  out = TemporaryName{};
  // "<file>.<host>.<pid>.<hex>": the last three dot-separated parts, when they are of their kind
  const std::size_t d3 = stem.rfind('.');
  const std::size_t d2 = d3 == std::string::npos || d3 == 0 ? d3 : stem.rfind('.', d3 - 1);
  const std::size_t d1 = d2 == std::string::npos || d2 == 0 ? d2 : stem.rfind('.', d2 - 1);
  if (d1 != std::string::npos && d1 > 0) {
    const std::string host = stem.substr(d1 + 1, d2 - d1 - 1);
    const std::string pid = stem.substr(d2 + 1, d3 - d2 - 1), hex = stem.substr(d3 + 1);
    long value = -1;
    const auto [end, err] = std::from_chars(pid.data(), pid.data() + pid.size(), value);
    if (hex.size() == 8 && all_of_kind(hex, isxdigit) && all_of_kind(pid, isdigit) &&
        err == std::errc() && end == pid.data() + pid.size() && !host.empty() &&
        host.find_first_not_of(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
            std::string::npos) {
      out.file = stem.substr(0, d1);
      out.host = host;
      out.pid = value;
      return true;
    }
  }
  out.file = stem;  // an earlier build's "<file>.tmp"
  return true;
}

int remove_stale_temporary_files(const std::string& dir,
                                 const std::function<bool(const std::string&)>& of) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    TemporaryName t;
    if (!parse_temporary_name(e.path().filename().string(), t) || !of(t.file)) continue;
    std::error_code rm;
    if (e.is_regular_file(rm) && stale(t, e.path()) && fs::remove(e.path(), rm)) ++removed;
  }
  return removed;
}

void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& where) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {  // a name that exists: another random part
    tmp = temporary_name(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt == 9))
      throw Error(where + ": cannot write " + tmp + ": " + std::strerror(errno));
  }
  // An interrupt removes it meanwhile (common/fault.h): no half-written file is left
  track_temporary_file(tmp, true);
  struct Untrack {
    const std::string& tmp;
    ~Untrack() { track_temporary_file(tmp, false); }
  } untrack{tmp};
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(n < 0 ? errno : ENOSPC);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(where + ": writing " + tmp + " failed: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  const int synced = ::fsync(fd), sync_errno = errno;
  const int closed = ::close(fd);  // always: a failed fsync must not leak the descriptor
  if (synced != 0 || closed != 0) {
    const std::string why = std::strerror(synced != 0 ? sync_errno : errno);
    ::unlink(tmp.c_str());
    throw Error(where + ": writing " + tmp + " failed: " + why);
  }
  if (const int err = rename_temporary_file(tmp, path); err != 0) {
    ::unlink(tmp.c_str());
    if (err == EINTR)
      throw Error(where + ": " + path + " not written: the run was stopped by a signal");
    throw Error(where + ": cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  fsync_dir(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string(),
            where);
}

}  // namespace starring
