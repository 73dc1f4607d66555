// What a path that should be a data or checkpoint file is when it is not a regular file: such a
// path is refused before it is opened (opening a FIFO waits for a writer forever, a device such
// as /dev/zero never ends).
#pragma once
#include <filesystem>
#include <string>

namespace starring {

// "a directory", "a FIFO", "a socket" or "a device" for `path` (links followed); nullptr for a
// regular file, and for a path that does not exist or cannot be looked at (opening it says what
// is wrong).
inline const char* not_a_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  switch (fs::status(path, ec).type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::character:
    case fs::file_type::block:
      return "a device";
    default:
      return nullptr;
  }
}

}  // namespace starring
