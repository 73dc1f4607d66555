#include "trainer/evaluate.h"

#include <algorithm>

#include "common/comm_util.h"
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

std::vector<double> sum_to_worker0(Comm& workers, std::vector<double> values, int tag) {
  const std::size_t bytes = values.size() * sizeof(double);
  if (workers.rank() != 0) {
    workers.send(values.data(), bytes, 0, tag, workers.timeout());
    return values;
  }
  std::vector<double> other(values.size());
  for (int r = 1; r < workers.size(); ++r) {
    recv_exact(workers, other.data(), bytes, r, tag, workers.timeout(),
               detail::concat("its ", values.size(), " sums"));
    for (std::size_t k = 0; k < values.size(); ++k) values[k] += other[k];
  }
  return values;
}

EvalResult Evaluator::run(const Dataset& test, double train_loss_sum, double train_steps,
                          const std::function<void()>& before_sums) {
  const int rank = workers_.rank(), world = workers_.size();
  STARRING_CHECK(test.dim == model_.widths().front(), "test set has ", test.dim,
                 " features but the model expects ", model_.widths().front());
  // correct, loss sum, count; the epoch's training-loss sum and steps
  std::vector<double> stats{0, 0, 0, train_loss_sum, train_steps};
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
  if (before_sums) before_sums();
  stats = sum_to_worker0(workers_, std::move(stats), tags::kEvalSums);
  EvalResult r;
  r.count = static_cast<long>(stats[2]);
  r.accuracy = stats[2] > 0 ? stats[0] / stats[2] : 0;
  r.loss = stats[2] > 0 ? stats[1] / stats[2] : 0;
  r.train_loss = stats[4] > 0 ? stats[3] / stats[4] : 0;
  return r;
}

}  // namespace starring
