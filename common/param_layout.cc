#include "common/param_layout.h"

#include <algorithm>

#include "common/error.h"

namespace starring {

static std::size_t numel(const std::vector<int>& shape) {
  std::size_t n = 1;
  for (int d : shape) {
    STARRING_CHECK(d > 0, "tensor dimension must be positive, got ", d);
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

void ParamLayout::add(std::string name, std::vector<int> shape) {
  add_at(std::move(name), total_, std::move(shape));
}

void ParamLayout::add_at(std::string name, std::size_t offset, std::vector<int> shape) {
  TensorSpec t{std::move(name), offset, numel(shape), std::move(shape)};
  total_ = std::max(total_, t.offset + t.size);
  tensors_.push_back(std::move(t));
}

void ParamLayout::validate() const {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (const auto& t : tensors_) spans.emplace_back(t.offset, t.offset + t.size);
  std::sort(spans.begin(), spans.end());
  std::size_t pos = 0;
  for (auto [b, e] : spans) {
    STARRING_CHECK(b == pos, "ParamLayout: tensors overlap or leave a gap at offset ", pos);
    pos = e;
  }
  STARRING_CHECK(pos == total_, "ParamLayout: tensors do not cover the buffer");
}

}  // namespace starring
