// Device: the CPU implementation against naive double-precision references for every operation,
// make_device's fallback, and (when a GPU is present) the CUDA implementation against the CPU one.
#include <cblas.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/blas_kernels.h"
#include "common/cuda/gemm_args.h"
#include "common/cuda/grid.h"
#include "common/device.h"
#include "common/error.h"
#include "tests/gpu/gpu_test_util.h"

namespace starring {
namespace {

// Closed-form data, labels and host copies of device buffers: shared with the GPU tests.
using gpu_test::Buf;
using gpu_test::data;
using gpu_test::IntBuf;
using gpu_test::labels;

// Naive row-major C = alpha op(A) op(B) + beta C in double.
std::vector<float> ref_gemm(bool ta, bool tb, int m, int n, int k, float alpha,
                            const std::vector<float>& a, const std::vector<float>& b, float beta,
                            const std::vector<float>& c) {
  std::vector<float> out(c.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int q = 0; q < k; ++q) {
        double av = ta ? a[q * m + i] : a[i * k + q];
        double bv = tb ? b[j * k + q] : b[q * n + j];
        s += av * bv;
      }
      out[i * n + j] = static_cast<float>(alpha * s + beta * c[i * n + j]);
    }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                  double atol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " at " << i;
}

class CpuDeviceTest : public ::testing::Test {
 protected:
  std::unique_ptr<Device> dev = make_device("cpu", 1, 0);
};

TEST_F(CpuDeviceTest, GemmAllTransposes) {
  const int m = 13, n = 7, k = 29;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      auto a = data(m * k, 1), b = data(k * n, 2), c = data(m * n, 3);
      Buf A(*dev, a), B(*dev, b), C(*dev, c);
      dev->gemm(ta, tb, m, n, k, 0.75f, A.p, B.p, 0.5f, C.p);
      // k = 29 products of values below ~1.1: float error well under 1e-5 relative.
      expect_close(C.get(), ref_gemm(ta, tb, m, n, k, 0.75f, a, b, 0.5f, c), 1e-5, 1e-5, "gemm");
    }
}

TEST_F(CpuDeviceTest, BiasActReluBackwardBiasGrad) {
  const int rows = 5, cols = 19;
  auto y = data(rows * cols, 4), bias = data(cols, 5);
  for (bool relu : {false, true}) {
    Buf Y(*dev, y), B(*dev, bias);
    dev->bias_act(Y.p, B.p, rows, cols, relu);
    std::vector<float> want(y.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        float v = y[r * cols + c] + bias[c];
        want[r * cols + c] = relu ? std::max(v, 0.0f) : v;
      }
    expect_close(Y.get(), want, 0, 0, "bias_act");
  }
  auto dy = data(rows * cols, 6);
  Buf DY(*dev, dy), Y(*dev, y);
  dev->relu_backward(DY.p, Y.p, dy.size());
  auto got = DY.get();
  for (std::size_t i = 0; i < dy.size(); ++i) EXPECT_EQ(got[i], y[i] > 0 ? dy[i] : 0.0f);

  Buf DB(*dev, data(cols, 7));
  Buf G(*dev, dy);
  std::vector<double> colsum(cols, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) colsum[c] += dy[r * cols + c];
  dev->bias_grad(DB.p, G.p, rows, cols, false);
  std::vector<float> want(colsum.begin(), colsum.end());
  expect_close(DB.get(), want, 1e-6, 1e-6, "bias_grad");
  dev->bias_grad(DB.p, G.p, rows, cols, true);  // accumulate: twice the sum
  for (auto& w : want) w *= 2;
  expect_close(DB.get(), want, 1e-6, 1e-6, "bias_grad accumulate");
}

TEST_F(CpuDeviceTest, SoftmaxXentAndCountCorrect) {
  const int rows = 6, cols = 10;
  auto x = data(rows * cols, 8);
  for (auto& v : x) v *= 5.0f;
  x[0] = 80.0f;  // large logit: the max-shift must keep exp finite
  auto lab = labels(rows, cols);
  lab[0] = 0;
  Buf X(*dev, x), D(*dev, rows * cols);
  IntBuf L(*dev, lab);
  const float scale = 1.0f / rows;
  double loss = dev->softmax_xent(X.p, L.p, rows, cols, D.p, scale);
  double want_loss = 0;
  std::vector<float> want_d(rows * cols);
  int want_correct = 0;
  for (int r = 0; r < rows; ++r) {
    double mx = *std::max_element(&x[r * cols], &x[r * cols] + cols), s = 0;
    for (int c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - mx);
    want_loss += std::log(s) + mx - x[r * cols + lab[r]];
    for (int c = 0; c < cols; ++c)
      want_d[r * cols + c] =
          static_cast<float>((std::exp(x[r * cols + c] - mx) / s - (c == lab[r])) * scale);
    int arg = static_cast<int>(std::max_element(&x[r * cols], &x[r * cols] + cols) - &x[r * cols]);
    want_correct += arg == lab[r];
  }
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::fabs(want_loss));
  expect_close(D.get(), want_d, 1e-5, 1e-7, "dlogits");
  EXPECT_EQ(dev->count_correct(X.p, L.p, rows, cols), want_correct);
  EXPECT_GE(want_correct, 1);  // row 0 is right by construction

  std::vector<int> bad = lab;
  bad[2] = cols;
  IntBuf LB(*dev, bad);
  EXPECT_THROW(dev->softmax_xent(X.p, LB.p, rows, cols, D.p, scale), Error);
}

