#include "common/kept_memory.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

namespace starring {

namespace {

// One store for the process (MPI's transfers are the process's), never destroyed: a transfer
// may be let go, and memory kept, by destructors that run during static destruction.
struct Kept {
  std::mutex mu;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> left;  // [lo, hi) noted
  std::vector<const void*> raw;                                 // keep_reachable
  std::vector<std::shared_ptr<const void>> owned;               // keep_for_process
  bool all = false;  // a range could not be noted (no memory): every buffer asked about is kept
};
Kept& kept() {
  static auto* k = new Kept();
  return *k;
}
std::atomic<bool> any_left{false};

bool overlaps_locked(const Kept& k, std::uintptr_t lo, std::uintptr_t hi) {
  if (k.all) return true;
  for (const auto& [a, b] : k.left)
    if (lo < b && a < hi) return true;
  return false;
}

}  // namespace

void note_left_to_mpi(const void* p, std::size_t bytes) noexcept {
  if (!p || bytes == 0) return;
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  Kept& k = kept();
  std::lock_guard<std::mutex> lk(k.mu);
  try {
    k.left.emplace_back(lo, lo + bytes);
  } catch (...) {
    k.all = true;
  }
  any_left.store(true, std::memory_order_release);
}

bool left_to_mpi(const void* p, std::size_t bytes) noexcept {
  if (!any_left.load(std::memory_order_acquire) || !p || bytes == 0) return false;
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  Kept& k = kept();
  std::lock_guard<std::mutex> lk(k.mu);
  return overlaps_locked(k, lo, lo + bytes);
}

void keep_reachable(const void* p) noexcept {
  Kept& k = kept();
  std::lock_guard<std::mutex> lk(k.mu);
  try {
    k.raw.push_back(p);
  } catch (...) {  // no memory to remember it: kept all the same (only a leak checker sees it)
  }
}

bool keep_if_left_to_mpi(const void* p, std::size_t bytes) noexcept {
  if (!left_to_mpi(p, bytes)) return false;
  keep_reachable(p);
  return true;
}

void keep_for_process(std::shared_ptr<const void> buf) noexcept {
  if (!buf) return;
  Kept& k = kept();
  try {
    std::lock_guard<std::mutex> lk(k.mu);
    k.owned.push_back(std::move(buf));
  } catch (...) {  // no memory to remember it: leaked all the same (buf still holds it)
    (void)new (std::nothrow) std::shared_ptr<const void>(std::move(buf));
  }
}

void keep_for_process(std::unique_ptr<std::vector<char>> buf) noexcept {
  if (!buf) return;
  try {
    keep_for_process(std::shared_ptr<const void>(std::move(buf)));
  } catch (...) {  // no memory for the shared owner: leaked all the same, never freed under MPI
    (void)buf.release();
  }
}

}  // namespace starring
