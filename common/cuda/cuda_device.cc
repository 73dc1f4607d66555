// CudaDevice: the model's math on one GPU. Matrix products go to cuBLAS, which is column-major:
// a row-major C (m x n) is the column-major C^T, and C^T = op(B)^T op(A)^T, so a row-major
// C = op(A) op(B) is cublasSgemm with the operands swapped (B first, n and m swapped) and the
// same leading dimensions as in row-major (gemm_args.h, checked on the CPU). Everything else is
// the small kernels of kernels.cu.
// All work is queued on one stream owned by the device; the results that return a number
// (loss, correct count, sum of squares) wait for it. Any thread may call in: each entry point
// makes this device's GPU current first.
#include <cmath>
#include <numeric>
#include <vector>

#include "common/cuda/cuda_check.h"
#include "common/cuda/gemm_args.h"
#include "common/cuda/kernels.h"
#include "common/device_factories.h"
#include "common/gpu_assignment.h"

namespace starring {
namespace {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    try {
      CHECK_CUDA(cudaSetDevice(ordinal_));
      cudaDeviceProp prop{};
      CHECK_CUDA(cudaGetDeviceProperties(&prop, ordinal_));
      name_ = detail::concat("cuda:", ordinal_, " (", prop.name, ")");
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CHECK_CUBLAS(cublasCreate(&blas_));
      CHECK_CUBLAS(cublasSetStream(blas_, stream_));
      CHECK_CUDA(cudaMalloc(&partial_, cuda::kSumSquaresBlocks * sizeof(double)));
      CHECK_CUDA(cudaMalloc(&flag_, sizeof(int)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaDevice() override { release(); }
  std::string name() const override { return name_; }
  bool is_gpu() const override { return true; }

  float* alloc(std::size_t n) override { return static_cast<float*>(zeroed(n * sizeof(float))); }
  void free(float* p) override {
    cudaSetDevice(ordinal_);  // cudaFree synchronizes the current device: make it this one
    cudaFree(p);
  }
  int* alloc_int(std::size_t n) override { return static_cast<int*>(zeroed(n * sizeof(int))); }
  void free_int(int* p) override {
    cudaSetDevice(ordinal_);
    cudaFree(p);
  }
  void to_device(float* dst, const float* host, std::size_t n) override {
    copy(dst, host, n * sizeof(float), cudaMemcpyHostToDevice);
  }
  void to_host(float* host, const float* src, std::size_t n) override {
    copy(host, src, n * sizeof(float), cudaMemcpyDeviceToHost);
  }
  void to_device_int(int* dst, const int* host, std::size_t n) override {
    copy(dst, host, n * sizeof(int), cudaMemcpyHostToDevice);
  }
  void fill(float* p, float v, std::size_t n) override {
    use();
    if (n) cuda::fill(p, v, n, stream_);
    CHECK_CUDA(cudaGetLastError());
  }
  void synchronize() override {
    use();
    CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) override {
    use();
    const cuda::ColumnMajorGemm g = cuda::column_major_gemm(ta, tb, m, n, k);
    CHECK_CUBLAS(cublasSgemm(blas_, g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                             g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &alpha, b,
                             g.ld_first, a, g.ld_second, &beta, c, g.ldc));
  }
  void bias_act(float* y, const float* bias, int rows, int cols, bool relu) override {
    use();
    cuda::bias_act(y, bias, rows, cols, relu, stream_);
    CHECK_CUDA(cudaGetLastError());
  }
  void relu_backward(float* dy, const float* y, std::size_t n) override {
    use();
    cuda::relu_backward(dy, y, n, stream_);
    CHECK_CUDA(cudaGetLastError());
  }
  void bias_grad(float* db, const float* dy, int rows, int cols, bool accumulate) override {
    use();
    cuda::bias_grad(db, dy, rows, cols, accumulate, stream_);
    CHECK_CUDA(cudaGetLastError());
  }
  double softmax_xent(const float* logits, const int* labels, int rows, int cols, float* dlogits,
                      float grad_scale) override;
  int count_correct(const float* logits, const int* labels, int rows, int cols) override;
  double sum_squares(const float* x, std::size_t n) override;
  void axpy(float a, const float* x, float* y, std::size_t n) override {
    use();
    if (n) cuda::axpy(a, x, y, n, stream_);
    CHECK_CUDA(cudaGetLastError());
  }
  void scale(float* x, float a, std::size_t n) override {
    use();
    if (n) cuda::scale(x, a, n, stream_);
    CHECK_CUDA(cudaGetLastError());
  }
  void optimizer_step(const OptimizerConfig& cfg, float* params, const float* grads, float* s1,
                      float* s2, std::size_t n, float lr, std::int64_t step) override {
    use();
    OptimizerScalars k = optimizer_scalars(cfg, lr, step);
    if (n) cuda::optimizer_update(k, params, grads, s1, s2, n, stream_);
    CHECK_CUDA(cudaGetLastError());
  }

 private:
  // The calling thread may not have made this GPU current (a backend's communication thread):
  // every entry point does so first. Cheap when it already is.
  void use() { CHECK_CUDA(cudaSetDevice(ordinal_)); }
  void release() {  // every handle may still be null; the destructor may run on any thread
    cudaSetDevice(ordinal_);
    cudaFree(partial_);
    cudaFree(flag_);
    cudaFree(row_loss_);
    cudaFree(hits_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  void* zeroed(std::size_t bytes) {
    use();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: reset it so later calls do not report it again
      std::size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      constexpr double mib = 1 << 20;
      throw Error(detail::concat("out of GPU memory on ", name_, ": ", std::round(bytes / mib),
                                 " MiB asked, ", std::round(free_b / mib), " of ",
                                 std::round(total_b / mib),
                                 " MiB free (a narrower --hidden, a smaller --batch, or fewer "
                                 "ranks sharing this GPU)"));
    }
    CHECK_CUDA(e);
    try {
      CHECK_CUDA(cudaMemsetAsync(p, 0, bytes ? bytes : 1, stream_));
      CHECK_CUDA(cudaStreamSynchronize(stream_));  // zero before any other stream can use it
    } catch (...) {
      cudaFree(p);  // not leaked when the memset fails
      throw;
    }
    return p;
  }
  void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    use();
    if (!bytes) return;
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));  // host buffers may be reused on return
  }
  // Per-row scratch for the loss and the correct flags, grown (rarely) to the largest batch.
  void ensure_rows(int rows) {
    use();
    if (rows <= scratch_rows_) return;
    cudaFree(row_loss_);
    cudaFree(hits_);
    row_loss_ = nullptr;
    hits_ = nullptr;
    scratch_rows_ = 0;  // a growth that fails below leaves no scratch, not the old rows' count
    CHECK_CUDA(cudaMalloc(&row_loss_, rows * sizeof(double)));
    CHECK_CUDA(cudaMalloc(&hits_, rows * sizeof(int)));
    host_loss_.resize(rows);
    host_hits_.resize(rows);
    scratch_rows_ = rows;  // last: a resize that throws leaves 0 rows, not host vectors too short
  }

