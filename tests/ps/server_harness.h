// What the server tests share (test_ps_liveness.cc, test_ps_server_sends.cc): a ServerLoop
// driven by hand over an InProcWorld, workers 0 and 1 being the test thread's messages and
// server rank 2 running the loop.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/inproc_comm.h"
#include "ps/protocol.h"
#include "ps/ps_group.h"
#include "ps/server_loop.h"

namespace starring::ps {

inline constexpr std::size_t kFloats = 8;
inline constexpr Seconds kWait{60.0};  // the test's own waits: only a broken server reaches them

inline void send_to_server(Comm& worker, Op op, std::int64_t step, const std::vector<float>& floats,
                           const std::string& text = {}) {
  PsHeader h;
  h.op = op;
  h.worker = worker.rank();  // workers 0 and 1 are ranks 0 and 1
  h.chunk = op == Op::kInit || op == Op::kDone ? -1 : 0;
  h.step = step;
  h.lr = 0.5f;
  h.count = static_cast<std::uint32_t>(floats.size());
  const auto msg = !text.empty() ? make_text_message(h, text)  // kInit, kAbort
                                 : make_message(h, floats.data(), floats.size() * sizeof(float));
  worker.send(msg.data(), msg.size(), 2, kReqTag, kWait);
}

// Both workers' start messages and worker 0's initial parameters (all 1), as PsWorker sends them.
inline void start_workers(InProcWorld& world, const std::string& consistency = "bsp") {
  PsInitSpec spec;
  spec.consistency = consistency;
  spec.num_workers = 2;
  spec.total = kFloats;
  spec.chunk_bytes = 256;
  spec.opt.type = "sgd";
  spec.chunks = {{0, 0, kFloats}};
  const std::string text = spec.to_json().dump();
  send_to_server(*world.comm(0), Op::kInit, 0, {}, text);
  send_to_server(*world.comm(1), Op::kInit, 0, {}, text);
  send_to_server(*world.comm(0), Op::kInitParams, 0, std::vector<float>(kFloats, 1.0f));
}

inline ServerOptions options() {
  ServerOptions o;
  o.timeout = Seconds(0.2);
  o.chunk_bytes = 256;
  o.shared_memory = false;
  return o;
}

// Runs the server on a thread until it returns or throws; returns its error text ("" if none).
inline std::string serve(std::shared_ptr<Comm> comm, const std::function<void()>& meanwhile = {}) {
  std::string error;
  std::thread server([&] {
    try {
      ServerLoop(comm, make_ps_group("1", 3), options()).run();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (meanwhile) meanwhile();
  server.join();
  return error;
}

inline PsHeader recv_ctl_header(Comm& worker) {
  std::vector<char> buf(kMaxCtlBytes);
  const RecvStatus st = worker.recv(buf.data(), buf.size(), 2, kCtlTag, kWait);
  return header_of(buf.data(), st.bytes, "test");
}

inline Op recv_ctl(Comm& worker) { return recv_ctl_header(worker).op; }

// The worker the server named in `error`, or -1 when it named none.
inline int named_worker(const std::string& error) {
  for (int w = 0; w < 2; ++w)
    if (error.find(detail::concat("worker rank ", w, " (worker ", w, ") sent nothing")) !=
        std::string::npos)
      return w;
  return -1;
}

}  // namespace starring::ps
