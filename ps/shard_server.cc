#include "ps/shard_server.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace starring::ps {

namespace {

// o = (a + b) * s   (s == 1: exactly a + b)
void add_to(const float* __restrict a, const float* __restrict b, float* __restrict o,
            std::size_t n, float s) {
  if (s == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) o[i] = (a[i] + b[i]) * s;
  }
}
// acc = (acc + b) * s   (s == 1: exactly acc + b)
void add_scale(float* __restrict acc, const float* __restrict b, std::size_t n, float s) {
  if (s == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) acc[i] += b[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) acc[i] = (acc[i] + b[i]) * s;
  }
}
// o = a * s
void scale_to(const float* __restrict a, float* __restrict o, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) o[i] = a[i] * s;
}

}  // namespace

ShardServer::ShardServer(const PsInitSpec& spec, float* params)
    : spec_(spec), workers_(spec.num_workers), params_(params) {
  STARRING_CHECK(workers_ >= 1, "parameter server: needs at least one worker, got ", workers_);
  const auto& mode = spec.consistency;
  STARRING_CONFIG_CHECK(mode == "bsp" || mode == "asp" || mode == "ssp",
                        "--consistency must be bsp, asp or ssp, got '", mode, "'");
  STARRING_CONFIG_CHECK(spec.staleness >= 0, "--staleness must be >= 0, got ", spec.staleness);
  STARRING_CHECK(spec.update == "optimizer" || (spec.update == "sum" && mode == "bsp"),
                 "parameter server: update '", spec.update, "' is not supported under ", mode);
  bsp_ = mode == "bsp";
  ssp_ = mode == "ssp";
  sum_only_ = spec.update == "sum";
  // new float[n] leaves the memory untouched: the OS only backs the pages of this shard.
  if (!params_) {
    own_params_.reset(new float[spec.total]);
    params_ = own_params_.get();
  }
  acc_.reset(new float[spec.total]);
  awaiting_.assign(static_cast<std::size_t>(workers_), 0);
  // asp / ssp scale each push's gradient by 1/W (push_async); SGD's weight decay is L2 added to
  // that gradient, so it is scaled too: a step's W pushes decay as one bsp step does, not W times
  // as much. (AdamW's decay is decoupled: per optimizer step, as Adam's update, see the header.)
  OptimizerConfig opt = spec.opt;
  if (!bsp_ && opt.type == "sgd") opt.weight_decay /= static_cast<float>(workers_);
  const auto w = static_cast<std::size_t>(workers_);
  for (const auto& ref : spec.chunks) {
    STARRING_CHECK(ref.begin + ref.count <= spec.total && ref.count > 0 && !index_.count(ref.id),
                   "parameter server: bad chunk ", ref.id, " [", ref.begin, ", +", ref.count, ")");
    Chunk c;
    c.id = ref.id;
    c.begin = ref.begin;
    c.count = ref.count;
    if (!sum_only_) c.opt = std::make_unique<Optimizer>(opt, ref.begin, ref.begin + ref.count);
    c.got.assign(w, 0);
    c.early.assign(w, nullptr);
    c.copies.resize(w);
    c.clock.assign(w, 0);
    c.release.assign(w, -1);
    index_[ref.id] = chunks_.size();
    chunks_.push_back(std::move(c));
  }
}

std::size_t ShardServer::chunk_count(int chunk) const {
  auto it = index_.find(chunk);
  return it == index_.end() ? 0 : chunks_[it->second].count;
}

ShardServer::Chunk& ShardServer::chunk_of(int chunk, int worker) {
  auto it = index_.find(chunk);
  STARRING_CHECK(it != index_.end(), "parameter server ", spec_.server_index, ": worker ", worker,
                 " sent chunk ", chunk, ", which this server does not own");
  STARRING_CHECK(worker >= 0 && worker < workers_, "parameter server ", spec_.server_index,
                 ": message from unknown worker ", worker);
  return chunks_[it->second];
}

bool ShardServer::would_wait(int worker, int chunk) const {
  auto it = index_.find(chunk);
  return bsp_ && it != index_.end() && worker > 0 && worker < workers_ &&
         worker != chunks_[it->second].next;
}

void ShardServer::set_params(int chunk, const float* data, std::size_t count) {
  Chunk& c = chunk_of(chunk, 0);
  STARRING_CHECK(count == c.count, "parameter server ", spec_.server_index,
                 ": initial parameters of chunk ", chunk, " have ", count, " floats, expected ",
                 c.count);
  // Counted once per chunk: a chunk sent twice made all_params_set() true with another unset.
  STARRING_CHECK(!c.params_set, "parameter server ", spec_.server_index,
                 ": initial parameters of chunk ", chunk, " sent twice");
  std::memcpy(params_ + c.begin, data, count * sizeof(float));
  c.params_set = true;
  ++params_set_;
}

