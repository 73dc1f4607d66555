// IDX reader (the MNIST / Fashion-MNIST file format) over zlib's gzFile API, which reads gzip and
// plain files alike. An IDX file is a 4-byte big-endian magic (0x0000, the element type 0x08 =
// unsigned byte, the number of dimensions), one big-endian uint32 per dimension, then the
// elements row-major. The reader trusts nothing: the magic, every dimension, the exact payload
// length (short and long files are both errors) and, for the dataset, the label range and that
// images and labels agree in number. Every problem is a ConfigError naming the file.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/dataset.h"
#include "common/error.h"
#include "common/file_kind.h"

namespace starring {
namespace {

constexpr int kClasses = 10;                                          // MNIST and Fashion-MNIST
constexpr std::uint64_t kMaxElements = (std::uint64_t(1) << 31) - 1;  // beyond: a corrupt header

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

std::string missing_hint() {
  return "; Fashion-MNIST is installed by scripts/setup.sh (Debian package dataset-fashion-mnist), "
         "or point --data-dir at a folder holding the IDX files";
}

// Reads up to `n` bytes; returns how many were read (fewer only at the end of the data).
// A damaged gzip stream throws; a gzip stream that merely ends early counts as a short read.
std::size_t read_some(gzFile f, const std::string& path, std::uint8_t* dst, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    int r = gzread(f, dst + got, want);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      if (code == Z_BUF_ERROR) break;  // compressed stream cut short: the caller says truncated
      // zlib's message starts with the path ("PATH: incorrect data check"): named once
      std::string why = msg ? msg : "unknown error";
      if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
      throw ConfigError(detail::concat("'", path, "': corrupt file (zlib: ", why, ")"));
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

// The file ended after `got` of the `expected` bytes (both counted from its start).
ConfigError truncated(const std::string& path, std::size_t expected, std::size_t got) {
  return ConfigError(
      detail::concat("'", path, "': truncated: expected ", expected, " bytes, got ", got));
}

void read_exact(gzFile f, const std::string& path, std::uint8_t* dst, std::size_t n,
                std::size_t offset) {
  std::size_t got = read_some(f, path, dst, n);
  if (got != n) throw truncated(path, offset + n, offset + got);
}

std::uint32_t big_endian(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// Whether `path` exists; a path that cannot be looked at (no permission, a symlink loop) is a
// ConfigError with the system's reason, not std::filesystem's exception nor "does not exist".
bool path_exists(const std::string& path, const char* what) {
  std::error_code ec;
  const bool there = std::filesystem::exists(path, ec);
  if (ec)
    throw ConfigError(detail::concat(what, "'", path, "' cannot be read (", ec.message(), ")"));
  return there;
}

// For a `path` that does not exist: a ConfigError if it is a symbolic link to nothing (a data
// set on a share that is not mounted), which would otherwise read as "cannot find" a file that
// `ls` lists.
void refuse_broken_link(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return;
  const fs::path target = fs::read_symlink(path, ec);
  throw ConfigError(detail::concat(what, "'", path, "' is a symbolic link to '", target.string(),
                                   "', which does not exist"));
}

// The file's path: `base`.gz if present, else `base` itself; neither -> ConfigError (naming the
// folder itself when it is not there or is not a folder, a link to nothing by its target).
std::string locate(const std::string& dir, const std::string& base) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!path_exists(dir, "--data-dir: folder ")) {
    refuse_broken_link(dir, "--data-dir: folder ");
    throw ConfigError(
        detail::concat("--data-dir: folder '", dir, "' does not exist", missing_hint()));
  }
  if (!fs::is_directory(dir, ec))
    throw ConfigError(detail::concat("--data-dir: '", dir, "' is not a folder", missing_hint()));
  fs::path gz = fs::path(dir) / (base + ".gz"), plain = fs::path(dir) / base;
  if (path_exists(gz.string(), "")) return gz.string();
  if (path_exists(plain.string(), "")) return plain.string();
  refuse_broken_link(gz.string(), "");
  refuse_broken_link(plain.string(), "");
  throw ConfigError(detail::concat("cannot find '", gz.string(), "' (nor '", plain.string(), "')",
                                   missing_hint()));
}

// For a file whose first bytes are another compressor's magic (zlib reads gzip only, and passes
// anything else through as it is): what to do about it; empty otherwise.
std::string other_compression(const std::uint8_t* head) {
  struct Kind {
    const char* name;
    std::uint8_t magic[4];
    int len;
  };
  static const Kind kinds[] = {{"bzip2", {'B', 'Z', 'h'}, 3},
                               {"xz", {0xFD, '7', 'z', 'X'}, 4},
                               {"zstd", {0x28, 0xB5, 0x2F, 0xFD}, 4},
                               {"zip", {'P', 'K', 3, 4}, 4}};
  for (const Kind& k : kinds)
    if (std::equal(k.magic, k.magic + k.len, head))
      return detail::concat(" (it is ", k.name, "-compressed: this reader takes gzip or plain ",
                            "IDX files; decompress it)");
  return "";
}

// Opens `path` and reads its header: the magic and the dimensions (payload not read).
GzPtr open_idx(const std::string& path, int expected_rank, IdxFile& out, std::uint64_t& count) {
  if (!path_exists(path, "")) {
    refuse_broken_link(path, "");
    throw ConfigError(detail::concat("cannot open '", path, "': no such file", missing_hint()));
  }
  // Only a regular file: opening a FIFO waited for a writer forever, without a word.
  if (const char* kind = not_a_regular_file(path))
    throw ConfigError(
        detail::concat("cannot read '", path, "': it is ", kind, ", not an IDX file"));
  errno = 0;
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (!f)
    throw ConfigError(detail::concat(
        "cannot open '", path, "': ", errno ? std::strerror(errno) : "zlib could not open it"));
  gzbuffer(f.get(), 1 << 17);

  std::uint8_t head[4];
  read_exact(f.get(), path, head, 4, 0);
  std::uint32_t magic = big_endian(head);
  std::uint32_t want = 0x0800u | static_cast<std::uint32_t>(expected_rank);
  if (magic != want) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "wrong magic 0x%08x (expected 0x%08x: unsigned bytes, %d dims)",
                  magic, want, expected_rank);
    throw ConfigError(detail::concat("'", path, "': ", buf, "; not an IDX file of this kind",
                                     other_compression(head)));
  }

