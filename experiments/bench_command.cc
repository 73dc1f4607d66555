// `starring bench`: the nccl-tests-style harness (experiments/bench_harness.h) over the
// backends named in --backends (default: --backend). Exit code 1 when any value was wrong.
// --mode overlap runs the overlap benchmark instead (experiments/bench_overlap.h).
#include "common/device.h"
#include "common/error.h"
#include "experiments/bench_agreement.h"
#include "experiments/bench_harness.h"
#include "experiments/bench_overlap.h"
#include "experiments/commands.h"
#include "experiments/preflight.h"

namespace starring {

int run_bench(Config& cfg, std::shared_ptr<Comm> world) {
  world->set_timeout(Seconds(cfg.sync.timeout_s));
  agree_on_bench_options(cfg, *world);  // ranks given other options would run other rows
  const auto note = [&] { note_single_process(cfg, world->rank(), world->size()); };
  if (cfg.bench.mode == "overlap") {
    run_overlap_bench(cfg, world, note);
    return 0;
  }
  auto device = make_device(cfg.train.device, cfg.train.threads, world->node_rank());
  auto rows = run_bench_harness(cfg, world, device.get(), note);
  long wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  return wrong ? 1 : 0;
}

}  // namespace starring
