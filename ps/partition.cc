#include "ps/partition.h"

#include <algorithm>

#include "common/bucketing.h"
#include "common/error.h"

namespace starring {

std::vector<KeyRange> slice_by_range(const ParamLayout& layout, int num_servers) {
  STARRING_CHECK(num_servers >= 1, "slice_by_range: need at least one server, got ", num_servers);
  const std::size_t total = layout.total();
  const std::size_t s_count = static_cast<std::size_t>(num_servers);
  std::vector<KeyRange> out;
  for (std::size_t s = 0; s < s_count; ++s) {
    std::size_t b = total * s / s_count, e = total * (s + 1) / s_count;
    if (e > b) out.push_back({b, e, static_cast<int>(s)});
  }
  return out;
}

std::vector<KeyRange> slice_by_tensor(const ParamLayout& layout, int num_servers) {
  STARRING_CHECK(num_servers >= 1, "slice_by_tensor: need at least one server, got ", num_servers);
  std::vector<KeyRange> out;
  for (std::size_t i = 0; i < layout.num_tensors(); ++i) {
    const auto& t = layout.tensor(i);
    if (t.size > 0) out.push_back({t.offset, t.offset + t.size, static_cast<int>(i % num_servers)});
  }
  std::sort(out.begin(), out.end(),
            [](const KeyRange& a, const KeyRange& b) { return a.begin < b.begin; });
  return out;
}

Slicer slicer_by_name(const std::string& name) {
  if (name == "range") return slice_by_range;
  if (name == "tensor") return slice_by_tensor;
  throw ConfigError("--ps-partition must be 'range' or 'tensor', got '" + name + "'");
}

std::size_t PsPlan::server_floats(int server) const {
  std::size_t n = 0;
  for (const auto& r : ranges)
    if (r.server == server) n += r.end - r.begin;
  return n;
}

namespace {

// Buckets as every backend forms them (common/bucketing.h), as lists of tensor indices.
void make_buckets(const ParamLayout& layout, std::size_t bucket_bytes, PsPlan& plan) {
  plan.bucket_of_tensor.assign(layout.num_tensors(), 0);
  for (const Bucket& b : starring::make_buckets(layout, static_cast<double>(bucket_bytes))) {
    plan.tensors_of_bucket.emplace_back();
    for (std::size_t i = b.first_tensor; i < b.end_tensor; ++i) {
      plan.tensors_of_bucket.back().push_back(static_cast<int>(i));
      plan.bucket_of_tensor[i] = static_cast<int>(plan.tensors_of_bucket.size() - 1);
    }
  }
}

// The memory intervals a bucket covers, sorted and merged.
std::vector<std::pair<std::size_t, std::size_t>> bucket_intervals(const ParamLayout& layout,
                                                                  const std::vector<int>& tensors) {
  std::vector<std::pair<std::size_t, std::size_t>> iv;
  for (int t : tensors) {
    const auto& spec = layout.tensor(static_cast<std::size_t>(t));
    if (spec.size > 0) iv.emplace_back(spec.offset, spec.offset + spec.size);
  }
  std::sort(iv.begin(), iv.end());
  std::vector<std::pair<std::size_t, std::size_t>> merged;
  for (auto [b, e] : iv) {
    if (!merged.empty() && merged.back().second == b)
      merged.back().second = e;
    else
      merged.emplace_back(b, e);
  }
  return merged;
}

// Cuts [b, e) (owned by one server) into equal pieces of at most chunk_floats.
void add_chunks(std::size_t b, std::size_t e, int server, int bucket, std::size_t chunk_floats,
                PsPlan& plan) {
  const std::size_t n = e - b;
  const std::size_t pieces = (n + chunk_floats - 1) / chunk_floats;
  for (std::size_t j = 0; j < pieces; ++j) {
    std::size_t lo = b + n * j / pieces, hi = b + n * (j + 1) / pieces;
    int id = static_cast<int>(plan.chunks.size());
    plan.chunks.push_back({lo, hi - lo, server, bucket});
    plan.chunks_of_bucket[static_cast<std::size_t>(bucket)].push_back(id);
    plan.chunks_of_server[static_cast<std::size_t>(server)].push_back(id);
  }
}

}  // namespace

PsPlan make_plan(const ParamLayout& layout, int num_servers, const Slicer& slicer,
                 std::size_t chunk_bytes, std::size_t bucket_bytes) {
  layout.validate();
  STARRING_CONFIG_CHECK(chunk_bytes >= sizeof(float),
                        "--ps-chunk-bytes must be at least 4 bytes, got ", chunk_bytes);
  PsPlan plan;
  plan.num_servers = num_servers;
  plan.total = layout.total();
  plan.ranges = slicer(layout, num_servers);
  std::size_t pos = 0;
  for (const auto& r : plan.ranges) {
    STARRING_CHECK(r.begin == pos && r.end > r.begin && r.server >= 0 && r.server < num_servers,
                   "slicer: ranges must tile the buffer in order (bad range at ", pos, ")");
    pos = r.end;
  }
  STARRING_CHECK(pos == plan.total, "slicer: ranges do not cover the buffer");

  make_buckets(layout, bucket_bytes, plan);
  plan.chunks_of_bucket.resize(plan.tensors_of_bucket.size());
  plan.chunks_of_server.resize(static_cast<std::size_t>(num_servers));
  const std::size_t chunk_floats = chunk_bytes / sizeof(float);
  for (std::size_t bk = 0; bk < plan.tensors_of_bucket.size(); ++bk) {
    for (auto [b, e] : bucket_intervals(layout, plan.tensors_of_bucket[bk])) {
      // First range whose end lies beyond b, then walk the ranges that intersect [b, e).
      auto it = std::upper_bound(plan.ranges.begin(), plan.ranges.end(), b,
                                 [](std::size_t x, const KeyRange& r) { return x < r.end; });
      for (; it != plan.ranges.end() && it->begin < e; ++it)
        add_chunks(std::max(b, it->begin), std::min(e, it->end), it->server, static_cast<int>(bk),
                   chunk_floats, plan);
    }
  }
  plan.chunks_of_tensor.resize(layout.num_tensors());
  for (std::size_t i = 0; i < layout.num_tensors(); ++i) {
    const auto& t = layout.tensor(i);
    for (int c : plan.chunks_of_bucket[static_cast<std::size_t>(plan.bucket_of_tensor[i])]) {
      const auto& ch = plan.chunks[static_cast<std::size_t>(c)];
      if (ch.begin < t.offset + t.size && t.offset < ch.begin + ch.count)
        plan.chunks_of_tensor[i].push_back(c);
    }
  }
  return plan;
}

}  // namespace starring
