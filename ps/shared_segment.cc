#include "ps/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "common/gpu_assignment.h"

namespace starring::ps {

namespace {

constexpr std::size_t kHeaderBytes = 4096;               // keeps the data page-aligned
constexpr std::uint64_t kMagic = 0x4d485353504e5253ull;  // "SRNPSSHM"

struct Header {
  std::uint64_t magic, nonce, bytes;
};

// This host: its name and boot id (two machines may share a name, never a boot id).
std::string host_id() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return this_host_name() + "/" + boot;
}

}  // namespace

std::unique_ptr<SharedSegment> SharedSegment::create(std::size_t bytes) {
  const int fd = memfd_create("starring-ps", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  const std::size_t total = kHeaderBytes + bytes;
  void* map = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(total)) == 0)
    map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  std::random_device rd;
  const std::uint64_t nonce = (std::uint64_t{rd()} << 32) ^ rd();
  *static_cast<Header*>(map) = Header{kMagic, nonce, bytes};
  return adopt(fd, map, bytes, nonce);
}

std::unique_ptr<SharedSegment> SharedSegment::adopt(int fd, void* map, std::size_t bytes,
                                                    std::uint64_t nonce) {
  std::unique_ptr<SharedSegment> s(new SharedSegment());
  s->fd_ = fd;
  s->map_ = map;
  s->map_bytes_ = kHeaderBytes + bytes;
  s->data_ = static_cast<unsigned char*>(map) + kHeaderBytes;
  s->bytes_ = bytes;
  s->nonce_ = nonce;
  return s;
}

std::unique_ptr<SharedSegment> SharedSegment::open(const nlohmann::json& id) {
  if (!id.is_object() || id.value("host", std::string()) != host_id()) return nullptr;
  const auto nonce = id.value("nonce", std::uint64_t{0});
  const auto bytes = id.value("bytes", std::size_t{0});
  const std::string path =
      "/proc/" + std::to_string(id.value("pid", -1)) + "/fd/" + std::to_string(id.value("fd", -1));
  const std::size_t total = kHeaderBytes + bytes;
  // The same file as the owner's (inode and device), checked before opening: in another PID
  // namespace the path could name some unrelated process's descriptor (a tty, a device), and
  // opening those can have side effects. Non-blocking: should it still be a FIFO, open must not
  // wait.
  auto same_file = [&](const struct stat& st) {
    return S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) == total &&
           st.st_ino == id.value("ino", std::uint64_t{0}) &&
           st.st_dev == id.value("dev", std::uint64_t{0});
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !same_file(st)) return nullptr;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && same_file(st))
    map = mmap(nullptr, total, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  auto s = adopt(fd, map, bytes, nonce);
  const Header& h = *static_cast<const Header*>(map);
  if (h.magic != kMagic || h.nonce != nonce || h.bytes != bytes) return nullptr;  // someone else's
  return s;
}

SharedSegment::~SharedSegment() {
  if (map_) munmap(map_, map_bytes_);
  if (fd_ >= 0) close(fd_);
}

void copy_streaming(const float* __restrict a, float* __restrict o, std::size_t n) {
#if defined(__SSE2__)
  std::size_t i = 0;
  for (; i < n && (reinterpret_cast<std::uintptr_t>(o + i) & 15); ++i) o[i] = a[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(o + i, _mm_loadu_ps(a + i));
  for (; i < n; ++i) o[i] = a[i];
  _mm_sfence();
#else
  std::memcpy(o, a, n * sizeof(float));
#endif
}

nlohmann::json SharedSegment::describe() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) st = {};
  return {{"host", host_id()},
          {"pid", static_cast<int>(getpid())},
          {"fd", fd_},
          {"ino", static_cast<std::uint64_t>(st.st_ino)},
          {"dev", static_cast<std::uint64_t>(st.st_dev)},
          {"nonce", nonce_},
          {"bytes", bytes_}};
}

}  // namespace starring::ps