  int ordinal_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  double* partial_ = nullptr;
  int* flag_ = nullptr;
  double* row_loss_ = nullptr;
  int* hits_ = nullptr;
  int scratch_rows_ = 0;
  std::vector<double> host_loss_;
  std::vector<int> host_hits_;
};

double CudaDevice::softmax_xent(const float* logits, const int* labels, int rows, int cols,
                                float* dlogits, float grad_scale) {
  use();
  ensure_rows(rows);
  CHECK_CUDA(cudaMemsetAsync(flag_, 0, sizeof(int), stream_));
  cuda::softmax_xent(logits, labels, rows, cols, dlogits, grad_scale, row_loss_, flag_, stream_);
  CHECK_CUDA(cudaGetLastError());
  int bad = 0;
  CHECK_CUDA(cudaMemcpyAsync(host_loss_.data(), row_loss_, rows * sizeof(double),
                             cudaMemcpyDeviceToHost, stream_));
  CHECK_CUDA(cudaMemcpyAsync(&bad, flag_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  STARRING_CHECK(!bad, "softmax_xent: a label is outside [0, ", cols, ")");
  return std::accumulate(host_loss_.begin(), host_loss_.begin() + rows, 0.0);
}

int CudaDevice::count_correct(const float* logits, const int* labels, int rows, int cols) {
  use();
  ensure_rows(rows);
  cuda::count_correct(logits, labels, rows, cols, hits_, stream_);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpyAsync(host_hits_.data(), hits_, rows * sizeof(int), cudaMemcpyDeviceToHost,
                             stream_));
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  return std::accumulate(host_hits_.begin(), host_hits_.begin() + rows, 0);
}

double CudaDevice::sum_squares(const float* x, std::size_t n) {
  use();
  double partial[cuda::kSumSquaresBlocks];
  cuda::sum_squares(x, n, partial_, stream_);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpyAsync(partial, partial_, sizeof(partial), cudaMemcpyDeviceToHost, stream_));
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

// Why no GPU can be used, from cudaGetDeviceCount's error. cudaErrorInsufficientDriver ("CUDA
// driver version is insufficient for CUDA runtime version") is also what a machine without any
// NVIDIA driver gets, which sent a reader to upgrade a driver that is not there; with a driver,
// both versions say by how much it is too old.
std::string no_gpu_text(cudaError_t e) {
  if (e != cudaErrorInsufficientDriver) return cuda_error_text(e);
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver (libcuda.so.1) is installed
  cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) { return detail::concat(v / 1000, ".", v % 1000 / 10); };
  if (driver == 0) return detail::concat("no NVIDIA driver found (", cudaGetErrorName(e), ")");
  return detail::concat(cuda_error_text(e), ": the driver supports CUDA ", version(driver),
                        ", this build's runtime is CUDA ", version(runtime));
}

}  // namespace

std::unique_ptr<Device> try_make_cuda_device(int local_rank, std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = no_gpu_text(e);
    cudaGetLastError();  // reset the runtime's last-error state
    return nullptr;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device found";
    return nullptr;
  }
  try {
    return std::make_unique<CudaDevice>(gpu_for_local_rank(local_rank, count));
  } catch (const Error& err) {
    if (why) *why = err.what();
    return nullptr;
  }
}

