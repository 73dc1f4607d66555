// Internal to common/: the two halves of make_device(). The CPU factory lives in device_cpu.cc;
// the CUDA one in common/cuda/ (or its stand-in in common/nocuda/ when CUDA is not built).
#pragma once
#include <memory>
#include <string>

#include "common/device.h"

namespace starring {

std::unique_ptr<Device> make_cpu_device(int threads);
// Returns nullptr and sets *why (one line) when no usable GPU exists or CUDA was not built.
std::unique_ptr<Device> try_make_cuda_device(int local_rank, std::string* why);

}  // namespace starring
