// What a server reports at its end (the kBye message's text, and a co-located worker's summary):
// bytes and messages in and out, the steps' traffic apart from set-up and control, busy and wall
// time, pushes, updates and the staleness observed.
#include "ps/server_loop.h"

namespace starring::ps {

nlohmann::json ServerLoop::stats() const {
  nlohmann::json hist = nlohmann::json::object();
  std::int64_t rounds = 0;
  if (core_) {
    for (auto [k, v] : core_->staleness_hist()) hist[std::to_string(k)] = v;
    rounds = core_->rounds();
  }
  return {{"rank", rank_},
          {"server", index_},
          {"colocated", group_.colocated},
          {"floats", core_ ? core_->floats() : 0},
          {"chunks", core_ ? core_->spec().chunks.size() : 0},
          {"bytes_in", bytes_in_},
          {"bytes_out", bytes_out_},
          // The steps' traffic; set-up and checkpoint messages in, control and checkpoint
          // messages out (start acks, the closing bye with these stats, optimizer state) apart.
          {"bytes_recv", bytes_in_ - setup_bytes_in_},
          {"bytes_sent", bytes_out_ - ctl_bytes_out_},
          {"setup_bytes_recv", setup_bytes_in_},
          {"control_bytes_sent", ctl_bytes_out_},
          {"push_bytes_in", push_bytes_in_},
          {"reply_bytes_out", reply_bytes_out_},
          {"local_push_bytes", local_push_bytes_},
          {"shm_push_bytes", shm_push_bytes_},
          {"shm_reply_bytes", shm_reply_bytes_},
          // Messages over the Comm; a co-located worker's own messages to its shard (LocalLink)
          // are not, though its heartbeats count in heartbeats_in, which may then exceed msgs_in.
          {"msgs_in", msgs_in_},
          {"msgs_out", msgs_out_},
          {"heartbeats_in", heartbeats_in_},
          {"heartbeats_out", heartbeats_out_},
          {"busy_s", busy_s_},
          {"wall_s", wall_s_},
          {"pushes", core_ ? core_->pushes() : 0},
          {"updates", core_ ? core_->updates() : 0},
          {"rounds", rounds},
          {"staleness_hist", hist}};
}

}  // namespace starring::ps