// A tie between logits is predicted as the first of the tied classes (std::max_element, the CUDA
// kernel's `>` and torch.argmax alike), so CPU and GPU workers count the same answers correct;
// ties going to the last class passed every other test (random logits never tie).
TEST_F(CpuDeviceTest, CountCorrectTakesTheFirstOfTiedLogits) {
  const int rows = 4, cols = 5;
  std::vector<float> x(rows * cols, 0.0f);                 // row 0: all 0, tied
  for (int c = 0; c < cols; ++c) x[1 * cols + c] = 0.25f;  // row 1: all tied
  x[2 * cols + 1] = x[2 * cols + 3] = 2.0f;                // row 2: classes 1 and 3 tied
  x[3 * cols + 4] = 1.0f;                                  // row 3: class 4 alone
  Buf X(*dev, x);
  // Predictions 0, 0, 1, 4: labels on the first tied class count, on a later tied one do not.
  IntBuf first(*dev, std::vector<int>{0, 0, 1, 4});
  EXPECT_EQ(dev->count_correct(X.p, first.p, rows, cols), 4);
  IntBuf later(*dev, std::vector<int>{4, 2, 3, 4});
  EXPECT_EQ(dev->count_correct(X.p, later.p, rows, cols), 1);
}

TEST_F(CpuDeviceTest, ReductionsAndVectorOps) {
  const std::size_t n = 5000;  // several 1024-blocks plus a tail
  auto x = data(n, 9), y = data(n, 10);
  Buf X(*dev, x), Y(*dev, y);
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(dev->sum_squares(X.p, n), ss, 1e-6 * ss);
  dev->axpy(-0.5f, X.p, Y.p, n);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = y[i] - 0.5f * x[i];
  expect_close(Y.get(), want, 1e-6, 1e-7, "axpy");
  dev->scale(Y.p, 3.0f, n);
  for (auto& w : want) w *= 3.0f;
  expect_close(Y.get(), want, 1e-6, 1e-7, "scale");
  dev->fill(Y.p, 2.5f, n);
  expect_close(Y.get(), std::vector<float>(n, 2.5f), 0, 0, "fill");
}

TEST_F(CpuDeviceTest, OptimizerStepMatchesOptimizer) {
  const std::size_t n = 1001;
  for (const char* type : {"sgd", "adamw"}) {
    OptimizerConfig cfg;
    cfg.type = type;
    cfg.weight_decay = 0.01f;
    auto p = data(n, 11), g = data(n, 12);
    std::vector<float> p_ref = p;
    Optimizer opt(cfg, 0, n);
    Buf P(*dev, p), G(*dev, g), S1(*dev, n), S2(*dev, n);
    for (int t = 1; t <= 3; ++t) {
      opt.apply(p_ref.data(), g.data(), 0, n, 0.01f, t);
      dev->optimizer_step(cfg, P.p, G.p, S1.p, S2.p, n, 0.01f, t);
    }
    expect_close(P.get(), p_ref, 0, 0, type);  // same code on the CPU: identical
  }
}

TEST(MakeDevice, CpuAndFallback) {
  auto cpu = make_device("cpu", 1, 0);
  EXPECT_FALSE(cpu->is_gpu());
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_THROW(make_device("tpu", 1, 0), ConfigError);
  // "cuda" never throws: a GPU when usable, the CPU (with one log line) otherwise.
  GpuInfo info = query_gpus();
  auto d = make_device("cuda", 1, 0);
  ASSERT_TRUE(d != nullptr);
  EXPECT_EQ(d->is_gpu(), info.built && !info.gpus.empty());
  EXPECT_EQ(make_device("auto", 1, 0)->is_gpu(), d->is_gpu());
  EXPECT_THROW(make_device("cpu", 0, 0), Error);  // OpenBLAS needs at least one thread
  if (!info.built) EXPECT_FALSE(info.error.empty());
  // CUDA built but no NVIDIA driver at all (this machine): the runtime's own words,
  // cudaErrorInsufficientDriver "CUDA driver version is insufficient", would send a reader to
  // upgrade a driver that is not there.
  if (info.built && info.driver_version == 0)
    EXPECT_EQ(info.error.rfind("no NVIDIA driver found (", 0), 0u) << info.error;
}

