// Sharding for the parameter server: which server owns which part of the flat buffer, and how a
// worker's pushes are cut into messages.
//
// The slicer (one replaceable function, as in ps-lite) maps [0, total) floats onto S servers as
// a sorted list of key RANGES that covers the buffer exactly once:
//   "range"  - contiguous ranges balanced by bytes: server s owns [s*T/S, (s+1)*T/S), so the
//              largest and smallest shard differ by at most one float and a large tensor is
//              split across servers;
//   "tensor" - whole tensors placed round-robin in backward order (tensor i -> server i % S):
//              the naive placement, kept so that its imbalance can be measured.
// A PsPlan then groups tensors into buckets exactly as the ring does (common/bucketing.h: at most
// bucket_bytes, backward order, a tensor never split), cuts each bucket's memory intervals at
// server boundaries, and cuts every piece into chunks of at most chunk_bytes (equal-sized pieces).
// A chunk is the unit on the wire: one push message and one reply, identified by its chunk id; keys
// are ranges [begin, begin + count), never per-element keys.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/param_layout.h"

namespace starring {

// A contiguous range of the flat buffer owned by one server (floats).
struct KeyRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  int server = 0;
};

// The slicer: returns ranges sorted by begin, covering [0, layout.total()) exactly once.
using Slicer = std::function<std::vector<KeyRange>(const ParamLayout&, int num_servers)>;
std::vector<KeyRange> slice_by_range(const ParamLayout& layout, int num_servers);
std::vector<KeyRange> slice_by_tensor(const ParamLayout& layout, int num_servers);
// "range" | "tensor"; ConfigError otherwise.
Slicer slicer_by_name(const std::string& name);

// One message's worth of the buffer.
struct ChunkSpec {
  std::size_t begin = 0;  // floats
  std::size_t count = 0;  // floats
  int server = 0;
  int bucket = 0;
};

struct PsPlan {
  int num_servers = 0;
  std::size_t total = 0;
  std::vector<KeyRange> ranges;       // the slicer's output
  std::vector<int> bucket_of_tensor;  // by backward index
  std::vector<std::vector<int>> tensors_of_bucket;
  std::vector<ChunkSpec> chunks;  // ordered by bucket, then by offset
  std::vector<std::vector<int>> chunks_of_bucket;
  std::vector<std::vector<int>> chunks_of_tensor;  // chunks overlapping tensor i
  std::vector<std::vector<int>> chunks_of_server;

  std::size_t server_floats(int server) const;  // floats owned by `server`
};

// ConfigError when chunk_bytes < 4 (a chunk holds whole floats); Error when the layout or the
// slicer's ranges do not tile the buffer.
PsPlan make_plan(const ParamLayout& layout, int num_servers, const Slicer& slicer,
                 std::size_t chunk_bytes, std::size_t bucket_bytes);

}  // namespace starring
