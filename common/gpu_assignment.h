// Which GPU each rank uses, and whether a job that needs one GPU per rank (the nccl backend) has
// it. A rank computes on GPU `local_rank % count`: local_rank is its index among the ranks of
// its host (MpiComm::node_rank, from host_comm in common/mpi_comm.h), count the GPUs CUDA lets the
// process see (CUDA_VISIBLE_DEVICES applies: a launcher that gives every rank its own GPU makes
// count 1 and every rank's cuda:0 a different GPU). So ranks share GPUs round-robin when a host
// has more ranks than GPUs, which the host backends allow and NCCL does not (two ranks of one
// communicator on one GPU fail or hang inside NCCL). A GPU is named by host, PCI address and
// UUID together: ordinals differ between processes with different CUDA_VISIBLE_DEVICES, and a
// VM may report a zero UUID for every GPU. The checks here are plain data (no CUDA), so the
// nccl engine, `starring env` and the CPU tests share them.
#pragma once
#include <string>
#include <vector>

namespace starring {

// GPU ordinal for a rank: local_rank modulo gpu_count (both >= 0; gpu_count > 0).
int gpu_for_local_rank(int local_rank, int gpu_count);

// One rank's GPU as its peers see it.
struct GpuSlot {
  int ordinal = -1;  // the CUDA ordinal in that rank's process; -1: no GPU
  int visible = 0;   // GPUs that rank's process sees
  std::string host;
  std::string pci;   // "00000000:1B:00.0"
  std::string uuid;  // "GPU-1a2b..."
  std::string note;  // without a GPU: what it computes on, or why there is none
  bool has_gpu() const { return ordinal >= 0; }
};

// Empty when every rank (slots[r] is rank r's) has a GPU and no two share one; otherwise one
// line for every rank's error: the first rank without a GPU, or the first two ranks on one GPU,
// with how many ranks and GPUs that host has. `what` names the need ("backend 'nccl'").
std::string one_gpu_per_rank_problem(const std::vector<GpuSlot>& slots, const std::string& what);

// Per host, in order of first rank, the GPU each rank computes on with --device cuda (what
// `starring env` prints): "node0: ranks 0->cuda:0 1->cuda:1 2->cuda:0 (3 ranks on 2 GPUs; a rank
// sees 2)", "node1: ranks 3->cpu [no CUDA device found]"; then, for a job of 2 ranks or more,
// one line saying that dedicated parameter-server ranks (--backend ps --servers S: the last S)
// compute on the CPU whatever --device says (train's rule; env is not given those options).
std::vector<std::string> gpu_plan_lines(const std::vector<GpuSlot>& slots);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints a UUID's 16 bytes.
std::string gpu_uuid_text(const unsigned char* bytes16);
// MPI's name for this host (MPI_Get_processor_name, the name an MPI program reports; Open MPI
// 4.1 takes it from gethostname()), or gethostname() outside MPI_Init..MPI_Finalize, "?" when
// that fails; under the test hook STARRING_TEST_HOSTS, the test host's name (common/test_hosts.h).
std::string this_host_name();

// Implemented in common/cuda/ (stand-ins in common/nocuda/ give ordinal -1, "built without
// CUDA"), from device queries only (cudaGetDeviceCount, cudaGetDeviceProperties,
// cudaDeviceGetPCIBusId): neither changes the calling thread's current GPU.
// This process's slot for `local_rank` (the GPU make_device("cuda") picks); ordinal -1 with
// `note` saying why when there is no GPU (no driver, no device).
GpuSlot probe_gpu_slot(int local_rank);
// The slot of CUDA ordinal `ordinal` of this process.
GpuSlot describe_gpu(int ordinal);

}  // namespace starring
