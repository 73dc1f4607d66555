// CudaDevice against CpuDevice (which tests/common/test_device.cc holds to double-precision
// references), operation by operation:
//   - GEMM in all four transpose combinations with alpha and beta, odd sizes and the model's
//     shapes: cuBLAS is column-major, so a wrong operand swap or leading dimension shows here;
//   - bias + ReLU, ReLU backward, bias gradient (also accumulating), scale: bit for bit (the same
//     float operations in the same order);
//   - the optimizer steps (SGD with momentum and weight decay, AdamW), several steps: bit for bit,
//     since the kernels use the same correctly rounded operations and fma as optimizer.cc;
//   - softmax cross-entropy on logits of +-1000 (exp overflows without the max subtraction);
//   - launches past the grid cap (rows or columns > 2^20: one thread per row or column) and
//     past 2^31 elements (index arithmetic), checked against closed forms;
//   - an allocation beyond the GPU's memory: a clear Error, and the device still works.
// Skipped without a usable GPU.
#include <cstdint>
#include <limits>

#include "common/error.h"
#include "common/optimizer.h"
#include "tests/gpu/gpu_test_util.h"

namespace starring {
namespace {

using gpu_test::Buf;
using gpu_test::data;
using gpu_test::first_bit_difference;
using gpu_test::IntBuf;
using gpu_test::labels;

// Runs body(device) on the CPU device and on the GPU device; returns {cpu, gpu} outputs.
template <typename F>
std::pair<std::vector<float>, std::vector<float>> both(Device& gpu, F body) {
  auto cpu = make_device("cpu", 1, 0);
  auto c = body(*cpu);
  auto g = body(gpu);
  return {c, g};
}

TEST(GpuDevice, GemmAllTransposesMatchCpu) {
  GPU_OR_SKIP(gpu);
  struct Shape {
    int m, n, k;
  };
  // Odd sizes, k past cuBLAS's small-k paths, and the default model's layer shapes (batch 128).
  for (Shape s : {Shape{37, 53, 129}, Shape{1, 7, 3}, Shape{128, 256, 784}, Shape{784, 256, 128},
                  Shape{128, 10, 128}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        auto a = data(std::size_t(s.m) * s.k, 1), b = data(std::size_t(s.k) * s.n, 2),
             c0 = data(std::size_t(s.m) * s.n, 3);
        auto [cpu, g] = both(*gpu, [&](Device& d) {
          Buf A(d, a), B(d, b), C(d, c0);
          d.gemm(ta, tb, s.m, s.n, s.k, 0.75f, A.p, B.p, 0.5f, C.p);
          return C.get();
        });
        // Sums of k products of values below 1.2 in another order: relative error ~ k * 2^-24
        // of the sum of |terms| (<= 1.5 k); 1e-5 * (1 + k/100) absolute covers it.
        const double atol = 1e-5 * (1.0 + s.k / 100.0);
        EXPECT_CLOSE(g, cpu, 1e-5, atol,
                     "gemm m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                         " k=" + std::to_string(s.k) + " ta=" + std::to_string(ta) +
                         " tb=" + std::to_string(tb));
      }
  }
}

TEST(GpuDevice, ElementwiseAndBiasGradBitForBit) {
  GPU_OR_SKIP(gpu);
  const int rows = 67, cols = 130;
  const std::size_t n = std::size_t(rows) * cols;
  auto y0 = data(n, 4), bias = data(cols, 5), dy0 = data(n, 6), db0 = data(cols, 7);
  for (bool relu : {false, true}) {
    auto [cpu, g] = both(*gpu, [&](Device& d) {
      Buf Y(d, y0), B(d, bias);
      d.bias_act(Y.p, B.p, rows, cols, relu);
      return Y.get();
    });
    EXPECT_EQ(first_bit_difference(g, cpu), -1) << "bias_act relu=" << relu;
  }
  auto [cpu_rb, g_rb] = both(*gpu, [&](Device& d) {
    Buf DY(d, dy0), Y(d, y0);
    d.relu_backward(DY.p, Y.p, n);
    return DY.get();
  });
  EXPECT_EQ(first_bit_difference(g_rb, cpu_rb), -1) << "relu_backward";
  for (bool acc : {false, true}) {
    auto [cpu, g] = both(*gpu, [&](Device& d) {
      Buf DB(d, db0), DY(d, dy0);
      d.bias_grad(DB.p, DY.p, rows, cols, acc);
      return DB.get();
    });
    EXPECT_EQ(first_bit_difference(g, cpu), -1) << "bias_grad accumulate=" << acc;
  }
  auto [cpu_sc, g_sc] = both(*gpu, [&](Device& d) {
    Buf X(d, y0);
    d.scale(X.p, 0.37f, n);
    return X.get();
  });
  EXPECT_EQ(first_bit_difference(g_sc, cpu_sc), -1) << "scale";
  auto [cpu_ax, g_ax] = both(*gpu, [&](Device& d) {
    Buf X(d, y0), Y(d, dy0);
    d.axpy(-0.3f, X.p, Y.p, n);
    return Y.get();
  });
  // The CPU loop is contracted to an fma only where the compiler chooses to: one rounding apart.
  EXPECT_CLOSE(g_ax, cpu_ax, 2e-7, 1e-7, "axpy");
  auto [cpu_fill, g_fill] = both(*gpu, [&](Device& d) {
    Buf X(d, n);
    d.fill(X.p, -2.5f, n);
    return X.get();
  });
  EXPECT_EQ(first_bit_difference(g_fill, cpu_fill), -1) << "fill";
}

// ReLU on a NaN or -0 pre-activation as on the CPU (std::max(v, 0.0f)): NaN stays NaN (fmaxf
// made it 0, hiding on the GPU a divergence the CPU reports) and -0 + -0 stays -0. NaN payloads
// differ between x86 and CUDA, so NaNs are compared as NaN, the rest bit for bit.
TEST(GpuDevice, ReluKeepsNanAndNegativeZeroLikeTheCpu) {
  GPU_OR_SKIP(gpu);
  const int rows = 3, cols = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y0 = {nan,   -0.0f, 1.0f,  -1.0f,
                                 2.0f,  nan,   -3.0f, 0.0f,
                                 -0.0f, 0.5f,  nan,   std::numeric_limits<float>::infinity()};
  const std::vector<float> bias = {0.0f, -0.0f, -0.0f, 0.0f};
  auto [cpu, g] = both(*gpu, [&](Device& d) {
    Buf Y(d, y0), B(d, bias);
    d.bias_act(Y.p, B.p, rows, cols, true);
    return Y.get();
  });
  ASSERT_EQ(g.size(), cpu.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(cpu[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << "element " << i << ": " << g[i];
    } else {
      EXPECT_EQ(std::memcmp(&g[i], &cpu[i], sizeof(float)), 0)
          << "element " << i << ": " << g[i] << " vs " << cpu[i];
    }
  }
  EXPECT_TRUE(std::isnan(cpu[0]));    // the CPU's own rule, checked here too
  EXPECT_TRUE(std::signbit(cpu[1]));  // -0 + -0
}

TEST(GpuDevice, OptimizerStepsBitForBit) {
  GPU_OR_SKIP(gpu);
  const std::size_t n = 100003;
  auto p0 = data(n, 8);
  for (const char* type : {"sgd", "adamw"}) {
    OptimizerConfig cfg;
    cfg.type = type;
    cfg.weight_decay = 0.01f;
    auto [cpu, g] = both(*gpu, [&](Device& d) {
      Buf P(d, p0), S1(d, n), S2(d, n);
      for (int t = 1; t <= 5; ++t) {
        Buf G(d, data(n, 10 + t));
        d.optimizer_step(cfg, P.p, G.p, S1.p, S2.p, n, 0.01f / t, t);
      }
      auto out = P.get();
      auto s1 = S1.get(), s2 = S2.get();
      out.insert(out.end(), s1.begin(), s1.end());
      out.insert(out.end(), s2.begin(), s2.end());
      return out;
    });
    const long at = first_bit_difference(g, cpu);
    EXPECT_EQ(at, -1) << type << ": parameters/state differ first at " << at << " ("
                      << (at >= 0 ? g[at] : 0) << " vs " << (at >= 0 ? cpu[at] : 0) << ")";
  }
}

TEST(GpuDevice, SoftmaxXentStableAndMatchesCpu) {
  GPU_OR_SKIP(gpu);
  const int rows = 300, classes = 10;
  auto logits = data(std::size_t(rows) * classes, 9);
  // Every third row is shifted to +-1000: exp(1000) overflows a float unless the row's maximum
  // is subtracted first.
  for (int r = 0; r < rows; r += 3)
    for (int c = 0; c < classes; ++c) logits[r * classes + c] += (r % 2 ? -1000.0f : 1000.0f);
  auto lab = labels(rows, classes);
  double loss[2];
  int correct[2];
  std::vector<float> dl[2];
  auto cpu = make_device("cpu", 1, 0);
  Device* devs[2] = {cpu.get(), gpu.get()};
  for (int i = 0; i < 2; ++i) {
    Buf X(*devs[i], logits), D(*devs[i], logits.size());
    IntBuf L(*devs[i], lab);
    loss[i] = devs[i]->softmax_xent(X.p, L.p, rows, classes, D.p, 1.0f / rows);
    correct[i] = devs[i]->count_correct(X.p, L.p, rows, classes);
    dl[i] = D.get();
  }
  ASSERT_TRUE(std::isfinite(loss[1]));
  EXPECT_NEAR(loss[1], loss[0], 1e-5 * loss[0]);
  EXPECT_EQ(correct[1], correct[0]);
  EXPECT_CLOSE(dl[1], dl[0], 1e-5, 1e-8, "dlogits");
  // A label outside [0, classes) is an error on the GPU as on the CPU.
  auto bad = lab;
  bad[rows / 2] = classes;
  Buf X(*gpu, logits), D(*gpu, logits.size());
  IntBuf L(*gpu, bad);
  EXPECT_THROW(gpu->softmax_xent(X.p, L.p, rows, classes, D.p, 1.0f), Error);
}

// One thread per row (softmax, argmax) or per column (bias_grad) with the grid capped at 4096
// blocks of 256: more than 2^20 rows or columns must still all be computed.
TEST(GpuDevice, RowsAndColumnsPastTheGridCap) {
  GPU_OR_SKIP(gpu);
  const int rows = (1 << 20) + 4099, classes = 10;
  auto logits = data(std::size_t(rows) * classes, 11);
  auto lab = labels(rows, classes);
  double loss[2];
  int correct[2];
  std::vector<float> tail[2];
  auto cpu = make_device("cpu", 1, 0);
  Device* devs[2] = {cpu.get(), gpu.get()};
  const std::size_t tail_lo = std::size_t(rows - 8192) * classes;
  for (int i = 0; i < 2; ++i) {
    Buf X(*devs[i], logits), D(*devs[i], logits.size());
    IntBuf L(*devs[i], lab);
    loss[i] = devs[i]->softmax_xent(X.p, L.p, rows, classes, D.p, 1.0f / rows);
    correct[i] = devs[i]->count_correct(X.p, L.p, rows, classes);
    tail[i] = D.get(tail_lo, logits.size() - tail_lo);
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-6 * loss[0]);
  EXPECT_EQ(correct[1], correct[0]);
  EXPECT_CLOSE(tail[1], tail[0], 1e-5, 1e-12, "dlogits of the last rows");

  const int brows = 3, cols = (1 << 20) + 77;
  auto dy = data(std::size_t(brows) * cols, 12);
  auto [cpu_db, g_db] = both(*gpu, [&](Device& d) {
    Buf DB(d, cols), DY(d, dy);
    d.bias_grad(DB.p, DY.p, brows, cols, false);
    return DB.get();
  });
  EXPECT_EQ(first_bit_difference(g_db, cpu_db), -1) << "bias_grad with " << cols << " columns";
}

// More than 2^31 elements (8 GiB per buffer): element-wise kernels and the sum of squares reach
// the last element. Closed forms: fill 1.5 -> sum of squares 2.25 n exactly (double partial sums
// of multiples of 2.25 below 2^53 are exact); y = 0.5 + 2 * 1.5 = 3.5; scaled by 2 -> 7; bias +
// ReLU over (2^21 + 1) rows of 1024.
TEST(GpuDevice, MoreThanTwoToThe31Elements) {
  GPU_OR_SKIP(gpu);
  GpuInfo info = query_gpus();
  const std::size_t mem = info.gpus.empty() ? 0 : info.gpus[0].mem_bytes;
  if (mem < (std::size_t(40) << 30))
    GTEST_SKIP() << "needs 40 GiB of GPU memory, the GPU has " << (mem >> 30) << " GiB";
  const int cols = 1024, rows = (1 << 21) + 1;
  const std::size_t n = std::size_t(rows) * cols;  // 2^31 + 1024
  ASSERT_GT(n, std::size_t(1) << 31);
  Buf X(*gpu, n), Y(*gpu, n);
  gpu->fill(X.p, 1.5f, n);
  EXPECT_EQ(gpu->sum_squares(X.p, n), 2.25 * static_cast<double>(n));
  gpu->fill(Y.p, 0.5f, n);
  gpu->axpy(2.0f, X.p, Y.p, n);
  gpu->scale(Y.p, 2.0f, n);
  for (std::size_t lo : {std::size_t(0), (std::size_t(1) << 31) - 8, n - 16}) {
    auto got = Y.get(lo, 16);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 7.0f) << "element " << lo + i;
  }
  std::vector<float> bias(cols);
  for (int c = 0; c < cols; ++c) bias[c] = (c % 2 ? -10.0f : 1.0f) * c;  // odd columns -> ReLU 0
  Buf B(*gpu, bias);
  gpu->bias_act(Y.p, B.p, rows, cols, true);
  auto last = Y.get(n - cols, cols);
  for (int c = 0; c < cols; ++c) ASSERT_EQ(last[c], std::max(7.0f + bias[c], 0.0f)) << "col " << c;
  gpu->relu_backward(X.p, Y.p, n);  // X = 1.5 where Y > 0, else 0
  auto lx = X.get(n - cols, cols);
  for (int c = 0; c < cols; ++c) ASSERT_EQ(lx[c], last[c] > 0 ? 1.5f : 0.0f) << "col " << c;
  gpu->synchronize();
}

// An allocation beyond the GPU's memory is an Error that says so, with the sizes, and the device
// stays usable (cudaErrorMemoryAllocation is not sticky).
TEST(GpuDevice, OutOfMemoryIsAClearErrorAndNotSticky) {
  GPU_OR_SKIP(gpu);
  GpuInfo info = query_gpus();
  const std::size_t mem = info.gpus.empty() ? 0 : info.gpus[0].mem_bytes;
  ASSERT_GT(mem, 0u);
  try {
    gpu->alloc(mem);  // mem floats: four times the GPU's memory
    FAIL() << "allocating " << mem * 4 << " bytes did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of GPU memory on cuda:"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB free"), std::string::npos) << e.what();
  }
  Buf X(*gpu, 1024);  // still usable
  gpu->fill(X.p, 2.0f, 1024);
  EXPECT_EQ(gpu->sum_squares(X.p, 1024), 4096.0);
}

}  // namespace
}  // namespace starring
