// ParamLayout: how the model's tensors sit in ONE flat float buffer. Parameters and gradients
// share the layout, so a backend synchronizes a single buffer (or slices of it).
// Tensors are listed in BACKWARD order: index 0 is the last layer's tensor, whose gradient is
// ready first. Offsets are into the flat buffer; tensors do not overlap and cover [0, total).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace starring {

struct TensorSpec {
  std::string name;        // e.g. "fc3.weight"
  std::size_t offset = 0;  // in floats
  std::size_t size = 0;    // in floats
  std::vector<int> shape;  // informative
};

class ParamLayout {
 public:
  // Appends a tensor at the current end of the buffer (call in backward order).
  void add(std::string name, std::vector<int> shape);
  // Appends a tensor at an explicit offset, for a layout whose offsets do not follow the listing
  // order (e.g. forward-order offsets listed in backward order; Mlp itself uses add()): offsets
  // must tile [0, total) without overlap; validate() checks.
  void add_at(std::string name, std::size_t offset, std::vector<int> shape);
  void validate() const;  // throws if tensors overlap or leave gaps

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::size_t num_tensors() const { return tensors_.size(); }
  const TensorSpec& tensor(std::size_t i) const { return tensors_.at(i); }
  std::size_t total() const { return total_; }  // floats
  std::size_t bytes() const { return total_ * sizeof(float); }

 private:
  std::vector<TensorSpec> tensors_;
  std::size_t total_ = 0;
};

}  // namespace starring
