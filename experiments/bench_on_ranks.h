// Running a bench op on part of the world, so that backends that need different numbers of
// ranks compare at the same number of workers in ONE `starring bench` run. The parameter server
// with S dedicated servers needs W + S ranks while the ring and co-located PS need W, so:
//
//   scripts/mpirun.sh -np 5 starring bench --servers 1 --backends ps,ps-colocated@4,ring@4
//
// runs `ps` on all 5 ranks (4 workers + 1 server) and the other two on ranks 0..3, rank 4
// sitting out (it still joins the harness's barriers and gathers, as a non-worker).
// make_bench_op resolves "NAME@N" with make_bench_op_on_ranks(NAME's factory, N, ctx). Only
// rank 0's op describes a row, and rank 0 is always a member.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "experiments/bench_harness.h"

namespace starring {

// Splits "ring@4" into ("ring", 4); returns n = 0 when there is no "@N" suffix. ConfigError on
// a malformed N.
std::pair<std::string, int> split_ranks_suffix(const std::string& name);

// The op made by `factory` on a SubComm of world ranks 0..n-1; on the other ranks, an op that
// takes part in nothing (is_worker() false, every call a no-op). ConfigError if n > world size.
std::unique_ptr<BenchOp> make_bench_op_on_ranks(const BenchOpFactory& factory, int n,
                                                const BenchOpContext& ctx);

// Every rank contributes `values` (the same length everywhere); rank 0 gets all ranks' vectors
// in rank order, the others an empty result. Waits at most world.timeout() per message.
std::vector<std::vector<double>> gather_to_root(Comm& world, const std::vector<double>& values,
                                                int tag);

}  // namespace starring
