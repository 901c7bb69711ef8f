// The registry: every detector, once, in the order they judge a step (the order matters:
// the non-finite forensics run first, and a finding's first reporter writes its summary).
// A detector declares what it emits and needs (Detector::spec()); not_checked is derived.
// Each is built with its own thresholds (its Options' defaults). A detector that no other
// file names needs no header: its .cc holds its class and defines its factory
// (`std::unique_ptr<Detector> MakeFooDetector()`), declared below, before the list.
#include "doctor/detectors/activations.h"
#include "doctor/detectors/early_steps.h"
#include "doctor/detectors/gradients.h"
#include "doctor/detectors/loss_curve.h"
#include "doctor/detectors/nonfinite.h"
#include "doctor/detectors/numerics.h"
#include "doctor/detectors/system.h"
#include "doctor/detectors/target_leak.h"
#include "doctor/detectors/validation.h"
#include "doctor/doctor.h"

namespace trainscope::doctor {

std::unique_ptr<Detector> MakeDuplicateStepsDetector();  // log_quality.cc
std::unique_ptr<Detector> MakeRunExitDetector();         // log_quality.cc

std::vector<std::unique_ptr<Detector>> MakeDetectors(const DoctorOptions&) {
  std::vector<std::unique_ptr<Detector>> all;
  all.push_back(std::make_unique<NonFiniteDetector>());
  all.push_back(std::make_unique<LabelRangeDetector>());
  all.push_back(std::make_unique<EarlyBlowupDetector>());
  all.push_back(std::make_unique<LossSpikeDetector>());
  all.push_back(std::make_unique<LossDivergenceDetector>());
  all.push_back(std::make_unique<LossPlateauDetector>());
  all.push_back(std::make_unique<LossOscillationDetector>());
  all.push_back(std::make_unique<NegativeLossDetector>());
  all.push_back(std::make_unique<LossMagnitudeDetector>());
  all.push_back(std::make_unique<TargetLeakDetector>());
  all.push_back(std::make_unique<OverfittingDetector>());
  all.push_back(std::make_unique<NonfiniteMetricDetector>());
  all.push_back(std::make_unique<ChanceLevelDetector>());
  all.push_back(std::make_unique<MetricStallDetector>());
  all.push_back(std::make_unique<MetricImbalanceDetector>());
  all.push_back(std::make_unique<GradExplosionDetector>());
  all.push_back(std::make_unique<GradVanishingDetector>());
  all.push_back(std::make_unique<GradNotZeroedDetector>());
  all.push_back(std::make_unique<UpdateRatioDetector>());
  all.push_back(std::make_unique<WeightSymmetryDetector>());
  all.push_back(std::make_unique<NormScaleDetector>());
  all.push_back(std::make_unique<LrAnomalyDetector>());
  all.push_back(std::make_unique<DeadUnitsDetector>());
  all.push_back(std::make_unique<SaturationDetector>());
  all.push_back(std::make_unique<ActivationDriftDetector>());
  all.push_back(std::make_unique<InputScaleDetector>());
  all.push_back(std::make_unique<BatchNormBatchDetector>());
  all.push_back(std::make_unique<DataloaderDetector>());
  all.push_back(std::make_unique<PageFaultDetector>());
  all.push_back(std::make_unique<MemoryLeakDetector>());
  all.push_back(std::make_unique<ThroughputDetector>());
  all.push_back(std::make_unique<Fp16OverflowDetector>());
#ifdef TRAINSCOPE_WITH_NUMERICS
  all.push_back(std::make_unique<PrecisionFitDetector>());
#endif
  all.push_back(MakeDuplicateStepsDetector());
  all.push_back(MakeRunExitDetector());
  return all;
}

}  // namespace trainscope::doctor
