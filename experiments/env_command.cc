// STUB until implemented.
#include "common/error.h"
#include "experiments/commands.h"

namespace starring {
int run_env(Config&, std::shared_ptr<Comm>) { throw Error("'env' is not implemented yet"); }
}  // namespace starring
