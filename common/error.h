// Errors: one convention for the whole project. Everything that fails throws a starring::Error
// (or a subclass) whose message says what failed and where; the executable catches it at the
// top, prints one line (naming the rank, unless every rank failed alike) and exits non-zero
// (experiments/main.cc: 2 for a ConfigError, 1 otherwise).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace starring {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait that ran past its deadline: names this rank, the peer and the operation.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Bad user input (flags, config values, data files, output paths): a message without a source
// location (STARRING_CONFIG_CHECK), exit status 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A failure another rank found and reported to this one (a parameter server's kAbort to its
// workers). Both ranks fail; when each must print its own line (a rank missing from the
// outcome's agreement, experiments/main.cc), this rank waits a little longer and prints brief():
// the rank named and what it did, the details left to the reporting rank's line.
class Relayed {
 public:
  explicit Relayed(std::string brief) : brief_(std::move(brief)) {}
  virtual ~Relayed() = default;
  const std::string& brief() const { return brief_; }

 private:
  std::string brief_;
};

// RelayedError<TimeoutError> or <Error>: what() the whole report, as the exception it relays.
template <class Base>
class RelayedError : public Base, public Relayed {
 public:
  RelayedError(const std::string& what, std::string brief)
      : Base(what), Relayed(std::move(brief)) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace starring

// STARRING_CHECK(cond, "message parts", value, ...): throws starring::Error with file:line.
#define STARRING_CHECK(cond, ...)                                                       \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::starring::Error(                                                          \
          ::starring::detail::concat(__VA_ARGS__, " [", __FILE__, ":", __LINE__, "]")); \
  } while (0)

#define STARRING_CONFIG_CHECK(cond, ...)                                                 \
  do {                                                                                   \
    if (!(cond)) throw ::starring::ConfigError(::starring::detail::concat(__VA_ARGS__)); \
  } while (0)
