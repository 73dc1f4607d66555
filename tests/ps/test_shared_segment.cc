// SharedSegment (ps/shared_segment.h), the shared-memory data path's segments, in one process:
// a peer that opens a segment's describe() maps the owner's memory (it sees what the owner
// writes), and open() refuses (returns null, so the caller keeps the message path) a description
// that names another host, a nonce the segment does not hold, another size, or another process's
// descriptor. With the host check or the nonce check gone every other test still passed: a
// same-named file on another machine, or a segment whose /proc path now names another memfd of
// the same size, would have been read as a worker's gradients or a server's parameters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "ps/shared_segment.h"

namespace starring::ps {
namespace {

constexpr std::size_t kBytes = 64 * sizeof(float);

TEST(PsSharedSegment, APeerMapsTheOwnersMemory) {
  auto owner = SharedSegment::create(kBytes);
  ASSERT_TRUE(owner) << "memfd_create or mmap refused";
  EXPECT_EQ(owner->bytes(), kBytes);
  auto peer = SharedSegment::open(owner->describe());
  ASSERT_TRUE(peer) << owner->describe().dump();
  EXPECT_EQ(peer->bytes(), kBytes);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(peer->floats()[i], 0.0f) << i;  // zero-filled
  for (int i = 0; i < 64; ++i) owner->floats()[i] = static_cast<float>(i) * 0.5f;
  for (int i = 0; i < 64; ++i) EXPECT_EQ(peer->floats()[i], static_cast<float>(i) * 0.5f) << i;
}

TEST(PsSharedSegment, ADescriptionOfAnotherSegmentOrHostIsRefused) {
  auto owner = SharedSegment::create(kBytes);
  ASSERT_TRUE(owner) << "memfd_create or mmap refused";
  const nlohmann::json id = owner->describe();
  ASSERT_TRUE(SharedSegment::open(id));
  auto changed = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = id;
    j[key] = value;
    return j;
  };
  // Another machine (same pid, fd, inode: a container's twin), another nonce (the path now names
  // some other segment of this size), another size, another process, no description at all.
  const std::string host = id["host"].get<std::string>();
  EXPECT_FALSE(SharedSegment::open(changed("host", "elsewhere" + host.substr(host.find('/')))));
  EXPECT_FALSE(
      SharedSegment::open(changed("host", host.substr(0, host.find('/')) + "/other-boot")));
  EXPECT_FALSE(SharedSegment::open(changed("nonce", id["nonce"].get<std::uint64_t>() ^ 1u)));
  EXPECT_FALSE(SharedSegment::open(changed("bytes", kBytes + sizeof(float))));
  EXPECT_FALSE(SharedSegment::open(changed("pid", static_cast<int>(getppid()))));
  EXPECT_FALSE(SharedSegment::open(nlohmann::json()));
  EXPECT_FALSE(SharedSegment::open(nlohmann::json("colocated")));
}

}  // namespace
}  // namespace starring::ps
