// Sharded step benchmark (#13): clip + AdamW on GPT-2 small's 148 tensors (124M parameters),
//   mpiexec --oversubscribe --allow-run-as-root -np 2 build/bench/shard_bench
// times, in alternation in one job, (a) every process stepping its slice of every tensor with
// one thread and the reductions completed over MPI, and (b) process 0 alone stepping the whole
// model with as many threads as there are processes (the others wait). It reports the step time
// ratio and the share of the sharded step spent in the all-reduce.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "api/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

// Times every all-reduce of the communicator it wraps.
class Timed final : public optjit::Communicator {
 public:
  explicit Timed(std::shared_ptr<optjit::Communicator> c) : c_(std::move(c)) {}
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  std::string name() const override { return c_->name(); }
  optjit::Status allreduce_sum(std::span<double> data) override {
    const auto t0 = Clock::now();
    auto s = c_->allreduce_sum(data);
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return s;
  }
  double seconds = 0;

 private:
  std::shared_ptr<optjit::Communicator> c_;
};

std::vector<optjit::GlobalTensor> gpt2_small() {
  std::vector<optjit::GlobalTensor> t = {{"wte", 50257LL * 768}, {"wpe", 1024LL * 768}};
  for (int l = 0; l < 12; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    for (auto [n, k] : std::vector<std::pair<const char*, int64_t>>{{"ln_1.w", 768},
                                                                    {"ln_1.b", 768},
                                                                    {"attn.c_attn.w", 768LL * 2304},
                                                                    {"attn.c_attn.b", 2304},
                                                                    {"attn.c_proj.w", 768LL * 768},
                                                                    {"attn.c_proj.b", 768},
                                                                    {"ln_2.w", 768},
                                                                    {"ln_2.b", 768},
                                                                    {"mlp.c_fc.w", 768LL * 3072},
                                                                    {"mlp.c_fc.b", 3072},
                                                                    {"mlp.c_proj.w", 3072LL * 768},
                                                                    {"mlp.c_proj.b", 768}})
      t.push_back({p + n, k});
  }
  t.push_back({"ln_f.w", 768});
  t.push_back({"ln_f.b", 768});
  return t;
}

struct Model {
  std::vector<std::vector<float>> p, g;
  std::vector<optjit::Param> params;
  std::vector<const void*> grads;
  std::vector<int64_t> offsets;
};

Model slice(const std::vector<optjit::GlobalTensor>& ts, int P, int rank) {
  Model m;
  for (const auto& t : ts) {
    const int64_t a = t.numel * rank / P, b = t.numel * (rank + 1) / P;
    m.p.emplace_back(static_cast<size_t>(b - a), 0.01f);
    m.g.emplace_back(static_cast<size_t>(b - a), 1e-3f);
    m.offsets.push_back(a);
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    m.params.push_back(
        {ts[i].name, m.p[i].data(), optjit::DType::f32, {static_cast<int64_t>(m.p[i].size())}});
    m.grads.push_back(m.g[i].data());
  }
  return m;
}

}  // namespace

int main() {
  auto mpi = optjit::mpi_communicator();
  if (!mpi) {
    std::fprintf(stderr, "%s\n", mpi.error().message.c_str());
    return 1;
  }
  auto timed = std::make_shared<Timed>(*mpi);
  const int P = timed->size(), me = timed->rank();
  const char* pipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, weight_decay=0.01))";
  const auto tensors = gpt2_small();
  Model mine = slice(tensors, P, me);
  optjit::OptimizerOptions o;
  o.cpu.threads = 1;
  o.shard = optjit::ShardOptions{timed, tensors, mine.offsets};
  auto sharded = optjit::Optimizer::create(pipeline, mine.params, o);
  if (!sharded) {
    std::fprintf(stderr, "%s\n", sharded.error().message.c_str());
    return 1;
  }
  Model whole;
  std::unique_ptr<optjit::Optimizer> single;
  if (me == 0) {
    whole = slice(tensors, 1, 0);
    optjit::OptimizerOptions w;
    w.cpu.threads = P;
    auto s = optjit::Optimizer::create(pipeline, whole.params, w);
    if (!s) {
      std::fprintf(stderr, "%s\n", s.error().message.c_str());
      return 1;
    }
    single = std::move(*s);
  }
  const int reps = 7, steps = 3;
  std::vector<double> ts, tw;
  std::vector<double> ar;
  for (int r = 0; r <= reps; ++r) {  // the first round warms up
    std::vector<double> z(1, 0.0);
    (void)timed->allreduce_sum(z);  // a barrier
    timed->seconds = 0;
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s)
      if (!(*sharded)->step(mine.grads)) return 1;
    const double sharded_s = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
    const double reduce_s = timed->seconds / steps;
    (void)timed->allreduce_sum(z);
    double single_s = 0;
    if (me == 0) {
      t0 = Clock::now();
      for (int s = 0; s < steps; ++s)
        if (!single->step(whole.grads)) return 1;
      single_s = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
    }
    if (r > 0) ts.push_back(sharded_s), tw.push_back(single_s), ar.push_back(reduce_s);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (me == 0) {
    int64_t n = 0;
    for (const auto& t : tensors) n += t.numel;
    std::printf("clip + AdamW, GPT-2 small (%lld parameters, %zu tensors), median of %d x %d\n",
                static_cast<long long>(n), tensors.size(), reps, steps);
    std::printf("%d processes x 1 thread (sharded): %8.2f ms/step, all-reduce %.3f ms (%.2f%%)\n",
                P, median(ts) * 1e3, median(ar) * 1e3, 100 * median(ar) / median(ts));
    std::printf("1 process x %d threads (whole):     %8.2f ms/step\n", P, median(tw) * 1e3);
    std::printf("sharded / whole step time: %.3f\n", median(ts) / median(tw));
  }
  return 0;
}
