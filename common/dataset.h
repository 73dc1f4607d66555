// Datasets in memory: images as rows of floats in [0, 1], labels as ints.
//   load_idx_dataset(dir, train) reads Fashion-MNIST / MNIST IDX files (.gz via zlib, or plain):
//     train: train-images-idx3-ubyte(.gz), train-labels-idx1-ubyte(.gz)
//     test:  t10k-images-idx3-ubyte(.gz),  t10k-labels-idx1-ubyte(.gz)
//   Every problem (missing file or a link to nothing, wrong magic, corrupt or truncated payload,
//   label/image count mismatch, label out of range) throws ConfigError naming the file and what
//   is wrong. A .gz may hold several gzip members; a plain (gunzipped) file may carry the .gz
//   name.
//   make_synthetic(...) generates a learnable classification set (class-dependent Gaussian
//   clusters) deterministically from a seed, for tests and scale runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace starring {

struct Dataset {
  int n = 0;    // samples
  int dim = 0;  // features per sample
  int classes = 0;
  std::vector<float> x;  // n * dim, row-major
  std::vector<int> y;    // n
  std::string source;    // where it came from, for logs
  // CRC-32 (zlib) of the IDX payloads it was read from, labels then images (the same for a .gz
  // file and its plain twin), so that ranks can tell same-shaped but different files apart;
  // 0 for a synthetic set, which is a function of its shape and seed
  std::uint32_t crc = 0;
};

Dataset load_idx_dataset(const std::string& dir, bool train);
// The cheap part of load_idx_dataset for both splits, for a check before a run starts: every
// file is present, its header is an IDX header of the right kind, and images and labels agree in
// number (payloads are not read). Throws the same ConfigErrors. Returns the training samples.
int check_idx_dataset(const std::string& dir);
// Reads one IDX file (gz or plain); returns dims and raw bytes. Exposed for tests.
struct IdxFile {
  std::vector<int> dims;
  std::vector<std::uint8_t> data;
};
IdxFile read_idx_file(const std::string& path, int expected_rank);

Dataset make_synthetic(int n, int dim, int classes, std::uint64_t seed);

}  // namespace starring
