// SharedSegment: memory that another process on the same host maps, for the parameter server's
// shared-memory data path (ps/protocol.h).
//
// On one host, a push over MPI point-to-point copies every byte three times before the server
// reads it (the worker into a staging buffer, the sender into the shared-memory FIFO of Open MPI's
// vader transport, the receiver out of it), and a reply twice more. Instead a worker copies a
// chunk of gradient once into its own segment and sends only the header; the server reduces
// straight out of that segment. The server keeps its parameters in its own segment and answers a
// push with an empty message; the worker copies the chunk's parameters out of that segment. The
// messages still travel through the Comm, so ordering, deadlines and failure handling are the
// Comm's, unchanged.
//
// The owner creates the segment with memfd_create (so it vanishes with the last process that maps
// it: a killed rank leaves nothing behind in /dev/shm) and describes it as {host, pid, fd, ino,
// dev, nonce, bytes}; a peer on the same host (same name and boot id) opens /proc/<pid>/fd/<fd>
// read-only once its inode and device match, and checks the nonce written at the segment's
// start. open() returns null whenever that is not possible (another host or pid namespace, no
// /proc, no permission): the caller then keeps the message path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

namespace starring::ps {

class SharedSegment {
 public:
  // A new zero-filled segment of `bytes` usable bytes (pages are backed when first touched);
  // null if the system does not allow it.
  static std::unique_ptr<SharedSegment> create(std::size_t bytes);
  // Maps a peer's segment read-only from its describe(); null if it cannot be reached from here.
  static std::unique_ptr<SharedSegment> open(const nlohmann::json& id);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  nlohmann::json describe() const;  // what a peer passes to open()
  float* floats() const { return reinterpret_cast<float*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  SharedSegment() = default;
  // Takes ownership of `fd` and of the mapping `map` (header + `bytes` of data).
  static std::unique_ptr<SharedSegment> adopt(int fd, void* map, std::size_t bytes,
                                              std::uint64_t nonce);
  int fd_ = -1;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  unsigned char* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint64_t nonce_ = 0;
};

// o = a for n floats, with streaming (non-temporal) stores where the CPU has them: for the
// parameters a worker copies out of a server's segment, which nothing reads again soon, so they
// need not be fetched into the cache before being overwritten. The stores are fenced before it
// returns.
void copy_streaming(const float* a, float* o, std::size_t n);

}  // namespace starring::ps
