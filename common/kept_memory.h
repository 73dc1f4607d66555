// Memory MPI may still use after its owner is done with it, kept for the rest of the process.
//
// A rank that fails leaves transfers behind that it cannot finish: a send to a stopped peer (MPI
// may read its buffer when that peer goes on), a receive that had matched a message whose sender
// stopped mid-message (MpiRequest lets it go unfinished after --timeout, common/mpi_comm.cc: MPI
// may write the rest of the message when that sender goes on), a collective left pending. Their
// memory must then outlive the process's MPI calls: freed, it is reused (MPI's late write lands
// in another object, or glibc's free lists) or unmapped (a crash in the rank's last MPI calls,
// before or while it writes its error line and output files). The process is failing, so the
// memory is kept (never freed) instead; the cost is memory held by a process that is ending.
//
// Two halves: whoever lets go of a transfer notes its bytes (note_left_to_mpi: MpiRequest for a
// receive it cannot cancel, Request::note_if_unfinished for a send given up on as a failure
// unwinds, Comm::send's and the ring's); an owner that frees memory a transfer may have used asks
// first (keep_if_left_to_mpi), or lets its allocator ask (ReceiveVector). Sends released by
// design keep their buffers themselves (keep_for_process, ps/protocol.h's release_unfinished, a
// static note). docs/LIMITS.md, "Receives abandoned mid-message".
#pragma once
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace starring {

// [p, p + bytes) may be written (or read) by MPI for the rest of the process: a receive let go
// unfinished, a collective left pending. Never throws; bytes == 0 notes nothing.
void note_left_to_mpi(const void* p, std::size_t bytes) noexcept;

// Whether [p, p + bytes) overlaps memory noted by note_left_to_mpi (false at once while nothing
// was: a load of one atomic flag).
bool left_to_mpi(const void* p, std::size_t bytes) noexcept;

// For the owner of [p, p + bytes), before it frees it: true when MPI may still use part of it,
// and then it is kept for the process (the caller must not free it). Never throws.
bool keep_if_left_to_mpi(const void* p, std::size_t bytes) noexcept;

// Keeps `buf` alive until the process ends, reachable (a leak checker does not report it).
void keep_for_process(std::shared_ptr<const void> buf) noexcept;
void keep_for_process(std::unique_ptr<std::vector<char>> buf) noexcept;
// Remembers `p`, never to be freed (reachable, for a leak checker).
void keep_reachable(const void* p) noexcept;

// keep_if_left_to_mpi for a container that is not a ReceiveVector (a std::string a text was
// received into), before it goes: its memory moves to an owner kept for the process, `buf` is
// left empty. Never throws (without memory for that owner, `buf` keeps it).
template <class Buffer>
void keep_if_left_to_mpi(Buffer& buf) noexcept {
  if (buf.empty() || !left_to_mpi(buf.data(), buf.size() * sizeof(*buf.data()))) return;
  if (Buffer* kept = new (std::nothrow) Buffer(std::move(buf))) keep_reachable(kept);
}

// An allocator for buffers receives are posted into (or sends read from): memory that a
// transfer let go unfinished may still use is kept instead of freed, on every path that frees it
// (destruction, a reallocating resize, assignment). Costs a flag's load per free while no receive
// was let go.
template <class T>
struct ReceiveAllocator {
  using value_type = T;
  ReceiveAllocator() = default;
  template <class U>
  ReceiveAllocator(const ReceiveAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept {
    if (!keep_if_left_to_mpi(p, n * sizeof(T))) std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const ReceiveAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using ReceiveVector = std::vector<T, ReceiveAllocator<T>>;

}  // namespace starring
