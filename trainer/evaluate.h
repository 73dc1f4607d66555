// Evaluator: test-set accuracy and loss across workers. The test set is sharded round-robin
// (worker r takes samples r, r+W, r+2W, ...), so every sample is counted exactly once and none
// is dropped; each worker's (correct, loss sum, count) goes to worker 0, which adds them up. The
// same message carries each worker's training-loss sum over the epoch, so the epoch's training
// loss is the mean over every worker's batches (the global batch's), not worker 0's alone.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/dataset.h"
#include "trainer/mlp.h"

namespace starring {

struct EvalResult {
  double accuracy = 0;  // on worker 0 (others: their own shard)
  double loss = 0;
  long count = 0;
  double train_loss = 0;  // on worker 0: the mean of every worker's step losses
};

// Element-wise sum of every worker's `values` on worker 0 (others get their own back).
std::vector<double> sum_to_worker0(Comm& workers, std::vector<double> values, int tag);

class Evaluator {
 public:
  Evaluator(Mlp& model, Comm& workers, int batch);
  ~Evaluator();
  // `train_loss_sum` over `train_steps` steps: this worker's training losses of the epoch.
  // `before_sums`, when given, runs after this worker's own share and before the counts go to
  // worker 0 (TrainLoop: under asp/ssp, a PeerWatch meeting, so that worker 0 waits for a slower
  // worker's share while it computes instead of within --timeout).
  EvalResult run(const Dataset& test, double train_loss_sum = 0, double train_steps = 0,
                 const std::function<void()>& before_sums = {});

 private:
  Mlp& model_;
  Comm& workers_;
  int batch_;
  float* dx_ = nullptr;
  int* dy_ = nullptr;
  std::vector<float> xb_;
  std::vector<int> yb_;
};

}  // namespace starring
