// STUB until implemented.
#include "common/error.h"
#include "experiments/commands.h"

namespace starring {
int run_bench(Config&, std::shared_ptr<Comm>) { throw Error("'bench' is not implemented yet"); }
}  // namespace starring
