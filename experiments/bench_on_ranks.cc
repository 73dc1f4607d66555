#include "experiments/bench_on_ranks.h"

#include "common/comm_util.h"
#include "common/error.h"
#include "common/sub_comm.h"

namespace starring {
namespace {

// A rank outside the op's sub-world: takes part in nothing. (Only rank 0's op describes the
// row, and rank 0 is always a member.)
class SitOutBenchOp : public BenchOp {
 public:
  bool is_worker() const override { return false; }
  int worker_index() const override { return 0; }
  int workers() const override { return 0; }
  double bus_factor() const override { return 0; }
  double host_buffers() const override { return 0; }  // and the harness's input: none
  void prepare(const float*, std::size_t) override {}
  void run() override {}
  void result(float*) override {}
  void clear_result() override {}
  std::optional<CommCounters> counters() const override { return CommCounters{}; }
};

}  // namespace

std::pair<std::string, int> split_ranks_suffix(const std::string& name) {
  const auto at = name.rfind('@');
  if (at == std::string::npos) return {name, 0};
  int n = 0;
  try {
    std::size_t used = 0;
    n = std::stoi(name.substr(at + 1), &used);
    if (used != name.size() - at - 1) n = 0;
  } catch (const std::exception&) {
    n = 0;
  }
  STARRING_CONFIG_CHECK(n >= 1, "bench backend '", name,
                        "': the suffix @N needs a rank count >= 1");
  return {name.substr(0, at), n};
}

std::unique_ptr<BenchOp> make_bench_op_on_ranks(const BenchOpFactory& factory, int n,
                                                const BenchOpContext& ctx) {
  const int size = ctx.world->size();
  STARRING_CONFIG_CHECK(n <= size, "bench backend on ", n, " ranks, but only ", size,
                        " were started");
  if (n == size) return factory(ctx);
  if (ctx.world->rank() >= n) return std::make_unique<SitOutBenchOp>();
  std::vector<int> members;
  for (int r = 0; r < n; ++r) members.push_back(r);
  BenchOpContext sub{ctx.cfg, std::make_shared<SubComm>(ctx.world, members), ctx.device};
  try {
    return factory(sub);
  } catch (const ConfigError& e) {  // its "N ranks were started" are the op's, not the job's
    throw ConfigError(
        detail::concat("bench op on the first ", n, " of ", size, " ranks (@", n, "): ", e.what()));
  }
}

std::vector<std::vector<double>> gather_to_root(Comm& world, const std::vector<double>& values,
                                                int tag) {
  const Seconds timeout = world.timeout();
  std::vector<std::vector<double>> all;
  if (world.rank() != 0) {
    world.send(values.data(), values.size() * sizeof(double), 0, tag, timeout);
    return all;
  }
  all.push_back(values);
  for (int r = 1; r < world.size(); ++r) {
    std::vector<double> v(values.size());
    recv_exact(world, v.data(), v.size() * sizeof(double), r, tag, timeout,
               detail::concat("its ", v.size(), " values of a bench row"));
    all.push_back(std::move(v));
  }
  return all;
}

}  // namespace starring