void ShardServer::push(int worker, int chunk, std::int64_t step, float lr, const float* grad,
                       std::size_t count, std::vector<PsReply>& out, bool kept) {
  Chunk& c = chunk_of(chunk, worker);
  STARRING_CHECK(count == c.count, "parameter server ", spec_.server_index, ": push of chunk ",
                 chunk, " from worker ", worker, " has ", count, " floats, expected ", c.count);
  const auto w = static_cast<std::size_t>(worker);
  if (bsp_)  // (checked before any state changes)
    STARRING_CHECK(c.arrived == 0 || (step == c.bsp_step && !c.got[w]), "parameter server ",
                   spec_.server_index, ": worker ", worker, " pushed chunk ", c.id, " for step ",
                   step, c.got[w] ? " twice" : "", " while step ", c.bsp_step,
                   " is being aggregated");
  else
    STARRING_CHECK(c.release[w] < 0, "parameter server ", spec_.server_index, ": worker ", worker,
                   " pushed chunk ", c.id, " again before its previous reply");
  const std::int64_t slowest = *std::min_element(c.clock.begin(), c.clock.end());
  ++hist_[c.clock[w] - slowest];
  ++pushes_;
  ++c.clock[w];
  if (bsp_)
    push_bsp(c, worker, step, lr, grad, kept, out);
  else
    push_async(c, worker, step, lr, grad, out);
}

void ShardServer::push_bsp(Chunk& c, int worker, std::int64_t step, float lr, const float* grad,
                           bool kept, std::vector<PsReply>& out) {
  const auto w = static_cast<std::size_t>(worker);
  if (c.arrived == 0) {
    c.bsp_step = step;
    c.lr = lr;
  }
  if (worker != c.next) {  // before its turn: hold it
    if (!kept) grad = copy_early(c, w, grad);
    c.early[w] = grad;
  } else {
    add_next(c, grad, kept);
    while (c.next < workers_ && c.early[static_cast<std::size_t>(c.next)]) {
      const auto v = static_cast<std::size_t>(c.next);
      add_next(c, c.early[v], true);  // never worker 0 (never early): not held past this call
      c.early[v] = nullptr;
      if (!c.copies[v].empty()) {  // its copy goes back to the pool
        spare_.push_back(std::move(c.copies[v]));
        c.copies[v] = {};
      }
    }
  }
  c.got[w] = 1;
  ++awaiting_[w];
  if (++c.arrived < workers_) return;
  STARRING_CHECK(c.next == workers_, "parameter server ", spec_.server_index, ": chunk ", c.id,
                 " summed ", c.next, " of ", workers_, " pushes");  // (cannot happen)
  if (!sum_only_) c.opt->apply(params_, acc_.get(), c.begin, c.begin + c.count, c.lr, c.bsp_step);
  ++updates_;
  c.arrived = 0;
  c.next = 0;
  for (int v = 0; v < workers_; ++v) {
    c.got[static_cast<std::size_t>(v)] = 0;
    --awaiting_[static_cast<std::size_t>(v)];
    out.push_back(reply(c, v));
  }
}

// A copy of an early push that the caller will not keep, in a buffer from the pool of spare
// copies (so the server holds at most as many as were ever early at once, not one per chunk and
// worker).
const float* ShardServer::copy_early(Chunk& c, std::size_t w, const float* grad) {
  auto& copy = c.copies[w];
  auto fits = std::find_if(spare_.begin(), spare_.end(),
                           [&](const std::vector<float>& b) { return b.capacity() >= c.count; });
  if (fits != spare_.end()) {
    copy = std::move(*fits);
    spare_.erase(fits);
  }
  copy.assign(grad, grad + c.count);
  return copy.data();
}

// Adds worker c.next's push to the sum. Fewer passes over memory, the same roundings in the
// same order: worker 0's push, if `stable` (valid until the reply), is not copied and the next
// one adds both in one pass; the last one is added in the pass that scales the sum (or, for
// "sum", writes the parameters).
void ShardServer::add_next(Chunk& c, const float* grad, bool stable) {
  float* acc = acc_.get() + c.begin;
  const std::size_t n = c.count;
  const bool first = c.next == 0, last = c.next + 1 == workers_;
  const float* prev = c.held ? c.held : acc;  // the sum so far (not first)
  c.held = nullptr;
  ++c.next;
  if (first && stable && !last) {
    c.held = grad;
  } else if (last && sum_only_) {
    if (first)
      std::memcpy(params_ + c.begin, grad, n * sizeof(float));
    else
      add_to(prev, grad, params_ + c.begin, n, 1.0f);
  } else if (last) {
    const float inv = 1.0f / static_cast<float>(workers_);
    if (first)
      scale_to(grad, acc, n, inv);
    else if (prev == acc)
      add_scale(acc, grad, n, inv);
    else
      add_to(prev, grad, acc, n, inv);
  } else if (first) {
    std::memcpy(acc, grad, n * sizeof(float));
  } else if (prev == acc) {
    add_scale(acc, grad, n, 1.0f);
  } else {
    add_to(prev, grad, acc, n, 1.0f);
  }
}

