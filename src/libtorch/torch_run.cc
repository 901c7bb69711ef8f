// The LibTorch client (include/trainscope/torch.h): the C++ twin of python/trainscope/watch.py.
#include "trainscope/torch.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/tag.h"
#include "recorder/recorder.h"
#ifdef TRAINSCOPE_WITH_FORWARD
#include "forward/forwarder.h"
#endif
#include "watch/run_facts.h"
#include "watch/system_sampler.h"
#include "watch/tensor_passes.h"
#ifdef TRAINSCOPE_WITH_DOCTOR
#include "doctor/online_doctor.h"
#endif

namespace trainscope {

namespace {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool DTypeOf(const torch::Tensor& t, watch::DType* dtype) {
  switch (t.scalar_type()) {
    case torch::kFloat: *dtype = watch::DType::kFloat32; return true;
    case torch::kDouble: *dtype = watch::DType::kFloat64; return true;
    case torch::kHalf: *dtype = watch::DType::kFloat16; return true;
    case torch::kBFloat16: *dtype = watch::DType::kBFloat16; return true;
    default: return false;
  }
}

// Statistics of a tensor on a device: reductions there, then one small copy.
TensorStats DeviceStats(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  auto x = t.reshape({-1});
  auto finite = torch::isfinite(x);
  auto xf = torch::where(finite, x, torch::zeros({}, x.options())).to(torch::kDouble);
  const double inf = std::numeric_limits<double>::infinity();
  auto packed = torch::stack({torch::isnan(x).sum().to(torch::kDouble), torch::isinf(x).sum().to(torch::kDouble),
                              x.eq(0).sum().to(torch::kDouble),
                              torch::where(finite, xf, torch::full({}, inf, xf.options())).min(),
                              torch::where(finite, xf, torch::full({}, -inf, xf.options())).max(), xf.sum(),
                              (xf * xf).sum()})
                    .to(torch::kCPU);
  auto v = packed.accessor<double, 1>();
  return TensorStatsFromReductions(static_cast<uint64_t>(x.numel()), v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
}

}  // namespace

struct TorchRun::State {
  std::unique_ptr<Recorder> recorder;
  std::unique_ptr<watch::SystemSampler> sampler;
  Options options;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  torch::optim::Optimizer* optimizer = nullptr;
  std::map<std::string, torch::Tensor> snapshots;
  int64_t snapshot_step = -2;
  std::map<std::string, uint32_t> ids;
  std::map<std::string, double> phase_seconds;
  std::chrono::steady_clock::time_point step_started = std::chrono::steady_clock::now();
  std::set<std::string> failed;
  bool finished = false;