// The fallback's log line reaches stderr in ONE write: under mpirun every rank of a host falls
// back at the same moment into the same stderr pipe, and a line written piece by piece came out
// interleaved ("[starring] local rank [starring] local rank 0: no usable CUDA device ...").
// stderr is a SOCK_SEQPACKET socket here, so every write(2) arrives as a record of its own.
TEST(MakeDevice, FallbackLineIsOneWrite) {
  GpuInfo info = query_gpus();
  if (info.built && !info.gpus.empty()) GTEST_SKIP() << "a GPU is usable: no fallback line";
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ASSERT_GE(saved, 0);
  ::dup2(sv[0], 2);
  auto d = make_device("cuda", 1, 3);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(sv[0]);
  std::vector<std::string> records;
  char buf[4096];
  for (ssize_t got; (got = ::recv(sv[1], buf, sizeof buf, MSG_DONTWAIT)) > 0;)
    records.emplace_back(buf, static_cast<std::size_t>(got));
  ::close(sv[1]);
  EXPECT_FALSE(d->is_gpu());
  ASSERT_EQ(records.size(), 1u) << "the line came in " << records.size() << " writes";
  EXPECT_EQ(records[0].rfind("[starring] local rank 3: no usable CUDA device (", 0), 0u)
      << records[0];
  if (info.built && info.driver_version == 0)
    EXPECT_NE(records[0].find("no usable CUDA device (no NVIDIA driver found ("), std::string::npos)
        << records[0];
  EXPECT_EQ(records[0].back(), '\n');
}

// The same operations on the GPU and on the CPU agree within float tolerance.
TEST(CudaVsCpu, Agree) {
  GpuInfo info = query_gpus();
  if (!info.built || info.gpus.empty())
    GTEST_SKIP() << "no usable GPU: " << (info.error.empty() ? "none found" : info.error);
  auto cpu = make_device("cpu", 1, 0);
  auto gpu = make_device("cuda", 1, 0);
  ASSERT_TRUE(gpu->is_gpu());
  const int m = 64, n = 96, k = 130, classes = 10;
  auto a = data(m * k, 1), b = data(k * n, 2), bias = data(n, 3), g = data(m * n, 4);
  auto logits = data(m * classes, 5);
  auto lab = labels(m, classes);
  std::vector<std::vector<float>> out[2];
  double loss[2], ss[2];
  int correct[2];
  Device* devs[2] = {cpu.get(), gpu.get()};
  for (int d = 0; d < 2; ++d) {
    Device& dv = *devs[d];
    Buf A(dv, a), B(dv, b), Bias(dv, bias), C(dv, m * n), DB(dv, n), G(dv, g);
    Buf X(dv, logits), D(dv, m * classes);
    IntBuf L(dv, lab);
    dv.gemm(false, false, m, n, k, 1.0f, A.p, B.p, 0.0f, C.p);
    dv.bias_act(C.p, Bias.p, m, n, true);
    out[d].push_back(C.get());
    dv.gemm(true, false, k, n, m, 1.0f, A.p, C.p, 0.0f, B.p);  // A^T C (k x n)
    out[d].push_back(B.get());
    dv.relu_backward(G.p, C.p, m * n);
    dv.bias_grad(DB.p, G.p, m, n, false);
    out[d].push_back(G.get());
    out[d].push_back(DB.get());
    loss[d] = dv.softmax_xent(X.p, L.p, m, classes, D.p, 1.0f / m);
    out[d].push_back(D.get());
    correct[d] = dv.count_correct(X.p, L.p, m, classes);
    ss[d] = dv.sum_squares(C.p, m * n);
    OptimizerConfig cfg;
    cfg.type = "adamw";
    Buf S1(dv, m * n), S2(dv, m * n);
    dv.optimizer_step(cfg, G.p, C.p, S1.p, S2.p, m * n, 1e-3f, 1);  // params G, grads C
    dv.synchronize();
    out[d].push_back(G.get());
  }
  for (std::size_t i = 0; i < out[0].size(); ++i)
    expect_close(out[1][i], out[0][i], 1e-4, 1e-4, ("output " + std::to_string(i)).c_str());
  EXPECT_NEAR(loss[1], loss[0], 1e-4 * std::fabs(loss[0]));
  EXPECT_NEAR(ss[1], ss[0], 1e-5 * ss[0]);
  EXPECT_EQ(correct[1], correct[0]);
}

