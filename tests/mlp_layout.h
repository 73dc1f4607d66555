// The MLP-like ParamLayout the bucketing tests share: the default MLP's tensors (784-256-128-10)
// listed in backward order and laid out in that order, as the trainer lays them out.
#pragma once
#include "common/param_layout.h"

namespace starring::testing {

inline ParamLayout mlp_layout() {
  ParamLayout l;
  l.add("fc3.bias", {10});
  l.add("fc3.weight", {10, 128});
  l.add("fc2.bias", {128});
  l.add("fc2.weight", {128, 256});
  l.add("fc1.bias", {256});
  l.add("fc1.weight", {256, 784});
  l.validate();
  return l;
}

}  // namespace starring::testing
