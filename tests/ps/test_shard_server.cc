// ShardServer's consistency rules, driven by hand (no transport, no threads): which pushes get
// replies when, what the parameters are, and what the staleness record says.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.h"
#include "common/optimizer.h"
#include "ps/shard_server.h"

namespace starring::ps {
namespace {

// Two chunks of 3 floats in a buffer of 8 (floats 6, 7 belong to another server).
PsInitSpec spec(int workers, const std::string& consistency, int staleness = 0) {
  PsInitSpec s;
  s.num_workers = workers;
  s.total = 8;
  s.chunk_bytes = 12;
  s.consistency = consistency;
  s.staleness = staleness;
  s.opt.type = "sgd";
  s.opt.momentum = 0;
  s.chunks = {{0, 0, 3}, {1, 3, 3}};
  return s;
}

// Both chunks' initial parameters: zeros (the start is acknowledged; pushes may come).
void start_at_zero(ShardServer& s) {
  const float zero[3] = {0, 0, 0};
  s.set_params(0, zero, 3);
  s.set_params(1, zero, 3);
}

std::vector<int> workers_of(const std::vector<PsReply>& r) {
  std::vector<int> w;
  for (const auto& x : r) w.push_back(x.worker);
  return w;
}

// The start is acknowledged once every chunk has its initial parameters: a chunk sent twice does
// not stand in for another (it was counted twice, and all_params_set() held with chunk 1 unset).
TEST(ShardServer, InitialParametersCountOncePerChunk) {
  ShardServer s(spec(2, "bsp"));
  const float zero[3] = {0, 0, 0};
  s.set_params(0, zero, 3);
  try {
    s.set_params(0, zero, 3);
    ADD_FAILURE() << "chunk 0's initial parameters accepted twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter server 0: initial parameters of chunk 0 sent "
                                         "twice"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(s.all_params_set());
  s.set_params(1, zero, 3);
  EXPECT_TRUE(s.all_params_set());
}

TEST(ShardServer, BspRepliesToEveryWorkerOnceAllHavePushed) {
  ShardServer s(spec(2, "bsp"));
  const float g0[3] = {1, 2, 3}, g1[3] = {3, 2, 1};
  start_at_zero(s);
  ASSERT_TRUE(s.all_params_set());
  std::vector<PsReply> out;
  s.push(0, 0, 1, 0.5f, g0, 3, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s.awaiting(0), 1);
  EXPECT_THROW(s.push(0, 0, 1, 0.5f, g0, 3, out), Error);  // same step twice
  s.push(1, 0, 1, 0.5f, g1, 3, out);
  EXPECT_EQ(workers_of(out), (std::vector<int>{0, 1}));
  EXPECT_TRUE(out[0].stable);
  // p = 0 - 0.5 * (g0 + g1) / 2 = -1 everywhere.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[0].data[i], -1.0f);
  EXPECT_EQ(s.awaiting(0), 0);
  EXPECT_EQ(s.updates(), 1u);
  EXPECT_EQ(s.staleness_hist().size(), 1u);                // all pushes at staleness 0
  EXPECT_THROW(s.push(0, 5, 1, 0.5f, g0, 3, out), Error);  // a chunk this server lacks
}

// A push the caller keeps valid until its reply may be added later instead of copied at once
// (and the last one is added in the pass that scales or writes the sum): whatever the mix, the
// parameters are bit for bit those of copying every push (values chosen so that rounding and
// the order of additions matter).
TEST(ShardServer, BspKeptPushesGiveTheSameBitsAsCopiedOnes) {
  for (const std::string update : {"optimizer", "sum"}) {
    for (int workers = 1; workers <= 4; ++workers) {
      std::vector<std::vector<float>> finals;
      for (int pattern = 0; pattern < 3; ++pattern) {  // none kept, all kept, alternating
        PsInitSpec sp = spec(workers, "bsp");
        sp.update = update;
        sp.opt.momentum = 0.9f;
        ShardServer s(sp);
        const float init[3] = {0.3f, -1.7f, 2.9f};
        s.set_params(0, init, 3);
        s.set_params(1, init, 3);
        std::vector<std::vector<float>> g(static_cast<std::size_t>(workers), std::vector<float>(3));
        std::vector<PsReply> out;
        for (int step = 1; step <= 3; ++step) {
          for (int w = 0; w < workers; ++w) {
            for (int i = 0; i < 3; ++i)
              g[w][i] = 0.1f * static_cast<float>(i + 1) + static_cast<float>(w) / 3.0f +
                        static_cast<float>(step) * 1e-3f;
            const bool kept = pattern == 1 || (pattern == 2 && (w + step) % 2 == 0);
            s.push(w, 0, step, 0.05f, g[w].data(), 3, out, kept);
          }
          ASSERT_EQ(out.size(), static_cast<std::size_t>(workers)) << update << " W" << workers;
          out.clear();
        }
        finals.emplace_back(s.params(), s.params() + 3);
      }
      EXPECT_EQ(finals[1], finals[0]) << update << ", " << workers << " workers, all kept";
      EXPECT_EQ(finals[2], finals[0]) << update << ", " << workers << " workers, mixed";
    }
  }
}

// Under bsp the pushes of a round are summed in worker order whatever order they arrive in,
// kept (held by pointer) or not (copied when early): every arrival order gives the bits of
// ((g0 + g1) + g2) + g3, scaled by 1/4, then the optimizer.
TEST(ShardServer, BspSumsInWorkerOrderWhateverTheArrivalOrder) {
  constexpr int kW = 4;
  std::vector<std::vector<float>> g(kW);
  // Magnitudes far apart, so the order of additions shows: 1 + 1e8 rounds back to 1e8.
  const float e0[kW] = {1.0f, 1e8f, -1e8f, 0.5f}, e1[kW] = {1e8f, 1.0f, 1.0f, -1e8f};
  for (int w = 0; w < kW; ++w) g[w] = {e0[w], e1[w], 1.0f / static_cast<float>(w + 3)};
  const float init[3] = {0.5f, -0.25f, 2.0f};
  std::vector<float> expect(3);
  for (int i = 0; i < 3; ++i) {
    const float sum = ((g[0][i] + g[1][i]) + g[2][i]) + g[3][i];
    expect[i] = init[i] - 0.5f * (sum * (1.0f / kW));
  }
  std::vector<int> order{0, 1, 2, 3};
  int orders = 0;
  do {
    for (int kept_mask = 0; kept_mask < 16; kept_mask += 5) {
      PsInitSpec sp = spec(kW, "bsp");
      ShardServer s(sp);
      s.set_params(0, init, 3);
      s.set_params(1, init, 3);
      std::vector<PsReply> out;
      std::vector<std::vector<float>> sent = g;  // non-kept pushes are overwritten after push()
      for (int w : order) {
        s.push(w, 0, 1, 0.5f, sent[w].data(), 3, out, (kept_mask >> w) & 1);
        if (!((kept_mask >> w) & 1)) sent[w].assign(3, 12345.0f);
      }
      ASSERT_EQ(out.size(), static_cast<std::size_t>(kW));
      EXPECT_EQ(std::vector<float>(out[0].data, out[0].data + 3), expect)
          << "order " << order[0] << order[1] << order[2] << order[3] << ", kept " << kept_mask;
    }
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

// Copies of early pushes come from a pool that is reused across rounds and chunks: reversed
// arrivals over several steps and two chunks give the bits of in-order arrivals.
TEST(ShardServer, BspEarlyCopiesAreReusedAcrossRoundsAndChunks) {
  constexpr int kW = 3;
  auto run = [&](bool reversed) {
    PsInitSpec sp = spec(kW, "bsp");
    sp.opt.momentum = 0.9f;
    ShardServer s(sp);
    const float init[3] = {0.3f, -1.7f, 2.9f};
    s.set_params(0, init, 3);
    s.set_params(1, init, 3);
    std::vector<PsReply> out;
    for (int step = 1; step <= 4; ++step)
      for (int chunk : {1, 0})
        for (int k = 0; k < kW; ++k) {
          const int w = reversed ? kW - 1 - k : k;
          std::vector<float> g(3);
          for (int i = 0; i < 3; ++i)
            g[i] = 1e7f * static_cast<float>((w + i) % 2 ? 1 : -1) + 0.37f * static_cast<float>(w) +
                   static_cast<float>(step * 10 + chunk + i);
          s.push(w, chunk, step, 0.05f, g.data(), 3, out);
          g.assign(3, -999.0f);  // not kept: the server must have copied it
        }
    EXPECT_EQ(out.size(), static_cast<std::size_t>(4 * 2 * kW));
    return std::vector<float>(s.params(), s.params() + 6);
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(ShardServer, SspWithholdsRepliesBeyondTheBound) {
  ShardServer s(spec(2, "ssp", 1));
  const float g[3] = {1, 1, 1};
  start_at_zero(s);
  std::vector<PsReply> out;
  s.push(0, 0, 1, 0.1f, g, 3, out);  // worker 0 at clock 1, slowest 0: may run 1 ahead
  ASSERT_EQ(workers_of(out), (std::vector<int>{0}));
  EXPECT_FALSE(out[0].stable);
  out.clear();
  s.push(0, 0, 2, 0.1f, g, 3, out);  // clock 2 would let it start 2 ahead: withheld
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s.awaiting(0), 1);
  s.push(1, 0, 1, 0.1f, g, 3, out);  // the slowest moves: both replies go out
  ASSERT_EQ(workers_of(out), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.awaiting(0), 0);
  // Clocks ahead of the slowest at each push: 0 and 1 (worker 0), 0 (worker 1).
  const std::map<std::int64_t, std::uint64_t> expect{{0, 2}, {1, 1}};
  EXPECT_EQ(s.staleness_hist(), expect);
  // Every push was applied on arrival, scaled by 1/W: 3 pushes of 1 * 0.1 / 2.
  EXPECT_FLOAT_EQ(out[0].data[0], -0.15f);
}

// --staleness 0 under ssp is lock step with apply-on-arrival: a worker's reply waits until every
// worker has pushed as often as it has, so no one starts a step ahead (the record is all zeros),
// while each push is still applied as it arrives. (A bound of 0 read as "no bound", as asp, passed
// every other test: they all run ssp with s = 1.)
TEST(ShardServer, SspWithStalenessZeroRunsInLockStep) {
  ShardServer s(spec(3, "ssp", 0));
  const float g[3] = {3, 3, 3};
  start_at_zero(s);
  std::vector<PsReply> out;
  for (int step = 1; step <= 2; ++step) {
    s.push(2, 0, step, 0.1f, g, 3, out);
    s.push(0, 0, step, 0.1f, g, 3, out);
    EXPECT_TRUE(out.empty()) << "step " << step << ": a reply before every worker pushed";
    EXPECT_EQ(s.awaiting(0), 1);
    EXPECT_EQ(s.awaiting(2), 1);
    // Applied on arrival all the same: two pushes of 3 x 0.1 / 3 this step.
    EXPECT_FLOAT_EQ(s.params()[0], -0.1f * static_cast<float>(3 * step - 1));
    s.push(1, 0, step, 0.1f, g, 3, out);  // the last one in: all three released
    ASSERT_EQ(workers_of(out), (std::vector<int>{0, 1, 2})) << "step " << step;
    EXPECT_EQ(s.awaiting(0) + s.awaiting(1) + s.awaiting(2), 0);
    out.clear();
  }
  const std::map<std::int64_t, std::uint64_t> expect{{0, 6}};
  EXPECT_EQ(s.staleness_hist(), expect);
}

// The bound at --staleness 2, the default (the cases above use 1 and 0, where clock - s is never
// negative): a worker's first s pushes are answered at once, whoever has pushed, and its push
// s + 1 waits for the slowest worker's first. A bound left unclamped at 0 made the first reply
// wait for clock -1, which no worker reaches: every test of ps/ passed, and only
// test_mixed_hosts' ssp run caught it, by hanging to ctest's 120 s limit (helper q4's mutation
// test).
TEST(ShardServer, SspAnswersTheFirstStalenessPushesAtOnce) {
  ShardServer s(spec(2, "ssp", 2));
  const float g[3] = {1, 1, 1};
  start_at_zero(s);
  std::vector<PsReply> out;
  s.push(0, 0, 1, 0.1f, g, 3, out);
  s.push(0, 0, 2, 0.1f, g, 3, out);  // 1 ahead of worker 1, its next step 2 ahead: allowed
  ASSERT_EQ(workers_of(out), (std::vector<int>{0, 0})) << "worker 0's first two pushes";
  out.clear();
  s.push(0, 0, 3, 0.1f, g, 3, out);  // would start 3 ahead of worker 1: withheld
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s.awaiting(0), 1);
  s.push(1, 0, 1, 0.1f, g, 3, out);  // worker 1's first: its reply and worker 0's third
  EXPECT_EQ(workers_of(out), (std::vector<int>{0, 1}));
  const std::map<std::int64_t, std::uint64_t> expect{{0, 2}, {1, 1}, {2, 1}};
  EXPECT_EQ(s.staleness_hist(), expect);
}

// What --staleness 0 does to the parameters (docs/REFERENCE.md): ssp keeps bsp's clocks but
// applies each push on arrival as a step of its own, so with plain SGD (no momentum, no weight
// decay) its parameters are bsp's up to rounding - 20 steps of 3 workers, the pushes in another
// order each step: 1.2e-6 apart at most here - and with momentum they are not (every push a
// momentum step of its own: 0.48 apart here at 0.9).
TEST(ShardServer, SspWithStalenessZeroIsBspUpToRoundingWithPlainSgdOnly) {
  constexpr int kW = 3, kSteps = 20;
  for (const float momentum : {0.0f, 0.9f}) {
    std::vector<std::vector<float>> finals;
    for (const char* mode : {"bsp", "ssp"}) {
      auto sp = spec(kW, mode, 0);
      sp.opt.momentum = momentum;
      ShardServer s(sp);
      const float p0[3] = {0.5f, -0.25f, 1.0f};
      s.set_params(0, p0, 3);
      s.set_params(1, p0, 3);
      std::vector<PsReply> out;
      for (int t = 1; t <= kSteps; ++t)
        for (int k = 0; k < kW; ++k) {
          const int w = (k + t) % kW;
          const float g[3] = {0.3f * static_cast<float>(w + 1) / static_cast<float>(t),
                              -0.7f + 0.1f * static_cast<float>(w), 0.01f * static_cast<float>(t)};
          s.push(w, 0, t, 0.1f / static_cast<float>(t), g, 3, out);
        }
      EXPECT_EQ(out.size(), static_cast<std::size_t>(kW * kSteps)) << mode;
      EXPECT_EQ(s.staleness_hist(), (std::map<std::int64_t, std::uint64_t>{{0, kW * kSteps}}));
      finals.emplace_back(s.params(), s.params() + 3);
    }
    double apart = 0;
    for (int i = 0; i < 3; ++i)
      apart = std::max<double>(apart, std::abs(finals[0][i] - finals[1][i]));
    if (momentum == 0)
      EXPECT_LT(apart, 1e-5) << "plain SGD: rounding only";
    else
      EXPECT_GT(apart, 1e-3) << "momentum: each push is a momentum step of its own";
  }
}

TEST(ShardServer, AspRepliesAtOnceAndRecordsUnboundedStaleness) {
  ShardServer s(spec(2, "asp"));
  const float g[3] = {1, 1, 1};
  start_at_zero(s);
  std::vector<PsReply> out;
  for (int t = 1; t <= 5; ++t) s.push(0, 1, t, 0.1f, g, 3, out);
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(s.staleness_hist().rbegin()->first, 4);  // worker 0 ran 4 pushes ahead of worker 1
}

// asp's arithmetic, as docs/REFERENCE.md states it: each push is applied on arrival as an
// optimizer step of its own on grad / W, with the pusher's learning rate, and its reply carries
// the parameters of that moment (the pusher's push in). With momentum the state carries over from
// push to push, whoever pushed. The values of ssp's are checked above; an asp that skipped the
// 1/W (or applied a push late) passed every other case here.
TEST(ShardServer, AspAppliesEachPushOnArrivalAsAStepOnGradOverW) {
  for (const float momentum : {0.0f, 0.5f}) {
    auto sp = spec(4, "asp");
    sp.opt.momentum = momentum;
    ShardServer s(sp);
    start_at_zero(s);
    const float g[3] = {2, 2, 2};  // grad / W = 0.5
    float v = 0, p = 0;            // the expected momentum and parameter
    std::vector<PsReply> out;
    auto push = [&](int w, int step, float lr) {
      s.push(w, 0, step, lr, g, 3, out);
      v = momentum * v + 0.5f;
      p -= lr * v;
      ASSERT_FALSE(out.empty());
      EXPECT_EQ(out.back().worker, w);
      EXPECT_FLOAT_EQ(out.back().data[0], p) << "momentum " << momentum << ", worker " << w;
      EXPECT_FLOAT_EQ(s.params()[2], p);
    };
    for (int t = 1; t <= 3; ++t) push(0, t, 0.1f);  // worker 0 runs ahead: answered at once
    push(3, 1, 0.2f);                               // a late push, with its own step's rate
    EXPECT_EQ(out.size(), 4u);
    EXPECT_EQ(s.updates(), 4u);
    EXPECT_FLOAT_EQ(s.params()[3], 0.0f) << "chunk 1 untouched";
  }
}

// rounds() (the "rounds" of a server's statistics) counts the steps every worker has pushed for
// every chunk: the least over chunks, not the most (a max over chunks passed every other test,
// which read it only at the end of a run, where all chunks agree).
TEST(ShardServer, RoundsCountOnlyStepsEveryWorkerPushedForEveryChunk) {
  ShardServer s(spec(2, "asp"));
  const float g[3] = {1, 1, 1};
  start_at_zero(s);
  std::vector<PsReply> out;
  for (int t = 1; t <= 3; ++t) s.push(0, 0, t, 0.1f, g, 3, out);
  for (int t = 1; t <= 2; ++t) s.push(1, 0, t, 0.1f, g, 3, out);
  EXPECT_EQ(s.rounds(), 0);  // chunk 0 has 2 complete rounds, chunk 1 none
  s.push(0, 1, 1, 0.1f, g, 3, out);
  EXPECT_EQ(s.rounds(), 0);  // worker 1 has not pushed chunk 1
  s.push(1, 1, 1, 0.1f, g, 3, out);
  EXPECT_EQ(s.rounds(), 1);
}

TEST(ShardServer, SumUpdateForTheBench) {
  auto sp = spec(3, "bsp");
  sp.update = "sum";
  ShardServer s(sp);
  const float g[3] = {1, 2, 4};
  start_at_zero(s);
  std::vector<PsReply> out;
  for (int w = 0; w < 3; ++w) s.push(w, 1, 1, 0, g, 3, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].data[2], 12.0f);
  sp.consistency = "asp";
  EXPECT_THROW(ShardServer{sp}, Error);
}

// asp / ssp apply the optimizer once per push, so Adam's bias correction must count pushes (the
// state's updates, as PyTorch counts optimizer steps), not the pusher's step: with W = 2 the
// second push of step 1 is the state's second update. A server that takes over mid-run (resume:
// parameters and state set, first push of step 3) continues the count where it stood.
TEST(ShardServer, AsyncAdamCountsEveryPushAsAnUpdate) {
  for (const char* mode : {"asp", "ssp"}) {
    auto sp = spec(2, mode, 1);
    sp.opt.type = "adamw";
    sp.opt.weight_decay = 0.01f;
    ShardServer s(sp);
    const float p0[3] = {0.5f, -0.25f, 1.0f}, z[3] = {0, 0, 0};
    s.set_params(0, p0, 3);
    s.set_params(1, z, 3);
    std::vector<float> ref(p0, p0 + 3);
    Optimizer opt(sp.opt, 0, 3);
    auto grad = [](int w, int t, int i) { return 0.125f * static_cast<float>(1 + w + 2 * t + i); };
    std::vector<PsReply> out;
    std::int64_t updates = 0;
    auto push = [&](ShardServer& srv, int w, int t, bool reference) {
      float g[3], scaled[3];
      for (int i = 0; i < 3; ++i) {
        g[i] = grad(w, t, i);
        scaled[i] = g[i] * 0.5f;  // the server's 1/W
      }
      srv.push(w, 0, t, 0.01f, g, 3, out);
      if (reference) opt.apply(ref.data(), scaled, 0, 3, 0.01f, ++updates);
    };
    for (int t = 1; t <= 2; ++t)
      for (int w = 0; w < 2; ++w) push(s, w, t, true);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(s.params()[i], ref[static_cast<std::size_t>(i)]) << mode;
    // Take over: a new server with the same parameters and state, from step 3.
    ShardServer r(sp);
    r.set_params(0, s.params(), 3);
    r.set_params(1, z, 3);
    r.set_state(0, 1, s.state(0, 1).data(), 3);
    r.set_state(0, 2, s.state(0, 2).data(), 3);
    for (int w = 0; w < 2; ++w) {
      push(s, w, 3, true);
      push(r, w, 3, false);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(s.params()[i], ref[static_cast<std::size_t>(i)]) << mode;
      EXPECT_EQ(r.params()[i], s.params()[i]) << mode << ": the server that took over";
    }
  }
}

// SGD's weight decay is L2 added to the gradient, and asp / ssp scale each push's gradient by
// 1/W: the L2 term too, so that a step's W pushes decay the parameters as one bsp step does
// (W pushes each decaying by the whole lr x wd decayed them W times as fast). Zero gradients:
// only the decay moves the parameters.
TEST(ShardServer, AsyncSgdWeightDecayPerStepIsBsps) {
  constexpr int kW = 4;
  constexpr float kLr = 0.1f, kWd = 0.5f;
  const float p0[3] = {1.0f, -2.0f, 0.5f}, z[3] = {0, 0, 0};
  std::vector<float> bsp;
  for (const char* mode : {"bsp", "asp", "ssp"}) {
    auto sp = spec(kW, mode, 1);
    sp.opt.weight_decay = kWd;
    ShardServer s(sp);
    s.set_params(0, p0, 3);
    s.set_params(1, z, 3);
    std::vector<PsReply> out;
    for (int w = 0; w < kW; ++w) s.push(w, 0, 1, kLr, z, 3, out);
    std::vector<float> p(s.params(), s.params() + 3);
    if (bsp.empty()) {
      bsp = p;
      for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(bsp[i], p0[i] * (1 - kLr * kWd));
      continue;
    }
    // W decays of lr x wd / W each: (1 - 0.0125)^4 = 0.95096 against bsp's 0.95 (0.8145 when
    // each push decayed by lr x wd).
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i] / p0[i], bsp[i] / p0[i], 2e-3) << mode << " " << i;
  }
}

}  // namespace
}  // namespace starring::ps