// The cuBLAS call CudaDevice::gemm makes (common/cuda/gemm_args.h), made here of OpenBLAS's
// column-major sgemm with the same arguments: it gives the row-major product for every transpose,
// and its leading dimensions meet cublasSgemm's checks (lda >= max(1, transa ? k : m), ldb >=
// max(1, transb ? n : k), ldc >= max(1, m), else CUBLAS_STATUS_INVALID_VALUE). No GPU needed:
// this is the argument mapping the GPU tests (GpuDevice.GemmAllTransposesMatchCpu) check on a GPU.
TEST(ColumnMajorGemm, OpenBlasColumnMajorGivesTheRowMajorProduct) {
  struct Shape {
    int m, n, k;
  };
  for (Shape s : {Shape{13, 7, 29}, Shape{1, 9, 4}, Shape{8, 1, 3}, Shape{5, 6, 1},
                  Shape{128, 10, 128}, Shape{10, 128, 64}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const std::string what = "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                                 " k=" + std::to_string(s.k) + " ta=" + std::to_string(ta) +
                                 " tb=" + std::to_string(tb);
        const cuda::ColumnMajorGemm g = cuda::column_major_gemm(ta, tb, s.m, s.n, s.k);
        EXPECT_GE(g.ld_first, std::max(1, g.trans_first ? g.k : g.m)) << what;
        EXPECT_GE(g.ld_second, std::max(1, g.trans_second ? g.n : g.k)) << what;
        EXPECT_GE(g.ldc, std::max(1, g.m)) << what;
        auto a = data(std::size_t(s.m) * s.k, 1), b = data(std::size_t(s.k) * s.n, 2),
             c0 = data(std::size_t(s.m) * s.n, 3);
        auto c = c0;
        cblas_sgemm(CblasColMajor, g.trans_first ? CblasTrans : CblasNoTrans,
                    g.trans_second ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 0.75f, b.data(),
                    g.ld_first, a.data(), g.ld_second, 0.5f, c.data(), g.ldc);
        expect_close(c, ref_gemm(ta, tb, s.m, s.n, s.k, 0.75f, a, b, 0.5f, c0), 1e-5, 1e-5,
                     what.c_str());
      }
  }
}

// The launch shape of kernels.cu's grid-stride kernels (common/cuda/grid.h): at least one block
// and at most the cap (a valid gridDim.x for every n, 0 and past 2^31 included), one pass when the
// cap allows it, and the loop `for (i = block * kThreads + thread; i < n; i += blocks * kThreads)`
// reaches every element exactly once (emulated here, past the cap too).
TEST(KernelGrid, BlocksAreValidAndTheGridStrideLoopCoversEveryElement) {
  using cuda::blocks_for;
  using cuda::kMaxBlocks;
  using cuda::kThreads;
  const std::size_t cap_elems = kMaxBlocks * kThreads;
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(255), std::size_t(256),
                        std::size_t(257), cap_elems - 1, cap_elems, cap_elems + 1,
                        (std::size_t(1) << 31) + 1024, SIZE_MAX - 5, SIZE_MAX}) {
    const std::size_t b = static_cast<std::size_t>(blocks_for(n));
    EXPECT_GE(b, 1u) << n;
    EXPECT_LE(b, kMaxBlocks) << n;
    if (n <= cap_elems) {  // the fewest blocks that cover n in one pass
      EXPECT_GE(b * kThreads, n) << n;
      if (n > 0) EXPECT_LT((b - 1) * kThreads, n) << n;
    } else {
      EXPECT_EQ(b, kMaxBlocks) << n;
    }
  }
  for (std::size_t n :
       {std::size_t(0), std::size_t(1), std::size_t(300), cap_elems + 7, 3 * cap_elems - 1}) {
    const std::size_t blocks = static_cast<std::size_t>(blocks_for(n));
    std::vector<unsigned char> seen(n, 0);
    for (std::size_t block = 0; block < blocks; ++block)
      for (std::size_t t = 0; t < static_cast<std::size_t>(kThreads); ++t)
        for (std::size_t i = block * kThreads + t; i < n; i += blocks * kThreads) ++seen[i];
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(n)) << n;
  }
}

// OpenBLAS's unknown-CPU fallback (Prescott kernels) is replaced only on CPUs that can run the
// faster kernels, and a core the library recognized is never second-guessed.
TEST(BlasKernels, OnlyThePrescottFallbackIsReplaced) {
  EXPECT_EQ(faster_blas_core("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(faster_blas_core("Prescott", false, true), "Haswell");
  EXPECT_EQ(faster_blas_core("Prescott", false, false), "");
  EXPECT_EQ(faster_blas_core("Haswell", true, true), "");
  EXPECT_EQ(faster_blas_core("SkylakeX", true, true), "");
  EXPECT_EQ(faster_blas_core("Zen", true, true), "");
}

}  // namespace
}  // namespace starring
