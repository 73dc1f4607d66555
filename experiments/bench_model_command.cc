// STUB until implemented.
#include "common/error.h"
#include "experiments/commands.h"

namespace starring {
int run_bench_model(Config&, std::shared_ptr<Comm>) { throw Error("'bench_model' is not implemented yet"); }
}  // namespace starring
