// trainscope for LibTorch: watch a torch::nn::Module and its torch::optim::Optimizer from
// C++, into the same run store the Python client and the CLI use.
//
//   trainscope::TorchRun run({.logdir = "runs", .name = "mnist-cpp"});
//   run.Watch(*model, optimizer);
//   for (auto& batch : *loader) {          // or: { auto wait = run.Phase("data"); ... }
//     optimizer.zero_grad(); run.MarkZeroGrad();
//     auto loss = ...; loss.backward();
//     run.Step();                          // statistics, then optimizer.step(), then updates
//     run.Log("train/loss", loss.item<double>());  // still this step
//   }
//   run.Finish();
//
// What it records (tags as in DESIGN.md): grad/<param> and weight/<param>, update/<param>
// (TensorStats), update_ratio/<param>, grad/global_norm, grad_units/<param> (row norms every
// histograms_every steps), opt/lr (or opt/lr/<group>), train/grad_zeroed, guard/skipped_step
// with guard on, time/<phase> and spans for the phases timed with Phase() and for the
// optimizer, time/step, mem/rss, and the sys/* metrics of the sampler thread. Activations
// are not seen: LibTorch modules have no forward hooks.
//
// Statistics of CPU tensors are computed in one pass over their memory; tensors on a device
// are reduced there and copied to the host once per step. Nothing here throws into the
// training after construction: a failure is reported once on stderr and recording of that
// part stops. The constructor throws std::runtime_error when the run cannot be created.
// A TorchRun is used from one thread.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

namespace trainscope {

class TorchRun {
 public:
  struct Options {
    std::string logdir = "runs";
    std::string name;                 // empty: made from the start time
    std::string config_json = "{}";
    // With TRAINSCOPE_SERVER (and TRAINSCOPE_TOKEN) set, the run is also forwarded to that team
    // server under this project (empty: TRAINSCOPE_PROJECT) as it is written (docs/server.md).
    std::string project;
    int every = 1;                    // gradient statistics, lr: every N optimizer steps
    int histograms_every = 100;       // exponent histograms and per-unit norms
    int weights_every = 10;           // weight and update statistics
    bool guard = false;               // skip optimizer steps with non-finite gradients
    double system_interval = 5.0;     // seconds between sys/* samples; 0: off
  };

  explicit TorchRun(const Options& options);
  ~TorchRun();  // Finish() unless finished
  TorchRun(const TorchRun&) = delete;
  TorchRun& operator=(const TorchRun&) = delete;

  // The model's named parameters and the optimizer (not owned; must outlive the run or
  // the next Watch()).
  void Watch(torch::nn::Module& model, torch::optim::Optimizer& optimizer);

  // Gradient statistics, lr and grad_zeroed, then optimizer.step() (unless guard skips
  // it), then weight and update statistics; ends the step.
  void Step();
  // Tells the run that gradients were zeroed since the last Step().
  void MarkZeroGrad() {
    Begin();
    zeroed_ = true;
  }

  // At the current step: a Log() after Step() still belongs to the step Step() ended; the
  // next step begins with the next Phase(), MarkZeroGrad() or Step().
  void Log(const std::string& tag, double value);

  // Times a phase ("data", "forward", "backward", ...) of the current step until the
  // returned object goes out of scope.
  class PhaseTimer {
   public:
    PhaseTimer(TorchRun* run, std::string phase);
    ~PhaseTimer();
    PhaseTimer(PhaseTimer&& other) noexcept;
    PhaseTimer(const PhaseTimer&) = delete;

   private:
    TorchRun* run_;
    std::string phase_;
    double wall_;
    std::chrono::steady_clock::time_point start_;
  };
  PhaseTimer Phase(std::string phase) { return PhaseTimer(this, std::move(phase)); }

  int64_t step() const { return step_; }
  const std::string& run_dir() const;

  // Flushes and closes the run ("finished").
  void Finish();

 private:
  struct State;
  void AddPhase(const std::string& phase, double wall, double seconds);
  void Fail(const char* part, const std::string& what);
  bool Due(int every) const { return every > 0 && step_ % every == 0; }
  void Begin();  // starts the next step if Step() ended the last one
  // The parts of Step(): the gradients' statistics (true when guard mode skips the step),
  // grad_zeroed, the lr and the weights' snapshot, the weights and updates after the step,
  // the step's times and memory.
  bool LogGradients(int64_t step);
  void LogOptimizerState(int64_t step);
  void LogWeights(int64_t step);
  void EndStep(int64_t step);

  std::unique_ptr<State> state_;
  int64_t step_ = 0;
  bool pending_ = false;
  bool zeroed_ = true;
};

}  // namespace trainscope
