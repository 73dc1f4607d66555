// STUB until implemented.
#include "common/error.h"
#include "experiments/commands.h"

namespace starring {
int run_train(Config&, std::shared_ptr<Comm>) { throw Error("'train' is not implemented yet"); }
}  // namespace starring
