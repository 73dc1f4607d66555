// PsWorker::Impl's start and end: the plan, the co-located shard, the start messages and the
// servers' acknowledgements; the goodbye (kDone, then every server's kBye) and the shutdown.
#include <algorithm>

#include "common/census.h"
#include "common/clock.h"
#include "common/error.h"
#include "ps/ps_worker_impl.h"
#include "ps/server_loop.h"

namespace starring::ps {

void PsWorker::Impl::start(const ParamLayout& layout, SyncBuffers buffers,
                           const OptimizerConfig& opt) {
  STARRING_CHECK(!started_, where_, ": PsWorker::start called twice");
  STARRING_CHECK(!buffers.on_device, "backend 'ps' works on host buffers");
  // A plan the servers cannot serve fails before anything starts, so that shutdown() has nothing
  // to stop; dedicated servers, already waiting for the start message, are told why (kAbort) and
  // stop with this message instead of taking the workers' clean-up for a finished run.
  try {
    make_start_plan(layout);
  } catch (const ConfigError& e) {
    abandon(e.what());
    throw;
  }
  started_ = true;
  buf_ = buffers;
  opt_cfg_ = opt;
  const std::size_t n = plan_.chunks.size();
  requested_.assign(n, 0);
  completed_.assign(n, 0);
  flights_.resize(n);
  ready_.assign(layout.num_tensors(), 0);
  bucket_ready_.assign(plan_.tensors_of_bucket.size(), 0);
  all_chunks_.resize(n);
  for (std::size_t c = 0; c < n; ++c) all_chunks_[c] = static_cast<int>(c);
  bye_text_.assign(static_cast<std::size_t>(group_.num_servers()), "");
  bye_seen_.assign(static_cast<std::size_t>(group_.num_servers()), 0);
  acks_.assign(static_cast<std::size_t>(group_.num_servers()), 0);
  server_alive_at_.assign(static_cast<std::size_t>(group_.num_servers()), Clock::time_point{});
  last_sent_.assign(static_cast<std::size_t>(group_.num_servers()), Clock::now());
  pulse_.bind_to_this_thread();
  last_counters_ = counters();
  server_seg_.resize(static_cast<std::size_t>(group_.num_servers()));
  if (opt_.shared_memory && group_.num_servers() > (group_.colocated ? 1 : 0))
    push_seg_ = SharedSegment::create(layout.total() * sizeof(float));
  if (group_.colocated) start_local_server();
  comm_thread_ = std::thread([this] { comm_main(); });
  PendingSends sends(*comm_);
  send_init(layout, sends);
  // --timeout + grace, as for a push's reply or the goodbye (it was 2 x (--timeout + grace)):
  // every server acknowledges once every worker's start message is in, and a worker it does not
  // hear from within --timeout of its own start is named by the server, which stops and tells
  // the others why (kAbort) before this wait ends; so this one runs out only on a server that is
  // stopped, stuck or much slower to start, and names it. Co-located, this rank's own shard may
  // fail without a word to its worker (before its loop runs, e.g. posting its receives): its
  // error ends the wait at once, as it ends the goodbye's, instead of a silence named later.
  // The sends are waited for only then: a server acknowledges once it has every message, so they
  // complete at once. Waited for first, a server stopped before it took worker 0's initial
  // parameters (a send that large is rendezvous under MPI) was not named as one ("rank 0:
  // timeout after 0.2 s in send to rank 1 (tag 1048576)", test_ps_worker_buffers.cc), and another
  // server's kAbort did not end the wait.
  const std::vector<int> none(acks_.size(), 0), one(acks_.size(), 1);
  wait_acks(none, one, "the servers' start acknowledgements", "start acknowledgement");
  sends.wait(opt_.timeout);
}

void PsWorker::Impl::wait_acks(const std::vector<int>& before, const std::vector<int>& owed,
                               const char* what, const char* missing) {
  const std::size_t n = owed.size();
  auto acked = [&] {  // by server index: all its acknowledgements came (under mu_)
    std::vector<char> done(n);
    for (std::size_t s = 0; s < n; ++s) done[s] = acks_[s] - before[s] >= owed[s];
    return done;
  };
  wait_for(
      [&] {
        const std::vector<char> done = acked();
        return server_error_ || std::find(done.begin(), done.end(), 0) == done.end();
      },
      what, false, opt_.timeout + grace(),
      [&] {
        return "; no " + std::string(missing) + " from " + servers_without(acked()) +
               " (stopped, stuck or slow)";
      });
  std::lock_guard<std::mutex> lk(mu_);
  if (server_error_) std::rethrow_exception(server_error_);
}

std::string PsWorker::Impl::servers_without(const std::vector<char>& seen) const {
  std::vector<int> ranks;  // "server rank 2", "server ranks 2 and 3"
  for (std::size_t s = 0; s < seen.size(); ++s)
    if (!seen[s]) ranks.push_back(group_.server_ranks[s]);
  return "server " + rank_list(ranks);
}

void PsWorker::Impl::make_start_plan(const ParamLayout& layout) {
  const auto bucket_bytes = static_cast<std::size_t>(opt_.bucket_mb * 1024 * 1024);
  plan_ = make_plan(layout, group_.num_servers(), slicer_by_name(opt_.partition), opt_.chunk_bytes,
                    bucket_bytes);
  for (int s = 0; s < group_.num_servers(); ++s)
    STARRING_CONFIG_CHECK(!plan_.chunks_of_server[static_cast<std::size_t>(s)].empty(),
                          "parameter server ", s, " would own no part of the model (",
                          layout.num_tensors(), " tensors, ", layout.total(), " floats, ",
                          group_.num_servers(), " servers, --ps-partition ", opt_.partition,
                          "): use fewer servers");
  STARRING_CONFIG_CHECK(plan_.chunks.size() <= static_cast<std::size_t>(kMaxChunks),
                        "the model makes ", plan_.chunks.size(),
                        " parameter-server chunks, more than the ", kMaxChunks,
                        " the protocol has reply tags for (--ps-chunk-bytes ", opt_.chunk_bytes,
                        "); raise --ps-chunk-bytes");
}

void PsWorker::Impl::start_local_server() {
  link_ = std::make_unique<LocalLink>();
  link_->worker_params = buf_.params;
  link_->on_reply = [this](int chunk) { on_reply(chunk); };
  link_->on_ctl = [this](Op op, const std::string& text, bool timeout) {
    on_ctl(op, text, timeout, group_.server_index(rank_));
  };
  ServerOptions so;
  so.timeout = opt_.timeout;
  so.chunk_bytes = opt_.chunk_bytes;
  so.fault = opt_.fault;
  so.untimed_steps = opt_.untimed_steps;
  so.shared_memory = opt_.shared_memory;
  so.trace = opt_.trace;
  server_thread_ = std::thread([this, so] {
    try {
      ServerLoop loop(comm_, group_, so, link_.get());
      local_server_stats_ = loop.run();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      server_error_ = std::current_exception();
      cv_.notify_all();  // a goodbye wait ends: this shard will not say goodbye
    }
  });
}

// What server `server` is told at the start (kInit): what every worker agrees on, and its chunks.
PsInitSpec PsWorker::Impl::init_spec(const ParamLayout& layout, int server) const {
  PsInitSpec spec;
  spec.num_workers = group_.num_workers();
  spec.server_index = server;
  spec.total = layout.total();
  spec.chunk_bytes = opt_.chunk_bytes;
  spec.consistency = opt_.consistency;
  spec.staleness = opt_.staleness;
  spec.update = opt_.update;
  spec.opt = opt_cfg_;
  for (int c : plan_.chunks_of_server[static_cast<std::size_t>(server)])
    spec.chunks.push_back({c, plan_.chunks[c].begin, plan_.chunks[c].count});
  return spec;
}

// Every server's start message (kInit); worker 0 also sends every chunk's initial parameters.
void PsWorker::Impl::send_init(const ParamLayout& layout, PendingSends& sends) {
  const std::size_t cap = max_request_bytes(opt_.chunk_bytes);
  for (int s = 0; s < group_.num_servers(); ++s) {
    PsHeader h;
    h.op = Op::kInit;
    h.worker = index_;
    nlohmann::json j = init_spec(layout, s).to_json();
    if (push_seg_) j["shm"] = push_seg_->describe();  // not part of what the workers agree on
    const std::string text = j.dump();
    STARRING_CONFIG_CHECK(sizeof(PsHeader) + text.size() <= cap, "the parameter-server start ",
                          "message is too large (", text.size(), " bytes): raise --ps-chunk-bytes");
    const int dst = group_.server_ranks[static_cast<std::size_t>(s)];
    const bool local = link_ && dst == rank_;
    if (local) {
      link_->post({h, nullptr, text});
    } else {
      // Whole, as checked above: make_text_message would cut it to a control message's size.
      h.count = static_cast<std::uint32_t>(text.size());
      sends.send(make_message(h, text.data(), text.size()), dst, kReqTag);
    }
    if (index_ != 0) continue;
    for (int c : plan_.chunks_of_server[static_cast<std::size_t>(s)]) {
      const auto& ch = plan_.chunks[c];
      h.op = Op::kInitParams;
      h.chunk = c;
      h.count = static_cast<std::uint32_t>(ch.count);
      if (local) {
        link_->post({h, buf_.params + ch.begin, {}});
      } else {
        sends.send(make_message(h, buf_.params + ch.begin, ch.count * sizeof(float)), dst, kReqTag);
      }
    }
  }
}

void PsWorker::Impl::abandon(const std::string& why) {
  if (started_ || shut_) return;
  shut_ = true;
  if (!group_.colocated) send_abort(why, false);
}

void PsWorker::Impl::shutdown() {
  if (shut_ || !started_) {
    shut_ = true;
    return;
  }
  shut_ = true;
  // Failing (Trainer::run's failure path: a peer silent in a checkpoint's barrier or the
  // evaluation): no goodbye, which waited up to 2 x --timeout + grace for servers that may wait
  // for that peer themselves (a co-located shard for a stopped worker 0: the job ended 24 s after
  // the stop with --timeout 5). The comm thread ends with this error and tells the servers why
  // (as on its own failures), so they stop at once; the caller rethrows its own error.
  const std::exception_ptr failing = std::current_exception();
  std::exception_ptr err;
  if (!failing) {
    try {
      flush();
      say_goodbye();
    } catch (...) {
      err = std::current_exception();
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = err;
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failing && !error_) error_ = failing;
    stop_ = true;
  }
  cv_.notify_all();
  if (comm_thread_.joinable()) comm_thread_.join();
  if (server_thread_.joinable()) server_thread_.join();
  if (failing) return;
  if (err) std::rethrow_exception(err);
  if (server_error_) std::rethrow_exception(server_error_);
}

void PsWorker::Impl::say_goodbye() {
  PsHeader h;
  h.op = Op::kDone;
  h.worker = index_;
  {  // no heartbeat after the kDone: the comm thread's next one, if any, is not sent
    std::lock_guard<std::mutex> lk(hb_mu_);
    goodbye_.store(true, std::memory_order_relaxed);
  }
  for (int s = 0; s < group_.num_servers(); ++s) {
    const int dst = group_.server_ranks[static_cast<std::size_t>(s)];
    if (link_ && dst == rank_)
      link_->post({h, nullptr, {}});
    else
      comm_->send(&h, sizeof(h), dst, kReqTag, opt_.timeout);
  }
  const int servers = group_.num_servers();
  // --timeout + grace, as for a push's reply (a silent server): the workers got here together
  // (the last evaluation and checkpoint wait for each other within --timeout), and each server
  // says goodbye once every worker's kDone is in; the general 2 x (--timeout + grace) made a
  // server stopped after the last step cost 19 s at --timeout 5. A timeout names the servers that
  // are silent (stopped, stuck). Co-located, this rank's own shard names a silent worker within
  // --timeout of its last message (which may come after ours) and ends the wait with that error,
  // a better one than the goodbyes missing because of it: the wait is then only a safety net.
  wait_for([&] { return byes_ == servers || server_error_; }, "the servers' goodbye", false,
           (opt_.timeout + grace()) * (group_.colocated ? 2 : 1),
           [&] {
             return "; no goodbye from " + servers_without(bye_seen_) + " (stopped, stuck or slow)";
           });
  std::lock_guard<std::mutex> lk(mu_);
  if (server_error_) std::rethrow_exception(server_error_);
}

nlohmann::json PsWorker::Impl::server_stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : bye_text_)
    out.push_back(t.empty() ? nlohmann::json() : nlohmann::json::parse(t));
  return out;
}

}  // namespace starring::ps
