// The ring all-reduce keeps MPI's rule on buffers (a send's buffer is the transport's until its
// request completes, a receive's until it does), checked by OwnershipComm: in place and out of
// place, every wire, segments many or few per chunk, receives posted far ahead or not.
#include <string>
#include <vector>

#include "allreduce/ring_allreduce.h"
#include "common/error.h"
#include "tests/allreduce/allreduce_test_util.h"
#include "tests/allreduce/ownership_comm.h"

namespace starring {
namespace {

using namespace starring::test;

// The double itself: a receive over an unfinished send is refused until that send is seen
// complete, and a send from memory a receive will write is refused.
TEST(OwnershipComm, RefusesABufferTheTransportStillOwns) {
  INPROC_ONLY();
  inproc(2, [](std::shared_ptr<Comm> inner) {
    OwnershipComm c(inner);
    const int peer = 1 - c.rank();
    std::vector<float> a(64, 1.0f), b(64);
    auto s = c.isend(a.data(), 64 * sizeof(float), peer, 5);
    EXPECT_THROW(c.irecv(a.data() + 32, 4, peer, 5), Error) << "receive over an unfinished send";
    auto s2 = c.isend(a.data(), 64 * sizeof(float), peer, 6);  // two sends may share memory
    EXPECT_FALSE(s->test()) << "a send is seen complete only when progressed again";
    EXPECT_TRUE(s->test());
    s2->wait(Seconds(5));
    auto r = c.irecv(a.data(), 64 * sizeof(float), peer, 5);  // a is free again
    EXPECT_THROW(c.isend(a.data() + 8, 4, peer, 7), Error) << "send from a pending receive";
    auto r2 = c.irecv(b.data(), 64 * sizeof(float), peer, 6);
    r->wait(Seconds(5));
    r2->wait(Seconds(5));
    EXPECT_EQ(c.outstanding(), 0u);
    c.barrier(Seconds(5));
  });
}

struct Case {
  WireType wire;
  std::size_t segment_bytes;
  int window;
};

std::string name(const Case& k, int n, std::size_t count, bool in_place) {
  return detail::concat(wire_type_name(k.wire), " segment ", k.segment_bytes, " window ", k.window,
                        " ranks ", n, " count ", count, in_place ? " in place" : " out of place");
}

// Before the ring completed its sends first, this failed at once: in place, a rank's own chunk
// was received over the memory its first sends had read; at np 3 with one segment per chunk,
// a chunk's all-gather receive was posted (4 ahead) over its reduce-scatter output before that
// step ran; the half-precision staging was reused the same way.
TEST(RingInProc, NoBufferIsReusedBeforeTheTransportGaveItBack) {
  INPROC_ONLY();
  const std::vector<Case> cases = {{WireType::kFloat32, 1 << 20, 4},
                                   {WireType::kFloat32, 4096, 4},
                                   {WireType::kFloat32, 4096, 1},
                                   {WireType::kFloat16, 4096, 4},
                                   {WireType::kBFloat16, 1 << 20, 2}};
  for (const Case& k : cases) {
    for (int n : {2, 3, 4, 8}) {
      for (std::size_t count : {std::size_t{16} * n * 3 + 5, std::size_t{100003}}) {
        for (bool in_place : {true, false}) {
          std::vector<std::vector<float>> results(n);
          auto one = [&](std::shared_ptr<Comm> inner) {
            OwnershipComm c(inner);
            RingOptions o;
            o.wire = k.wire;
            o.segment_bytes = k.segment_bytes;
            o.window = k.window;
            RingAllreduce ring(c, o);
            auto in = closed_form_input(c.rank(), count);
            std::vector<float> out(count, -1.0f);
            for (int rep = 0; rep < 2; ++rep) {  // the buffers again: the last run gave all back
              std::vector<float> buf = in;
              float* dst = in_place ? buf.data() : out.data();
              ring.run(buf.data(), dst, count, 1.0f);
              EXPECT_EQ(c.outstanding(), 0u) << name(k, n, count, in_place);
              if (k.wire == WireType::kFloat32)
                EXPECT_EQ(count_wrong(dst, count, n, 1.0f), 0) << name(k, n, count, in_place);
              results[c.rank()].assign(dst, dst + count);
            }
          };
          try {
            inproc(n, one);
          } catch (const Error& e) {
            ADD_FAILURE() << name(k, n, count, in_place) << ": " << e.what();
            continue;
          }
          for (int r = 1; r < n; ++r)
            EXPECT_EQ(results[r], results[0]) << name(k, n, count, in_place) << ", rank " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace starring
