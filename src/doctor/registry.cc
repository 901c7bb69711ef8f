// The registry: every detector, once, in the order they judge a step (the order matters:
// the non-finite forensics run first, and a finding's first reporter writes its summary).
// A detector declares what it emits and needs (Detector::spec()); not_checked is derived.
#include "doctor/doctor.h"

namespace trainscope::doctor {

std::vector<std::unique_ptr<Detector>> MakeDetectors(const DoctorOptions& o) {
  std::vector<std::unique_ptr<Detector>> all;
  all.push_back(std::make_unique<NonFiniteDetector>(o.nonfinite));
  all.push_back(std::make_unique<LabelRangeDetector>());
  all.push_back(std::make_unique<EarlyBlowupDetector>(o.early_blowup));
  all.push_back(std::make_unique<LossSpikeDetector>(o.loss_spike));
  all.push_back(std::make_unique<LossDivergenceDetector>(o.divergence));
  all.push_back(std::make_unique<LossPlateauDetector>(o.plateau));
  all.push_back(std::make_unique<LossOscillationDetector>(o.oscillation));
  all.push_back(std::make_unique<NegativeLossDetector>(o.negative_loss));
  all.push_back(std::make_unique<LossMagnitudeDetector>(o.loss_magnitude));
  all.push_back(std::make_unique<TargetLeakDetector>(o.target_leak));
  all.push_back(std::make_unique<OverfittingDetector>(o.overfitting));
  all.push_back(std::make_unique<NonfiniteMetricDetector>());
  all.push_back(std::make_unique<ChanceLevelDetector>());
  all.push_back(std::make_unique<MetricStallDetector>(o.metric_stall));
  all.push_back(std::make_unique<MetricImbalanceDetector>(o.metric_imbalance));
  all.push_back(std::make_unique<GradExplosionDetector>(o.grad_explosion));
  all.push_back(std::make_unique<GradVanishingDetector>(o.grad_vanishing));
  all.push_back(std::make_unique<GradNotZeroedDetector>(o.grad_not_zeroed));
  all.push_back(std::make_unique<UpdateRatioDetector>(o.update_ratio));
  all.push_back(std::make_unique<WeightSymmetryDetector>(o.weight_symmetry));
  all.push_back(std::make_unique<NormScaleDetector>(o.norm_scale));
  all.push_back(std::make_unique<LrAnomalyDetector>(o.lr_anomaly));
  all.push_back(std::make_unique<DeadUnitsDetector>(o.dead_units));
  all.push_back(std::make_unique<SaturationDetector>(o.saturation));
  all.push_back(std::make_unique<ActivationDriftDetector>(o.activation_drift));
  all.push_back(std::make_unique<InputScaleDetector>(o.input_scale));
  all.push_back(std::make_unique<BatchNormBatchDetector>(o.batchnorm_batch));
  all.push_back(std::make_unique<DataloaderDetector>(o.dataloader));
  all.push_back(std::make_unique<PageFaultDetector>(o.page_faults));
  all.push_back(std::make_unique<MemoryLeakDetector>(o.memory_leak));
  all.push_back(std::make_unique<ThroughputDetector>(o.throughput));
  all.push_back(std::make_unique<Fp16OverflowDetector>(o.fp16_overflow));
#ifdef TRAINSCOPE_WITH_NUMERICS
  all.push_back(std::make_unique<PrecisionFitDetector>(o.precision_fit));
#endif
  all.push_back(std::make_unique<DuplicateStepsDetector>());
  all.push_back(std::make_unique<RunExitDetector>());
  return all;
}

}  // namespace trainscope::doctor
