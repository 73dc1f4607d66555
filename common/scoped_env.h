// ScopedEnv: sets an environment variable for a scope and then puts back what was there (the
// old value, or no variable). For settings a library reads only from the environment -- NCCL
// reads NCCL_ALGO when a communicator is created -- never for StarRing's own configuration.
// setenv/getenv are not thread-safe: make and end one while no other thread of this process
// reads the environment (the nccl engine ends its one when the communicator is ready).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace starring {

class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace starring
