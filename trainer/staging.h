// Staging: host copies of a GPU model's buffers for the backends that work on host memory.
#pragma once

#include <vector>

#include "common/gradient_sync.h"
#include "common/kept_memory.h"
#include "trainer/mlp.h"

namespace starring {

// Host copies of the model's buffers when the model lives on a GPU but the backend works on
// host memory (ring/mpi/ps): gradients go down per layer, parameters come back per tensor.
class Staging {
 public:
  Staging(Mlp& model, bool needed) : model_(model), needed_(needed) {
    if (!needed_) return;
    params_.resize(model.num_params());
    grads_.resize(model.num_params());
    model.device().to_host(params_.data(), model.params(), params_.size());
  }
  SyncBuffers buffers() {
    if (!needed_)
      return {model_.params(), model_.grads(), model_.device().is_gpu(), &model_.device()};
    return {params_.data(), grads_.data(), false, &model_.device()};
  }
  void grads_down(const TensorSpec& t) {
    if (needed_)
      model_.device().to_host(grads_.data() + t.offset, model_.grads() + t.offset, t.size);
  }
  void params_up(const TensorSpec& t) {
    if (needed_)
      model_.device().to_device(model_.params() + t.offset, params_.data() + t.offset, t.size);
  }
  void all_params_up() {
    if (needed_) model_.device().to_device(model_.params(), params_.data(), params_.size());
  }

 private:
  Mlp& model_;
  bool needed_;
  ReceiveVector<float> params_, grads_;  // the backends receive into them (kept_memory.h)
};

}  // namespace starring
