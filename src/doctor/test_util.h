// Helpers for the doctor's unit tests: synthetic series fed through a Doctor that runs
// only the detector under test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "doctor/doctor.h"

namespace trainscope::doctor::testing {

// Statistics of `n` normal values with the given mean and standard deviation (seeded).
inline TensorStats Normal(size_t n, double mean, double sd, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(mean, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return ComputeTensorStats(v.data(), v.size(), false);
}

// Statistics of values with a given RMS (so l2 = rms * sqrt(n)).
inline TensorStats WithRms(size_t n, double rms, uint32_t seed = 1) {
  TensorStats s = Normal(n, 0, 1, seed);
  const double scale = rms / std::sqrt(s.sum_squares / static_cast<double>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng) * scale;
  return ComputeTensorStats(v.data(), v.size(), false);
}

inline TensorStats WithNonFinite(TensorStats s, uint64_t nan, uint64_t inf = 0) {
  s.numel += nan + inf;
  s.nan += nan;
  s.inf += inf;
  return s;
}

class Feed {
 public:
  explicit Feed(std::set<std::string> only, DoctorOptions options = {}) {
    options.only = std::move(only);
    options.streaming = true;
    doctor_ = std::make_unique<Doctor>(std::move(options));
  }
  void Meta(const std::string& k, const std::string& v) { doctor_->OnMeta(k, v); }
  void Scalar(const std::string& tag, int64_t step, double v) { doctor_->OnScalar(tag, step, 0, v); }
  void Stats(const std::string& tag, int64_t step, const TensorStats& s) { doctor_->OnTensorStats(tag, step, 0, s); }
  void Vector(const std::string& tag, int64_t step, const std::vector<float>& v) { doctor_->OnVector(tag, step, 0, v); }
  void Span(int64_t step, const std::string& phase, double duration) {
    doctor_->OnSpan({step, phase, static_cast<double>(step), duration});
  }
  std::vector<Finding> Finish() {
    doctor_->Finish();
    return doctor_->findings();
  }
  Doctor& doctor() { return *doctor_; }

 private:
  std::unique_ptr<Doctor> doctor_;
};

inline const Finding* FindCode(const std::vector<Finding>& findings, const std::string& code) {
  for (const auto& f : findings) {
    if (f.code == code) return &f;
  }
  return nullptr;
}

// Findings at warning or critical.
inline size_t Alarms(const std::vector<Finding>& findings) {
  size_t n = 0;
  for (const auto& f : findings) n += f.severity >= Severity::kWarning;
  return n;
}

// A noisy decaying loss: what a healthy small-batch run looks like.
inline double HealthyLoss(int64_t step, std::mt19937& rng, double noise = 0.15) {
  std::lognormal_distribution<double> mult(0, noise);
  return (2.3 * std::exp(-static_cast<double>(step) / 150.0) + 0.1) * mult(rng);
}

}  // namespace trainscope::doctor::testing

namespace trainscope::doctor::testing {

// A healthy run with every kind of sample: noisy decaying loss, val loss every 20 steps,
// an MLP's gradients/weights/updates/activations, timings and flat memory.
inline void HealthyRun(Feed& feed, int64_t steps, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 1);
  feed.Meta("config", R"({"num_classes": 10})");
  const char* layers[] = {"fc1", "fc2", "fc3"};
  for (int64_t s = 0; s < steps; ++s) {
    for (int i = 0; i < 3; ++i) {
      TensorStats a = Normal(256, 0.3, 0.5 + 0.01 * i, seed + static_cast<uint32_t>(s * 7 + i));
      a.dead_fraction = 0.05 + 0.02 * std::fabs(noise(rng));
      feed.Stats(std::string("act/") + layers[i], s, a);
    }
    feed.Scalar("train/loss", s, HealthyLoss(s, rng));
    feed.Scalar("opt/lr", s, 0.05);
    for (int i = 0; i < 3; ++i) {
      const std::string p = std::string(layers[i]) + ".weight";
      const double g = 0.05 * std::exp(0.3 * noise(rng));
      feed.Stats("grad/" + p, s, WithRms(512, g, seed + static_cast<uint32_t>(s * 13 + i)));
      feed.Stats("weight/" + p, s, WithRms(512, 0.1, seed + static_cast<uint32_t>(i)));
      feed.Stats("update/" + p, s, WithRms(512, 0.05 * g, seed + static_cast<uint32_t>(s * 17 + i)));
    }
    feed.Scalar("train/grad_zeroed", s, 1);
    feed.Scalar("time/data", s, 0.002 * std::exp(0.2 * noise(rng)));
    feed.Scalar("time/step", s, 0.02 * std::exp(0.1 * noise(rng)));
    feed.Scalar("mem/rss", s, 500e6 + 1e6 * noise(rng));
    if (s % 20 == 19) {
      feed.Scalar("val/loss", s, HealthyLoss(s, rng, 0.03) * 1.1);
      feed.Scalar("val/acc", s, 0.9 - 0.6 * std::exp(-static_cast<double>(s) / 150.0));
    }
  }
}

}  // namespace trainscope::doctor::testing