void ShardServer::push_async(Chunk& c, int worker, std::int64_t step, float lr, const float* grad,
                             std::vector<PsReply>& out) {
  const auto w = static_cast<std::size_t>(worker);
  float* acc = acc_.get() + c.begin;
  const float inv = 1.0f / static_cast<float>(workers_);
  for (std::size_t i = 0; i < c.count; ++i) acc[i] = grad[i] * inv;
  // The state's update count, not the pusher's step: W updates per step (see the header).
  if (c.updates < 0) c.updates = static_cast<std::int64_t>(workers_) * (step - 1);
  c.opt->apply(params_, acc_.get(), c.begin, c.begin + c.count, lr, ++c.updates);
  ++updates_;
  if (ssp_) {
    // The reply lets the worker compute its next push, number clock + 1, which may be at most
    // `staleness` ahead of the slowest: release once min clock >= clock - staleness.
    c.release[w] = std::max<std::int64_t>(0, c.clock[w] - spec_.staleness);
    ++awaiting_[w];
    release_ssp(c, out);
  } else {
    out.push_back(reply(c, worker));
  }
}

void ShardServer::release_ssp(Chunk& c, std::vector<PsReply>& out) {
  const std::int64_t slowest = *std::min_element(c.clock.begin(), c.clock.end());
  for (int v = 0; v < workers_; ++v) {
    auto& r = c.release[static_cast<std::size_t>(v)];
    if (r >= 0 && slowest >= r) {
      r = -1;
      --awaiting_[static_cast<std::size_t>(v)];
      out.push_back(reply(c, v));
    }
  }
}

PsReply ShardServer::reply(const Chunk& c, int worker) const {
  return {worker, c.id, params_ + c.begin, c.count, bsp_};
}

std::vector<float>& ShardServer::state_ref(int chunk, int part) {
  Chunk& c = chunk_of(chunk, 0);
  STARRING_CHECK(c.opt && part >= 1 && part <= state_parts(), "parameter server ",
                 spec_.server_index, ": no optimizer state ", part, " for chunk ", chunk);
  STARRING_CHECK(c.arrived == 0, "parameter server ", spec_.server_index, ": optimizer state of ",
                 "chunk ", chunk, " requested while step ", c.bsp_step, " is being aggregated");
  return part == 1 ? c.opt->state1() : c.opt->state2();
}

const std::vector<float>& ShardServer::state(int chunk, int part) { return state_ref(chunk, part); }

void ShardServer::set_state(int chunk, int part, const float* data, std::size_t count) {
  std::vector<float>& s = state_ref(chunk, part);
  STARRING_CHECK(count == s.size(), "parameter server ", spec_.server_index, ": optimizer state ",
                 part, " of chunk ", chunk, " has ", count, " floats, expected ", s.size());
  std::copy(data, data + count, s.begin());
}

std::int64_t ShardServer::rounds() const {
  std::int64_t r = -1;
  for (const auto& c : chunks_) {
    const std::int64_t m = *std::min_element(c.clock.begin(), c.clock.end());
    r = r < 0 ? m : std::min(r, m);
  }
  return std::max<std::int64_t>(r, 0);
}

std::size_t ShardServer::floats() const {
  std::size_t n = 0;
  for (const auto& c : chunks_) n += c.count;
  return n;
}

std::string ShardServer::progress() const {
  std::string s = "pushes received per chunk:";
  for (int w = 0; w < workers_; ++w) {
    const auto wi = static_cast<std::size_t>(w);
    std::int64_t lo = 0, hi = 0;
    for (std::size_t k = 0; k < chunks_.size(); ++k) {
      const std::int64_t n = chunks_[k].clock[wi];
      lo = k == 0 ? n : std::min(lo, n);
      hi = k == 0 ? n : std::max(hi, n);
    }
    s += detail::concat(w ? ", worker " : " worker ", w, " ", lo);
    if (hi != lo) s += detail::concat("..", hi);
  }
  constexpr int kShown = 4;
  int open = 0;
  std::string rounds;
  for (const auto& c : chunks_) {
    if (!bsp_ || c.arrived == 0 || ++open > kShown) continue;
    std::string in;
    for (int w = 0; w < workers_; ++w)
      if (c.got[static_cast<std::size_t>(w)]) in += detail::concat(in.empty() ? "" : " ", w);
    rounds += detail::concat(rounds.empty() ? "" : ", ", "chunk ", c.id, " step ", c.bsp_step,
                             " has worker(s) ", in);
  }
  if (open > 0)
    s += detail::concat("; ", open, " round(s) under way: ", rounds, open > kShown ? ", ..." : "");
  return s;
}

}  // namespace starring::ps
