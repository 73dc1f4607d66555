// The `local` backend: a single worker, nothing to synchronize. The optimizer is applied to each
// tensor as soon as its gradient is final (tensor_ready), which is safe because backward has
// already used that layer's weights, and is slice-for-slice the same math as a whole-buffer step.
#include <memory>

#include "common/device.h"
#include "common/error.h"
#include "experiments/backend_registry.h"

namespace starring {
namespace {

class LocalSync : public GradientSync {
 public:
  void start(const ParamLayout& layout, SyncBuffers buffers, const OptimizerConfig& opt) override {
    layout_ = layout;
    buf_ = buffers;
    opt_cfg_ = opt;
    if (buf_.on_device) {
      s1_ = buf_.device->alloc(layout.total());
      s2_ = buf_.device->alloc(layout.total());
    } else {
      opt_ = std::make_unique<Optimizer>(opt, 0, layout.total());
    }
  }
  ~LocalSync() override {
    if (s1_) buf_.device->free(s1_);
    if (s2_) buf_.device->free(s2_);
  }
  void begin_step(std::int64_t step, float lr) override {
    step_ = step;
    lr_ = lr;
  }
  void tensor_ready(std::size_t i) override {
    const TensorSpec& t = layout_.tensor(i);
    if (buf_.on_device) {
      buf_.device->optimizer_step(opt_cfg_, buf_.params + t.offset, buf_.grads + t.offset,
                                  s1_ + t.offset, s2_ + t.offset, t.size, lr_, step_);
    } else {
      opt_->apply(buf_.params, buf_.grads, t.offset, t.offset + t.size, lr_, step_);
    }
  }
  void wait_params(std::size_t) override {}
  void flush() override {}
  SyncStepStats take_stats() override { return {}; }
  void shutdown() override {}
  void save_optimizer_state(std::vector<float>& s1, std::vector<float>& s2) override {
    const std::size_t n = layout_.total();
    const bool adamw = opt_cfg_.type == "adamw";
    if (buf_.on_device) {
      s1.resize(n);
      s2.resize(adamw ? n : 0);
      buf_.device->synchronize();
      buf_.device->to_host(s1.data(), s1_, n);
      if (adamw) buf_.device->to_host(s2.data(), s2_, n);
    } else {
      s1 = opt_->state1();
      s2 = opt_->state2();
    }
  }
  void load_optimizer_state(const std::vector<float>& s1, const std::vector<float>& s2) override {
    const std::size_t n = layout_.total();
    const bool adamw = opt_cfg_.type == "adamw";
    STARRING_CHECK(s1.size() == n && s2.size() == (adamw ? n : 0), "backend 'local': optimizer ",
                   "state of ", s1.size(), " + ", s2.size(), " floats for ", n, " parameters");
    if (buf_.on_device) {
      buf_.device->to_device(s1_, s1.data(), n);
      if (adamw) buf_.device->to_device(s2_, s2.data(), n);
    } else {
      opt_->state1() = s1;
      opt_->state2() = s2;
    }
  }
  bool accepts_device_buffers() const override { return true; }
  std::string name() const override { return "local"; }

 private:
  ParamLayout layout_;
  SyncBuffers buf_;
  OptimizerConfig opt_cfg_;
  std::unique_ptr<Optimizer> opt_;
  float* s1_ = nullptr;
  float* s2_ = nullptr;
  std::int64_t step_ = 0;
  float lr_ = 0;
};

const BackendRegistrar kLocal("local", [](const BackendContext& ctx) {
  STARRING_CONFIG_CHECK(ctx.world->size() == 1, "backend 'local' trains a single worker but ",
                        ctx.world->size(),
                        " ranks were started; use --backend ring|mpi|ps for several workers");
  STARRING_CONFIG_CHECK(ctx.cfg.sync.compress == "none", "--compress ", ctx.cfg.sync.compress,
                        ": backend 'local' has no wire to compress (use --backend ring)");
  Backend b;
  b.workers = ctx.world;
  b.sync = std::make_unique<LocalSync>();
  return b;
});

}  // namespace
}  // namespace starring
