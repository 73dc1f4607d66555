#include "experiments/backend_registry.h"

#include "common/error.h"

namespace starring {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry r;
  return r;
}

void BackendRegistry::add(const std::string& name, BackendFactory f) {
  for (auto& [n, _] : factories_) STARRING_CHECK(n != name, "backend registered twice: ", name);
  factories_.emplace_back(name, std::move(f));
}

const BackendFactory* BackendRegistry::find(const std::string& name) const {
  for (auto& [n, f] : factories_)
    if (n == name) return &f;
  return nullptr;
}

void BackendRegistry::require(const std::string& name) const {
  if (find(name)) return;
  std::string known;
  for (auto& [n, _] : factories_) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown backend '" + name + "' (known: " + known + ")");
}

Backend BackendRegistry::create(const std::string& name, const BackendContext& ctx) const {
  require(name);
  return (*find(name))(ctx);
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : factories_) out.push_back(n);
  return out;
}

}  // namespace starring
