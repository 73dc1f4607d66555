#include "common/blas_kernels.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace starring {
namespace {
constexpr const char* kMarker = "STARRING_BLAS_CORE_FORCED";  // set on the re-executed process
}

std::string faster_blas_core(const std::string& picked, bool avx512, bool avx2_fma) {
  if (picked != "Prescott") return "";
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

void use_faster_blas_kernels(char** argv) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv(kMarker)) return;  // the user's, or done
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const std::string picked = openblas_get_corename();
  const std::string core = faster_blas_core(picked, avx512, avx2_fma);
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv(kMarker, picked.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the library's kernels, and say so in `starring env`.
  unsetenv("OPENBLAS_CORETYPE");
  setenv(kMarker, "exec-failed", 1);
#else
  (void)argv;
#endif
}

std::string blas_core_note() {
  const char* was = std::getenv(kMarker);
  if (!was) return "";
  if (!std::strcmp(was, "exec-failed"))
    return "OpenBLAS fell back to Prescott kernels and re-running with OPENBLAS_CORETYPE failed";
  const char* asked = std::getenv("OPENBLAS_CORETYPE");
  const std::string now = openblas_get_corename();
  if (asked && now == was)  // e.g. an OpenBLAS built without DYNAMIC_ARCH ignores the variable
    return std::string("StarRing asked for ") + asked + " kernels (OPENBLAS_CORETYPE); this " +
           "OpenBLAS kept " + now;
  return std::string("set by StarRing: this OpenBLAS did not recognize the CPU and picked ") + was +
         " (OPENBLAS_CORETYPE overrides)";
}

int max_threads_in(const std::string& config) {
  const std::string key = "MAX_THREADS=";
  const auto at = config.find(key);
  if (at == std::string::npos) return 0;
  const int n = std::atoi(config.c_str() + at + key.size());
  return n > 0 ? n : 0;
}

int blas_max_threads() {
  const char* config = openblas_get_config();
  return config ? max_threads_in(config) : 0;
}

}  // namespace starring
