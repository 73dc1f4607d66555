#include "experiments/smpi/ps_pattern.h"

#include <cstring>

#include "common/error.h"
#include "common/mpi_comm.h"

namespace starring {
namespace {
int push_tag(int chunk) { return 2 * chunk; }
int reply_tag(int chunk) { return 2 * chunk + 1; }
}  // namespace

PsPattern::PsPattern(MPI_Comm world, const ps::PsGroup& group, std::size_t chunk_bytes,
                     std::size_t count)
    : world_(world), g_(group) {
  MPI_Comm_rank(world, &rank_);
  worker_ = g_.worker_index(rank_);
  server_ = g_.server_index(rank_);
  ParamLayout layout;
  layout.add("buffer", {static_cast<int>(count)});
  plan_ = make_plan(layout, g_.num_servers(), slicer_by_name("range"), chunk_bytes,
                    count * sizeof(float));  // one bucket: the whole buffer
  STARRING_CHECK(plan_.chunks.size() < 16384, "smpi_bench: too many chunks for the tags");
  if (server_ >= 0) mine_ = plan_.chunks_of_server[static_cast<std::size_t>(server_)];
  for (int c : mine_)
    for (int w = 0; w < g_.num_workers(); ++w)
      pushes_.emplace_back(plan_.chunks[static_cast<std::size_t>(c)].count);
}

void PsPattern::post(Kind kind, int a, MPI_Request r) {
  reqs_.push_back(r);
  pending_.push_back({kind, a});
}

void PsPattern::push_next(int s, const float* in) {
  const auto& list = plan_.chunks_of_server[static_cast<std::size_t>(s)];
  std::size_t& k = next_[static_cast<std::size_t>(s)];
  if (k == list.size()) return;
  const ChunkSpec& ch = plan_.chunks[static_cast<std::size_t>(list[k])];
  MPI_Request r;
  CHECK_MPI(MPI_Isend(in + ch.begin, static_cast<int>(ch.count), MPI_FLOAT,
                      g_.server_ranks[static_cast<std::size_t>(s)], push_tag(list[k]), world_, &r));
  ++k;
  post(Kind::kSend, s, r);
}

// All W pushes of mine_[k] are in: sum them in worker order and answer every worker.
void PsPattern::finish_chunk(std::size_t k, float* out) {
  const int nw = g_.num_workers();
  auto& sum = pushes_[k * nw];
  for (int w = 1; w < nw; ++w) {
    const auto& p = pushes_[k * nw + w];
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
  }
  const int c = mine_[k];
  for (int w = 0; w < nw; ++w) {
    const int dst = g_.worker_ranks[static_cast<std::size_t>(w)];
    if (dst == rank_) {  // co-located: this rank's own worker
      std::memcpy(out + plan_.chunks[static_cast<std::size_t>(c)].begin, sum.data(),
                  sum.size() * sizeof(float));
      continue;
    }
    MPI_Request r;
    CHECK_MPI(MPI_Isend(sum.data(), static_cast<int>(sum.size()), MPI_FLOAT, dst, reply_tag(c),
                        world_, &r));
    post(Kind::kReplySend, 0, r);
  }
}

void PsPattern::run(const float* in, float* out) {
  reqs_.clear();
  pending_.clear();
  const int nw = g_.num_workers(), ns = g_.num_servers();
  arrived_.assign(mine_.size(), 0);
  for (std::size_t k = 0; k < mine_.size(); ++k) {  // a server's receives for the pushes
    const ChunkSpec& ch = plan_.chunks[static_cast<std::size_t>(mine_[k])];
    for (int w = 0; w < nw; ++w) {
      auto& buf = pushes_[k * nw + w];
      const int src = g_.worker_ranks[static_cast<std::size_t>(w)];
      if (src == rank_) {  // co-located: this rank's own push
        std::memcpy(buf.data(), in + ch.begin, buf.size() * sizeof(float));
        ++arrived_[k];
        continue;
      }
      MPI_Request r;
      CHECK_MPI(MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, src,
                          push_tag(mine_[k]), world_, &r));
      post(Kind::kPush, static_cast<int>(k), r);
    }
  }
  if (worker_ >= 0) {
    for (std::size_t c = 0; c < plan_.chunks.size(); ++c) {  // a worker's receives for replies
      const ChunkSpec& ch = plan_.chunks[c];
      const int src = g_.server_ranks[static_cast<std::size_t>(ch.server)];
      if (src == rank_) continue;
      MPI_Request r;
      CHECK_MPI(MPI_Irecv(out + ch.begin, static_cast<int>(ch.count), MPI_FLOAT, src,
                          reply_tag(static_cast<int>(c)), world_, &r));
      post(Kind::kReply, 0, r);
    }
    next_.assign(static_cast<std::size_t>(ns), 0);
    for (int s = 0; s < ns; ++s)
      if (g_.server_ranks[static_cast<std::size_t>(s)] != rank_) push_next(s, in);
  }
  for (std::size_t k = 0; k < mine_.size(); ++k)
    if (arrived_[k] == nw) finish_chunk(k, out);  // every push was local (one worker)
  for (;;) {
    int idx = MPI_UNDEFINED;
    CHECK_MPI(MPI_Waitany(static_cast<int>(reqs_.size()), reqs_.data(), &idx, MPI_STATUS_IGNORE));
    if (idx == MPI_UNDEFINED) break;  // nothing outstanding: this rank's part is done
    const Pending p = pending_[static_cast<std::size_t>(idx)];
    if (p.kind == Kind::kSend) push_next(p.a, in);
    if (p.kind == Kind::kPush && ++arrived_[static_cast<std::size_t>(p.a)] == nw)
      finish_chunk(static_cast<std::size_t>(p.a), out);
  }
}

}  // namespace starring
