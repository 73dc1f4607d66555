// Checked reads of a checkpoint's metadata: a file whose format and CRC are valid may still hold
// values no run writes (edited by hand and its CRC recomputed, another tool's bug). Each read
// refuses a missing field (unless it has a fallback: a field of a newer build), a value of the
// wrong type or out of range with one ConfigError, "<where>: checkpoint <file>: bad metadata:
// <field> is <value>, not <what it must be>", instead of the JSON library's exception (which
// named no field), a silent cast (2^40 into an int) or undefined behaviour (1e30 into an int64).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace starring {

class CheckpointFields {
 public:
  CheckpointFields(std::string where, std::string file)
      : where_(std::move(where)), file_(std::move(file)) {}

  // The ConfigError above; `what` says what the value must be. `v` null: the field is missing.
  [[noreturn]] void bad(const std::string& field, const nlohmann::json* v,
                        const std::string& what) const;
  // The same for a value as the error shows it (a number, or "3 x 16 x 1").
  [[noreturn]] void bad(const std::string& field, const std::string& shown,
                        const std::string& what) const;
  [[noreturn]] void bad(const std::string& field, std::int64_t v, const std::string& what) const {
    bad(field, std::to_string(v), what);
  }
  // j[key]: an integer from lo to hi; `fallback` when absent (none: required). `field` names it in
  // the error (default: key).
  std::int64_t integer(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi,
                       std::optional<std::int64_t> fallback = std::nullopt,
                       const std::string& field = "") const;
  // j[key]: an unsigned integer (a seed).
  std::uint64_t unsigned_integer(const nlohmann::json& j, const char* key,
                                 const std::string& field = "") const;
  // j[key]: a number, finite and >= 0 (seconds); `fallback` when absent.
  double seconds(const nlohmann::json& j, const char* key, std::optional<double> fallback,
                 const std::string& field = "") const;
  // j[key]: a number, or null (a diverged run's loss: NaN). Required.
  double number_or_nan(const nlohmann::json& j, const char* key,
                       const std::string& field = "") const;

 private:
  std::string where_, file_;
};

}  // namespace starring
