// ShardServer: the state of one parameter-server shard and its consistency rules, with no
// transport (ServerLoop feeds it messages and sends what it returns), single-threaded.
//
// It owns the master copy of its chunks' parameters and one shared Optimizer per chunk (the same
// code a ring worker applies to the whole buffer; per-slice application is bit-for-bit the same).
// Every push carries a chunk of a worker's gradient, its step and that step's learning rate.
//   bsp: pushes of a chunk are summed in an accumulator, always in worker order
//        ((g0 + g1) + g2) + ..., whatever order they arrive in, so a run is reproducible bit for
//        bit and does not depend on the number of servers or the partition; when all W workers
//        have pushed step t, the sum is scaled by 1/W, the optimizer is applied once, and all W
//        workers get the new parameters: every worker sees exactly step t's parameters.
//        A push that arrives before its turn is held: by pointer when the caller keeps it valid
//        (`kept`: shared memory, a co-located worker, or ServerLoop's receive buffer, which it
//        keeps when would_wait() says so and the push fills it), else copied once into a pooled
//        buffer; it is added as soon as every lower worker's push is in, so summing still
//        overlaps the arrivals. Held pushes cost memory only while they wait for an earlier
//        worker: at worst (worker 0 always last) (W-1) x this server's share of the model (up
//        to twice that in held receive buffers, which a push fills at least half).
//   asp: each push is scaled by 1/W and applied on arrival; the pusher gets the current values.
//        SGD's weight decay (L2 on the gradient) is scaled with it, so a step's W pushes decay
//        the parameters as one bsp step does.
//        Every push is one update of the chunk's optimizer state, and Adam's bias correction
//        counts them as such (PyTorch counts optimizer steps): W per step, starting at
//        W x (step - 1) + 1 for the first push this server sees (a resumed run: every worker
//        pushed every chunk `step - 1` times before).
//   ssp: applied on arrival as asp, but the reply to a worker that has pushed a chunk n times is
//        withheld until the slowest worker has pushed it at least n - s times, so no worker
//        starts a step more than s clocks ahead of the slowest.
// A worker's clock (per chunk) is the number of pushes received from it. At every push the
// server records how many clocks the pusher is ahead of the slowest worker (the staleness
// histogram: always 0 under bsp, at most s under ssp, unbounded under asp).
// update "sum" (for the push+pull bench) replaces the parameters by the plain sum (bsp only).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/optimizer.h"
#include "ps/protocol.h"

namespace starring::ps {

// A reply that became due: `count` floats at `data` (the server's current parameters of
// `chunk`). `stable`: the values cannot change until this worker pushes the chunk again (bsp),
// so they may be sent without a copy.
struct PsReply {
  int worker = 0;
  int chunk = 0;
  const float* data = nullptr;
  std::size_t count = 0;
  bool stable = false;
};

class ShardServer {
 public:
  // `params`: where to keep the parameters (spec.total floats, e.g. a shared segment; only this
  // shard's chunks are touched); null: allocated here.
  explicit ShardServer(const PsInitSpec& spec, float* params = nullptr);

  const PsInitSpec& spec() const { return spec_; }
  std::size_t chunk_count(int chunk) const;
  void set_params(int chunk, const float* data, std::size_t count);
  bool all_params_set() const { return params_set_ == chunks_.size(); }

  // Handles one push from `worker`; appends the replies that became due to `out`. `kept`: the
  // caller guarantees `grad` stays valid and unchanged until this push's reply is due (then bsp
  // may add it later instead of copying it now).
  void push(int worker, int chunk, std::int64_t step, float lr, const float* grad,
            std::size_t count, std::vector<PsReply>& out, bool kept = false);

  // Whether a bsp push of `chunk` from `worker` now would wait for an earlier worker's (then a
  // caller that can keep the data valid until the round's replies avoids a copy; see push()).
  bool would_wait(int worker, int chunk) const;

  // Replies this server currently withholds from `worker` (the worker is waiting on us).
  int awaiting(int worker) const { return awaiting_.at(static_cast<std::size_t>(worker)); }
  // The staleness histogram: clocks ahead of the slowest worker -> number of pushes.
  const std::map<std::int64_t, std::uint64_t>& staleness_hist() const { return hist_; }
  std::uint64_t pushes() const { return pushes_; }
  std::uint64_t updates() const { return updates_; }  // optimizer applications (chunk-steps)
  // Steps every worker has pushed for every chunk (complete rounds).
  std::int64_t rounds() const;
  std::size_t floats() const;  // floats owned
  // For a timeout message: each worker's pushes received per chunk ("3", or "3..4" when its
  // chunks differ) and the bsp rounds under way (chunk, step, the workers already in).
  std::string progress() const;
  const float* params() const { return params_; }

  // Checkpoints: optimizer state vector `part` (1: momentum / Adam m, 2: Adam v) of `chunk`, and
  // setting it. Error when the chunk is in the middle of a bsp round or has no optimizer.
  const std::vector<float>& state(int chunk, int part);
  void set_state(int chunk, int part, const float* data, std::size_t count);
  int state_parts() const { return spec_.opt.type == "adamw" ? 2 : 1; }

 private:
  struct Chunk {
    int id = 0;
    std::size_t begin = 0, count = 0;
    std::unique_ptr<Optimizer> opt;
    std::int64_t bsp_step = 0;  // step being aggregated (bsp), valid when arrived > 0
    float lr = 0;
    int arrived = 0;
    int next = 0;                            // bsp: the next worker to add (all below are summed)
    const float* held = nullptr;             // bsp: worker 0's push, not yet added (stable)
    std::vector<char> got;                   // bsp: worker pushed the current step
    std::vector<const float*> early;         // bsp: pushes waiting for their turn (stable)
    std::vector<std::vector<float>> copies;  // bsp: copies of early pushes that were not kept
    std::vector<std::int64_t> clock;         // pushes received per worker
    std::vector<std::int64_t> release;       // ssp: withheld reply, released at min clock >= value
    std::int64_t updates = -1;  // asp/ssp: optimizer updates of this chunk's state (-1: none yet)
    bool params_set = false;    // its initial parameters came (set_params)
  };
  Chunk& chunk_of(int chunk, int worker);
  std::vector<float>& state_ref(int chunk, int part);
  void push_bsp(Chunk& c, int worker, std::int64_t step, float lr, const float* grad, bool kept,
                std::vector<PsReply>& out);
  void add_next(Chunk& c, const float* grad, bool stable);
  const float* copy_early(Chunk& c, std::size_t w, const float* grad);
  void push_async(Chunk& c, int worker, std::int64_t step, float lr, const float* grad,
                  std::vector<PsReply>& out);
  void release_ssp(Chunk& c, std::vector<PsReply>& out);
  PsReply reply(const Chunk& c, int worker) const;

  PsInitSpec spec_;
  int workers_ = 0;
  bool bsp_ = true, ssp_ = false, sum_only_ = false;
  std::unique_ptr<float[]> own_params_, acc_;  // full-length, only this shard's pages touched
  float* params_ = nullptr;                    // own_params_ or the caller's storage
  std::vector<Chunk> chunks_;
  std::unordered_map<int, std::size_t> index_;
  std::size_t params_set_ = 0;
  std::vector<int> awaiting_;
  std::vector<std::vector<float>> spare_;  // bsp: buffers for copies of early pushes, reused
  std::map<std::int64_t, std::uint64_t> hist_;
  std::uint64_t pushes_ = 0, updates_ = 0;
};

}  // namespace starring::ps
