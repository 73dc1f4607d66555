// The end of `starring train` on world rank 0: the run summary (schema "starring.run.v1", see
// docs/REFERENCE.md) built from every rank's totals, printed and written to --summary-file, and
// the lines for a run a stop request ended early or too late.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "trainer/trainer.h"

namespace starring {

// `ranks`: every rank's totals (train_command.cc's rank_totals, with per-step bytes added).
nlohmann::json build_summary(const Config& cfg, const TrainResult& res, int world_size, int workers,
                             const std::vector<nlohmann::json>& ranks);
// The summary's lines on stdout.
void print_summary(const nlohmann::json& j);
// A run stopped by a stop request: no summary (the run is not over), where to resume instead.
void print_stop(const Config& cfg, const TrainResult& res);
// A stop request on `ranks` that came too late to stop the run before its end (stderr).
void print_late_stop(const std::string& ranks, std::int64_t steps);

}  // namespace starring
