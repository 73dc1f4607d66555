#include "trainer/evaluate.h"

#include <algorithm>

#include "common/error.h"

namespace starring {

Evaluator::Evaluator(Mlp& model, Comm& workers, int batch)
    : model_(model), workers_(workers), batch_(batch) {
  const int dim = model.widths().front();
  xb_.resize(static_cast<std::size_t>(batch) * dim);
  yb_.resize(batch);
  dx_ = model.device().alloc(xb_.size());
  dy_ = model.device().alloc_int(yb_.size());
}

Evaluator::~Evaluator() {
  model_.device().free(dx_);
  model_.device().free_int(dy_);
}

EvalResult Evaluator::run(const Dataset& test) {
  const int rank = workers_.rank(), world = workers_.size();
  STARRING_CHECK(test.dim == model_.widths().front(), "test set has ", test.dim,
                 " features but the model expects ", model_.widths().front());
  double stats[3] = {0, 0, 0};  // correct, loss sum, count
  std::vector<std::size_t> mine;
  for (std::size_t i = rank; i < static_cast<std::size_t>(test.n); i += world) mine.push_back(i);
  for (std::size_t b = 0; b < mine.size(); b += batch_) {
    const int n = static_cast<int>(std::min<std::size_t>(batch_, mine.size() - b));
    for (int i = 0; i < n; ++i) {
      std::copy_n(test.x.data() + mine[b + i] * test.dim, test.dim, xb_.data() + i * test.dim);
      yb_[i] = test.y[mine[b + i]];
    }
    model_.device().to_device(dx_, xb_.data(), static_cast<std::size_t>(n) * test.dim);
    model_.device().to_device_int(dy_, yb_.data(), n);
    model_.forward(dx_, n);
    stats[1] += model_.loss_and_grad(dy_, n, 0.0f) * n;
    stats[0] += model_.count_correct(dy_, n);
    stats[2] += n;
  }
  const int tag = tags::kTrainerBase + 1;
  if (rank == 0) {
    for (int r = 1; r < world; ++r) {
      double other[3];
      workers_.recv(other, sizeof other, r, tag, workers_.timeout());
      for (int k = 0; k < 3; ++k) stats[k] += other[k];
    }
  } else {
    workers_.send(stats, sizeof stats, 0, tag, workers_.timeout());
  }
  EvalResult r;
  r.count = static_cast<long>(stats[2]);
  r.accuracy = stats[2] > 0 ? stats[0] / stats[2] : 0;
  r.loss = stats[2] > 0 ? stats[1] / stats[2] : 0;
  return r;
}

}  // namespace starring