GpuSlot describe_gpu(int ordinal) {
  GpuSlot s;
  s.host = this_host_name();
  cudaError_t e = cudaGetDeviceCount(&s.visible);
  if (e != cudaSuccess) {
    s.visible = 0;
    s.note = no_gpu_text(e);
    cudaGetLastError();
    return s;
  }
  cudaDeviceProp prop{};
  char pci[32] = {0};
  e = cudaGetDeviceProperties(&prop, ordinal);
  if (e == cudaSuccess) e = cudaDeviceGetPCIBusId(pci, sizeof pci - 1, ordinal);
  if (e != cudaSuccess) {
    s.note = detail::concat("cuda:", ordinal, ": ", cuda_error_text(e));
    cudaGetLastError();
    return s;
  }
  s.ordinal = ordinal;
  s.pci = pci;
  s.uuid = gpu_uuid_text(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
  return s;
}

GpuSlot probe_gpu_slot(int local_rank) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    GpuSlot s;
    s.host = this_host_name();
    s.note = e != cudaSuccess ? no_gpu_text(e) : "no CUDA device found";
    cudaGetLastError();
    return s;
  }
  return describe_gpu(gpu_for_local_rank(local_rank, count));
}

GpuInfo query_gpus() {
  GpuInfo info;
  info.built = true;
  cudaDriverGetVersion(&info.driver_version);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&info.runtime_version);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    info.error = no_gpu_text(e);
    cudaGetLastError();
    return info;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    info.gpus.push_back({prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  if (info.gpus.empty()) {
    info.error = "no CUDA device found";
    return info;
  }
  // On the calling thread's GPU (0 unless it chose one): never another GPU than the one a rank
  // computes on, where it would make a CUDA context of its own.
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    info.cublas = true;
    cublasDestroy(h);
  }
  return info;
}

}  // namespace starring