  uint32_t Id(const std::string& tag, SeriesKind kind) {
    auto it = ids.find(tag);
    if (it != ids.end()) return it->second;
    uint32_t id = 0;
    Status s = recorder->Series(tag, kind, &id);
    if (!s.ok()) throw std::runtime_error(s.message());
    ids.emplace(tag, id);
    return id;
  }
  void Scalar(const std::string& tag, int64_t step, double value) {
    recorder->LogScalar(Id(tag, SeriesKind::kScalar), step, value);
  }
};

TorchRun::TorchRun(const Options& options) : state_(new State) {
  state_->options = options;
  Recorder::Options r;
  r.logdir = options.logdir;
  r.name = options.name;
  r.config_json = options.config_json;
  r.command_line = "libtorch";
  r.extra_meta["client"] = "libtorch";
  r.extra_meta["torch_version"] = TORCH_VERSION;
  r.host = HostName();
  r.git_commit = GitCommit(".");
#ifdef TRAINSCOPE_WITH_DOCTOR
  r.observers.push_back(std::make_shared<doctor::OnlineDoctor>());  // judged while it trains
#endif
#ifdef TRAINSCOPE_WITH_FORWARD
  if (ForwardTarget target = ForwardTargetFromEnvironment(options.project, ""); !target.server.empty()) {
    r.observers.push_back(std::make_shared<Forwarder>(std::move(target)));
  }
#endif
  Status s = Recorder::Open(r, &state_->recorder);
  if (!s.ok()) throw std::runtime_error("trainscope: " + s.message());
  if (options.system_interval > 0) {
    state_->sampler = std::make_unique<watch::SystemSampler>(state_->recorder.get(), options.system_interval);
  }
}

TorchRun::~TorchRun() { Finish(); }

const std::string& TorchRun::run_dir() const { return state_->recorder->run_dir(); }

void TorchRun::Fail(const char* part, const std::string& what) {
  if (state_->failed.insert(part).second) {
    std::fprintf(stderr, "trainscope: %s failed and is switched off; training goes on (%s)\n", part, what.c_str());
  }
}

void TorchRun::Watch(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  state_->params.clear();
  for (const auto& item : model.named_parameters()) {
    if (item.value().requires_grad()) state_->params.emplace_back(item.key(), item.value());
  }
  state_->optimizer = &optimizer;
  state_->snapshots.clear();
}

void TorchRun::Log(const std::string& tag, double value) {
  try {
    state_->Scalar(tag, step_, value);
  } catch (const std::exception& e) {
    Fail("log", e.what());
  }
}

void TorchRun::AddPhase(const std::string& phase, double wall, double seconds) {
  state_->recorder->LogSpan(Span{step_, phase, wall, seconds});
  state_->phase_seconds[phase] += seconds;
}

void TorchRun::Begin() {
  if (!pending_) return;
  pending_ = false;
  ++step_;
  if (state_->sampler) state_->sampler->SetStep(step_);
}

TorchRun::PhaseTimer::PhaseTimer(TorchRun* run, std::string phase)
    : run_(run), phase_(std::move(phase)), wall_(WallNow()), start_(std::chrono::steady_clock::now()) {
  run_->Begin();
}
TorchRun::PhaseTimer::PhaseTimer(PhaseTimer&& other) noexcept
    : run_(other.run_), phase_(std::move(other.phase_)), wall_(other.wall_), start_(other.start_) {
  other.run_ = nullptr;
}
TorchRun::PhaseTimer::~PhaseTimer() {
  if (!run_) return;
  run_->AddPhase(phase_, wall_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

void TorchRun::Step() {
  Begin();
  const int64_t step = step_;
  const bool skip = LogGradients(step);
  LogOptimizerState(step);
  State& st = *state_;
  if (skip) {
    st.Scalar(tags::kGuardSkippedStep, step, 1.0);
    std::fprintf(stderr, "trainscope: guard skipped optimizer step %lld: non-finite gradients\n",
                 static_cast<long long>(step));
  } else {
    {
      auto timer = Phase("optimizer");
      st.optimizer->step();
    }
    if (st.options.guard) st.Scalar(tags::kGuardSkippedStep, step, 0.0);
    if (Due(st.options.weights_every) && !st.failed.count("weights")) LogWeights(step);
  }
  EndStep(step);
  zeroed_ = false;
  pending_ = true;
}

bool TorchRun::LogGradients(int64_t step) {
  State& st = *state_;
  if (st.failed.count("gradients") || !(Due(st.options.every) || st.options.guard)) return false;
  try {
    torch::NoGradGuard no_grad;
    const bool histogram = Due(st.options.histograms_every);
    double sum_squares = 0;
    uint64_t nonfinite = 0, nan = 0;
    std::vector<float> norms;
    for (auto& [name, p] : st.params) {
      const torch::Tensor& grad = p.grad();
      watch::DType dtype;
      if (!grad.defined() || grad.is_sparse() || !DTypeOf(grad, &dtype)) continue;
      TensorStats s;
      if (grad.is_cpu()) {
        const torch::Tensor g = grad.contiguous();
        if (histogram && g.dim() >= 2) {
          s = watch::StatsWithRowNorms(g.data_ptr(), static_cast<size_t>(g.size(0)),
                                       static_cast<size_t>(g.numel() / std::max<int64_t>(1, g.size(0))), dtype, true,
                                       &norms);
          st.recorder->LogVector(st.Id(tags::kGradUnits.Of(name), SeriesKind::kVector), step, norms);
        } else {
          s = watch::StatsOf(g.data_ptr(), static_cast<size_t>(g.numel()), dtype, histogram);
        }
      } else {
        s = DeviceStats(grad);
      }
      sum_squares += s.sum_squares;
      nonfinite += s.nan + s.inf;
      nan += s.nan;
      st.recorder->LogTensorStats(st.Id(tags::kGrad.Of(name), SeriesKind::kTensorStats), step, s);
    }
    st.Scalar(tags::kGradGlobalNorm, step,
              nan ? std::nan("") : (nonfinite ? std::numeric_limits<double>::infinity() : std::sqrt(sum_squares)));
    return st.options.guard && nonfinite > 0;
  } catch (const std::exception& e) {
    Fail("gradients", e.what());
    return false;
  }
}

void TorchRun::LogOptimizerState(int64_t step) {
  State& st = *state_;
  try {
    if (Due(st.options.every)) {
      st.Scalar(tags::kTrainGradZeroed, step, zeroed_ ? 1.0 : 0.0);
      auto& groups = st.optimizer->param_groups();
      for (size_t i = 0; i < groups.size(); ++i) {
        st.Scalar(groups.size() == 1 ? tags::kOptLr : std::string(tags::kOptLr) + "/" + std::to_string(i), step, groups[i].options().get_lr());
      }
    }
    if (Due(st.options.weights_every) && st.snapshot_step != step - 1) {
      torch::NoGradGuard no_grad;
      for (auto& [name, p] : st.params) st.snapshots[name] = p.detach().clone().contiguous();
    }
  } catch (const std::exception& e) {
    Fail("optimizer state", e.what());
  }
}

void TorchRun::LogWeights(int64_t step) {
  State& st = *state_;
  try {
    torch::NoGradGuard no_grad;
    const bool histogram = Due(st.options.histograms_every);
    for (auto& [name, p] : st.params) {
      auto it = st.snapshots.find(name);
      watch::DType dtype;
      if (it == st.snapshots.end() || !DTypeOf(p, &dtype)) continue;
      TensorStats w, u;
      if (p.is_cpu() && p.is_contiguous()) {
        watch::WeightAndUpdateStats(p.data_ptr(), it->second.data_ptr(), static_cast<size_t>(p.numel()), dtype,
                                    histogram, &w, &u);
      } else {
        w = DeviceStats(p);
        u = DeviceStats(p - it->second);
        it->second.copy_(p);
      }
      st.recorder->LogTensorStats(st.Id(tags::kWeight.Of(name), SeriesKind::kTensorStats), step, w);
      st.recorder->LogTensorStats(st.Id(tags::kUpdate.Of(name), SeriesKind::kTensorStats), step, u);
      st.Scalar(tags::kUpdateRatio.Of(name), step, w.l2_norm() > 0 ? u.l2_norm() / w.l2_norm() : 0.0);
    }
    st.snapshot_step = step;
  } catch (const std::exception& e) {
    Fail("weights", e.what());
  }
}

// The step's times and memory; the next step begins at the next Phase(), MarkZeroGrad() or Step().
void TorchRun::EndStep(int64_t step) {
  State& st = *state_;
  try {
    const auto now = std::chrono::steady_clock::now();
    st.Scalar(tags::kTimeStep, step, std::chrono::duration<double>(now - st.step_started).count());
    for (const auto& [phase, seconds] : st.phase_seconds) st.Scalar(tags::kTime.Of(phase), step, seconds);
    st.phase_seconds.clear();
    st.step_started = now;
    // As the Python client: a reading at most kStepRssMaxAgeSeconds old (docs/watch.md, mem/rss).
    st.Scalar(tags::kMemRss, step, static_cast<double>(watch::RecentProcessRssBytes(watch::kStepRssMaxAgeSeconds)));
  } catch (const std::exception& e) {
    Fail("step end", e.what());
  }
}

void TorchRun::Finish() {
  if (!state_ || state_->finished) return;
  state_->finished = true;
  if (state_->sampler) state_->sampler->Stop();
  Status s = state_->recorder->Close("finished", "");
  std::fprintf(stderr, "trainscope: run %s finished after %lld steps -> %s%s\n", state_->recorder->name().c_str(),
               static_cast<long long>(step_ + (pending_ ? 1 : 0)), state_->recorder->run_dir().c_str(),
               s.ok() ? "" : (" (store error: " + s.message() + ")").c_str());
}

}  // namespace trainscope
