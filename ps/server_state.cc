// The server side of checkpoints: worker 0 asks for (kGetState) or restores (kSetState) the
// optimizer state of this shard's chunks, once every worker has flushed (so no bsp round is half
// aggregated and, under asp/ssp, every push has been applied). Before an evaluation under
// asp/ssp any worker may ask for the parameters alone (kGetState with no state vectors). A state
// vector goes back as one kState message (header + floats) on kStateTag - or, to this process's own
// worker in co-located mode, through the LocalLink - preceded by part 0, the chunk's parameters
// (the master copy); each kSetState is acknowledged with kAck.
#include "common/error.h"
#include "ps/server_loop.h"

namespace starring::ps {

void ServerLoop::on_get_state(const PsHeader& h, int w) {
  const int parts = static_cast<int>(h.step);  // state vectors wanted besides the parameters
  STARRING_CHECK(
      core_ && acked_ && (w == 0 || parts == 0) && parts >= 0 && parts <= core_->state_parts(),
      where_, ": ", parts, " optimizer-state vectors requested by ", who(w),
      acked_ ? " (only worker 0 writes checkpoints)" : " before the start handshake");
  const float* params = nullptr;
  for (const PsChunkRef& ref : core_->spec().chunks)
    if (ref.id == h.chunk) params = core_->params() + ref.begin;
  for (int part = 0; part <= parts; ++part) {
    const std::size_t n = core_->chunk_count(h.chunk);
    const float* data = part == 0 ? params : core_->state(h.chunk, part).data();
    STARRING_CHECK(data, where_, ": optimizer state requested for chunk ", h.chunk,
                   ", which this server does not own");
    PsHeader out;
    out.op = Op::kState;
    out.worker = index_;
    out.chunk = h.chunk;
    out.step = part;
    out.count = static_cast<std::uint32_t>(n);
    if (is_local(w)) {
      local_->on_state(out, data);
      continue;
    }
    auto msg = std::make_shared<std::vector<char>>(make_message(out, data, n * sizeof(float)));
    PendingSend p;
    {  // a checkpoint's, not a step's: booked with the Comm's count (see LocalLink::count_mu)
      const auto counting = LocalLink::counting(local_);
      if (local_) local_->ctl_sent.fetch_add(msg->size(), std::memory_order_release);
      p.req = comm_->isend(msg->data(), msg->size(),
                           group_.worker_ranks[static_cast<std::size_t>(w)], kStateTag);
    }
    p.worker = w;
    p.what = "the optimizer state of chunk " + std::to_string(h.chunk);
    p.since = std::chrono::steady_clock::now();
    bytes_out_ += msg->size();
    ctl_bytes_out_ += msg->size();
    ++msgs_out_;
    p.keep = std::move(msg);
    sends_.push_back(std::move(p));
  }
}

void ServerLoop::on_set_state(const PsHeader& h, const float* data, int w) {
  STARRING_CHECK(core_ && acked_ && w == 0, where_, ": optimizer state sent by ", who(w),
                 acked_ ? " (only worker 0 restores checkpoints)" : " before the start handshake");
  core_->set_state(h.chunk, static_cast<int>(h.step), data, h.count);
  send_ctl(w, Op::kAck, "", false);
}

}  // namespace starring::ps
