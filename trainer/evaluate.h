// Evaluator: test-set accuracy and loss across workers. The test set is sharded round-robin
// (worker r takes samples r, r+W, r+2W, ...), so every sample is counted exactly once and none
// is dropped; each worker's (correct, loss sum, count) goes to worker 0, which adds them up.
#pragma once
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
};

class Evaluator {
 public:
  Evaluator(Mlp& model, Comm& workers, int batch);
  ~Evaluator();
  EvalResult run(const Dataset& test);

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
