#include "ps/protocol.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace starring::ps {

const char* op_name(Op op) {
  switch (op) {
    case Op::kInit:
      return "init";
    case Op::kInitParams:
      return "init-params";
    case Op::kPush:
      return "push";
    case Op::kDone:
      return "done";
    case Op::kAbort:
      return "abort";
    case Op::kAck:
      return "ack";
    case Op::kBye:
      return "bye";
    case Op::kHeartbeat:
      return "heartbeat";
    case Op::kGetState:
      return "get-state";
    case Op::kSetState:
      return "set-state";
    case Op::kState:
      return "state";
  }
  return "unknown";
}

std::size_t max_request_bytes(std::size_t chunk_bytes) {
  return sizeof(PsHeader) + std::max<std::size_t>(chunk_bytes, 1 << 20);
}

std::vector<char> make_message(const PsHeader& h, const void* payload, std::size_t payload_bytes) {
  std::vector<char> buf(sizeof(PsHeader) + payload_bytes);
  std::memcpy(buf.data(), &h, sizeof(PsHeader));
  if (payload_bytes) std::memcpy(buf.data() + sizeof(PsHeader), payload, payload_bytes);
  return buf;
}

std::vector<char> make_text_message(PsHeader h, const std::string& text) {
  std::string t = text.substr(0, kMaxCtlBytes - sizeof(PsHeader));
  h.count = static_cast<std::uint32_t>(t.size());
  return make_message(h, t.data(), t.size());
}

const PsHeader& header_of(const char* buf, std::size_t bytes, const std::string& where) {
  STARRING_CHECK(bytes >= sizeof(PsHeader), where, ": parameter-server message of ", bytes,
                 " bytes is shorter than its header");
  const auto& h = *reinterpret_cast<const PsHeader*>(buf);
  STARRING_CHECK(h.magic == PsHeader::kMagic, where, ": bad parameter-server message (magic ",
                 h.magic, ")");
  return h;
}

std::string text_of(const char* buf, std::size_t bytes) {
  if (bytes <= sizeof(PsHeader)) return {};
  return std::string(buf + sizeof(PsHeader), bytes - sizeof(PsHeader));
}

nlohmann::json PsInitSpec::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& ch : chunks) c.push_back({ch.id, ch.begin, ch.count});
  return {{"num_workers", num_workers},
          {"server_index", server_index},
          {"total", total},
          {"chunk_bytes", chunk_bytes},
          {"consistency", consistency},
          {"staleness", staleness},
          {"update", update},
          {"opt",
           {{"type", opt.type},
            {"momentum", opt.momentum},
            {"weight_decay", opt.weight_decay},
            {"beta1", opt.beta1},
            {"beta2", opt.beta2},
            {"eps", opt.eps}}},
          {"chunks", c}};
}

PsInitSpec PsInitSpec::from_json(const nlohmann::json& j) {
  PsInitSpec s;
  s.num_workers = j.at("num_workers").get<int>();
  s.server_index = j.at("server_index").get<int>();
  s.total = j.at("total").get<std::size_t>();
  s.chunk_bytes = j.at("chunk_bytes").get<std::size_t>();
  s.consistency = j.at("consistency").get<std::string>();
  s.staleness = j.at("staleness").get<int>();
  s.update = j.at("update").get<std::string>();
  const auto& o = j.at("opt");
  s.opt.type = o.at("type").get<std::string>();
  s.opt.momentum = o.at("momentum").get<float>();
  s.opt.weight_decay = o.at("weight_decay").get<float>();
  s.opt.beta1 = o.at("beta1").get<float>();
  s.opt.beta2 = o.at("beta2").get<float>();
  s.opt.eps = o.at("eps").get<float>();
  for (const auto& c : j.at("chunks"))
    s.chunks.push_back(
        {c.at(0).get<int>(), c.at(1).get<std::size_t>(), c.at(2).get<std::size_t>()});
  return s;
}

bool release_unfinished(std::unique_ptr<Request>& req) noexcept {
  if (!req) return false;
  bool done = false;
  try {
    done = req->test();
  } catch (...) {  // a failing test counts as unfinished
  }
  req.reset();
  return !done;
}

PendingSends::~PendingSends() {
  for (std::size_t i = 0; i < reqs_.size(); ++i)
    if (release_unfinished(reqs_[i])) keep_for_process(std::move(msgs_[i]));
}

void PendingSends::send(std::vector<char> msg, int dst, int tag) {
  msgs_.push_back(std::make_unique<std::vector<char>>(std::move(msg)));
  reqs_.push_back(comm_.isend(msgs_.back()->data(), msgs_.back()->size(), dst, tag));
}

void PendingSends::wait(Seconds timeout) {
  for (auto& r : reqs_) r->wait(timeout);
}

}  // namespace starring::ps