  std::vector<std::uint8_t> dims(4 * static_cast<std::size_t>(expected_rank));
  read_exact(f.get(), path, dims.data(), dims.size(), 4);
  count = 1;
  std::string shape;
  for (int i = 0; i < expected_rank; ++i) {
    std::uint32_t d = big_endian(&dims[4 * i]);
    if (d == 0 || d > kMaxElements)
      throw ConfigError(detail::concat("'", path, "': corrupt header: dimension ", i, " is ", d));
    count *= d;  // both factors < 2^31: no overflow
    shape += (i ? " x " : "") + std::to_string(d);
    if (count > kMaxElements)
      throw ConfigError(detail::concat("'", path, "': corrupt header: dimensions ", shape,
                                       " make more than 2^31 - 1 elements"));
    out.dims.push_back(static_cast<int>(d));
  }
  return f;
}

void check_counts(const IdxFile& images, const std::string& images_path, const IdxFile& labels,
                  const std::string& labels_path) {
  if (images.dims[0] != labels.dims[0])
    throw ConfigError(detail::concat("'", images_path, "' holds ", images.dims[0], " images but '",
                                     labels_path, "' holds ", labels.dims[0], " labels"));
}

}  // namespace

IdxFile read_idx_file(const std::string& path, int expected_rank) {
  IdxFile out;
  std::uint64_t count = 0;
  GzPtr f = open_idx(path, expected_rank, out, count);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(expected_rank);
  // The buffer grows as the payload arrives: a header that claims more than the file holds (up to
  // 2^31 - 1 bytes) fails as truncated without first allocating and zero-filling what it claims.
  constexpr std::size_t kPiece = std::size_t(64) << 20;
  std::size_t got = 0;
  while (got < count) {
    const std::size_t want = std::min<std::size_t>(count - got, kPiece);
    if (got + want > out.data.capacity())
      out.data.reserve(std::min<std::size_t>(count, std::max(2 * out.data.capacity(), got + want)));
    out.data.resize(got + want);
    const std::size_t r = read_some(f.get(), path, out.data.data() + got, want);
    got += r;
    if (r < want) break;
  }
  if (got != count) throw truncated(path, header + count, header + got);
  std::uint8_t extra[256];
  std::size_t more = read_some(f.get(), path, extra, sizeof extra);
  if (more > 0)
    throw ConfigError(detail::concat("'", path, "': longer than its header says: expected ",
                                     header + count, " bytes, got more"));
  return out;
}

int check_idx_dataset(const std::string& dir) {
  int train = 0;
  std::vector<int> train_shape;
  std::string train_path;
  for (const char* prefix : {"train", "t10k"}) {
    const std::string images_path = locate(dir, std::string(prefix) + "-images-idx3-ubyte");
    const std::string labels_path = locate(dir, std::string(prefix) + "-labels-idx1-ubyte");
    IdxFile images, labels;
    std::uint64_t count = 0;
    open_idx(images_path, 3, images, count);
    open_idx(labels_path, 1, labels, count);
    check_counts(images, images_path, labels, labels_path);
    if (std::string(prefix) == "train") {
      train = images.dims[0];
      train_shape = images.dims;
      train_path = images_path;
    } else if (images.dims[1] != train_shape[1] || images.dims[2] != train_shape[2]) {
      // found before training, not by the first evaluation
      throw ConfigError(detail::concat("'", images_path, "' holds ", images.dims[1], "x",
                                       images.dims[2], " images but '", train_path, "' ",
                                       train_shape[1], "x", train_shape[2]));
    }
  }
  return train;
}

Dataset load_idx_dataset(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  std::string images_path = locate(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = locate(dir, prefix + "-labels-idx1-ubyte");
  IdxFile images = read_idx_file(images_path, 3);
  IdxFile labels = read_idx_file(labels_path, 1);
  check_counts(images, images_path, labels, labels_path);
  Dataset ds;
  ds.n = images.dims[0];
  ds.dim = images.dims[1] * images.dims[2];
  ds.classes = kClasses;
  ds.source = images_path;
  uLong crc = crc32_z(0L, labels.data.data(), labels.data.size());
  ds.crc = static_cast<std::uint32_t>(crc32_z(crc, images.data.data(), images.data.size()));
  ds.y.resize(ds.n);
  for (int i = 0; i < ds.n; ++i) {
    int label = labels.data[i];
    if (label >= kClasses)
      throw ConfigError(detail::concat("'", labels_path, "': label ", label, " at index ", i,
                                       " is out of range [0, ", kClasses, ")"));
    ds.y[i] = label;
  }
  ds.x.resize(images.data.size());
  constexpr float kScale = 1.0f / 255.0f;
  std::transform(images.data.begin(), images.data.end(), ds.x.begin(),
                 [](std::uint8_t v) { return float(v) * kScale; });
  return ds;
}

}  // namespace starring
