// OpenBLAS's kernels on CPUs newer than the library.
//
// Debian 12's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) picks its kernels from the CPU model
// when the library is loaded. A model it does not know gets its generic fallback, the Prescott
// (SSE3) kernels, whatever the CPU can do: on the GPU check machine (an H200 host's CPU, with
// AVX-512) one core's sgemm ran at 25 GFLOP/s and StarRing's CPU training step at half the speed
// of PyTorch's on the same core; on this project's 2-core machine forcing Prescott makes the
// default MLP's step 4x slower. OPENBLAS_CORETYPE overrides the choice, but the library reads it
// only when it is loaded, before main() runs.
#pragma once

#include <string>

namespace starring {

// The OpenBLAS core to force, or "" to keep the library's choice: only when the library fell
// back to "Prescott" and the CPU (and the OS, which must save the wider registers) supports
// AVX-512 F/CD/BW/DQ/VL ("SkylakeX") or AVX2 + FMA ("Haswell").
std::string faster_blas_core(const std::string& picked, bool avx512, bool avx2_fma);

// Called first thing in main(): when faster_blas_core() names a core for this CPU and the user
// has not set OPENBLAS_CORETYPE, sets it and re-executes this program (same process, same
// arguments, before MPI starts), once. Returns only when nothing was changed (or exec failed).
void use_faster_blas_kernels(char** argv);

// For `starring env`: "" when the library's own choice stands, else what was forced and why.
std::string blas_core_note();

// The most threads this OpenBLAS runs (MAX_THREADS in its config string, fixed when it was
// built; Debian 12's: 64): openblas_set_num_threads quietly caps a larger count at it. 0 when
// the library does not say.
int blas_max_threads();
// The number in "... MAX_THREADS=64 ..." (0: none), for blas_max_threads.
int max_threads_in(const std::string& openblas_config);

}  // namespace starring
