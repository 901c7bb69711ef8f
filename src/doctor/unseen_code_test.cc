// Scripts nobody on the team wrote (issue 27): a GAN with two models and optimizers, a VAE,
// an LSTM under LBFGS, a minGPT-style transformer, a classifier with a per-epoch scheduler,
// healthy and with one-line bugs. Each test is a kind of failure seen there, on synthetic
// sample streams.
#include <gtest/gtest.h>

#include "doctor/doctor.h"
#include "doctor/facts.h"
#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using namespace testing;
using json = nlohmann::json;

// Activation statistics are measured on a helper thread and committed a few steps after
// their forward: online they arrive after later steps' scalars. Online and offline must
// agree on the same stream.
TEST(UnseenCode, ActivationDriftOnlineEqualsOffline) {
  DoctorOptions only;
  only.only = {"activation_drift"};
  Feed online({"activation_drift"});
  RunData run;
  std::vector<std::pair<int64_t, TensorStats>> in_flight;
  for (int64_t s = 0; s < 1400; ++s) {
    online.Scalar("train/loss", s, 1.0);
    run.OnScalar("train/loss", s, 0, 1.0);
    if (s % 20 == 0) {
      const double sd = std::exp(5.0 * static_cast<double>(s) / 1400.0);  // std grows ~150x
      in_flight.emplace_back(s, Normal(512, 0, sd, static_cast<uint32_t>(s + 1)));
    }
    // Committed three steps after its forward.
    while (!in_flight.empty() && in_flight.front().first + 3 <= s) {
      online.Stats("act/fc1", in_flight.front().first, in_flight.front().second);
      run.OnTensorStats("act/fc1", in_flight.front().first, 0, in_flight.front().second);
      in_flight.erase(in_flight.begin());
    }
  }
  const auto live = online.Finish();
  const auto offline = Diagnose(run, only).findings;
  ASSERT_EQ(offline.size(), 1u);
  ASSERT_EQ(live.size(), offline.size());
  EXPECT_EQ(live[0].code, offline[0].code);
  EXPECT_EQ(live[0].location, offline[0].location);
  EXPECT_EQ(live[0].severity, offline[0].severity);
}

// DUPLICATE_STEPS speaks about the user's series, never about those trainscope writes.
TEST(UnseenCode, DuplicateStepsNeverAboutTrainscopesOwnSeries) {
  RunData run;
  for (int64_t s = 0; s < 100; ++s) {
    run.OnScalar("train/loss", s, 0, 1.0);
    // An evaluation pass at the step's end: the watcher's timings and memory twice.
    run.OnScalar("time/step", s, 0, 0.02);
    run.OnScalar("mem/rss", s, 0, 5e8);
    run.OnScalar("train/grad_zeroed", s, 0, 1);
    run.OnScalar("opt/lr", s, 0, 1e-3);
    if (s % 10 == 0) {
      run.OnScalar("time/step", s, 0, 0.5);
      run.OnScalar("mem/rss", s, 0, 6e8);
      run.OnScalar("train/grad_zeroed", s, 0, 0);
      run.OnScalar("opt/lr", s, 0, 5e-4);
    }
  }
  EXPECT_EQ(FindCode(Diagnose(run).findings, "DUPLICATE_STEPS"), nullptr);
}

constexpr const char* kTwoModels =
    R"([{"name": "", "class": "Generator", "optimizer": "Adam", "params": 4, "tensors": 4},
        {"name": "D", "class": "Discriminator", "optimizer": "Adam", "params": 4, "tensors": 4}])";

// Each model's train/<model>/grad_zeroed on its own: the discriminator's forgotten
// zero_grad is found, at the discriminator, while the generator's is fine.
TEST(UnseenCode, GradNotZeroedPerModel) {
  Feed feed({"grad_not_zeroed"});
  feed.Meta("models", kTwoModels);
  for (int64_t s = 0; s < 30; ++s) {
    feed.Scalar("train/grad_zeroed", s, 1);
    feed.Scalar("train/D/grad_zeroed", s, 0);
  }
  const auto f = feed.Finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "GRAD_NOT_ZEROED");
  EXPECT_EQ(f[0].location, "D");
  EXPECT_TRUE(feed.doctor().facts().has_grad_zeroed);
}

// A GAN: the discriminator's loss rises from 0.49 to 0.95 as the generator learns, the
// generator's falls. Two adversaries, not one loss that diverges.
TEST(UnseenCode, GanLossesAreNotJudgedAsProgress) {
  Feed feed({});
  feed.Meta("models", kTwoModels);
  std::mt19937 rng(4);
  std::normal_distribution<double> n(0, 0.03);
  for (int64_t s = 0; s < 600; ++s) {
    const double t = static_cast<double>(s) / 600.0;
    feed.Scalar("loss_D", s, 0.49 + 0.46 * t + n(rng));
    feed.Scalar("loss_G", s, 3.0 - 2.0 * t + n(rng));
    if (s == 400) feed.Scalar("loss_D", s, 2.5);  // the generator's good batch
  }
  const auto f = feed.Finish();
  for (const char* code : {"LOSS_DIVERGENCE", "LOSS_SPIKE", "LOSS_PLATEAU", "LOSS_OSCILLATION"}) {
    EXPECT_EQ(FindCode(f, code), nullptr) << code;
  }
  bool said = false;
  for (const auto& nc : feed.doctor().not_checked()) said |= nc.reason.find("several models") != std::string::npos;
  EXPECT_TRUE(said);
}

// WGAN-style: the critic steps five times per generator step; the generator's gradient
// norm is 20x the critic's. Summed into one series that is a 20x jump every fifth step.
TEST(UnseenCode, GradExplosionJudgesEachModelOnItsOwnSeries) {
  Feed feed({"grad_explosion"});
  feed.Meta("models", kTwoModels);
  std::mt19937 rng(6);
  std::lognormal_distribution<double> n(0, 0.1);
  for (int64_t s = 0; s < 300; ++s) {
    if (s % 5 == 4) {
      feed.Stats("grad/main.0.weight", s, WithRms(256, 2.0 * n(rng), static_cast<uint32_t>(s)));
    } else {
      feed.Stats("grad/D/main.0.weight", s, WithRms(256, 0.1 * n(rng), static_cast<uint32_t>(s)));
    }
  }
  const auto f = feed.Finish();
  EXPECT_EQ(FindCode(f, "GRAD_EXPLOSION"), nullptr) << (f.empty() ? "" : f[0].summary);
}

// The same per-model series still finds a real explosion, at the model it happened in.
TEST(UnseenCode, GradExplosionInOneModelIsFoundThere) {
  Feed feed({"grad_explosion"});
  feed.Meta("models", kTwoModels);
  std::mt19937 rng(6);
  std::lognormal_distribution<double> n(0, 0.1);
  for (int64_t s = 0; s < 300; ++s) {
    feed.Stats("grad/main.0.weight", s, WithRms(256, 2.0 * n(rng), static_cast<uint32_t>(s)));
    feed.Scalar("grad/D/global_norm", s, (s == 200 ? 50.0 : 1.0) * n(rng));
  }
  const auto f = feed.Finish();
  const Finding* e = FindCode(f, "GRAD_EXPLOSION");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->location, "grad/D/global_norm");
  EXPECT_EQ(e->step, 200);
}

// ---- A: causes the run's own recorded facts contradict ----

TensorStats Zeros(size_t n) {
  std::vector<double> v(n, 0.0);
  return ComputeTensorStats(v.data(), v.size(), false);
}

bool HasCause(const Finding& f, const std::string& id) {
  return std::any_of(f.causes.begin(), f.causes.end(), [&](const Cause& c) { return c.id == id; });
}

bool AnyActionMentions(const Finding& f, const std::string& lower_phrase) {
  return std::any_of(f.actions.begin(), f.actions.end(),
                     [&](const std::string& a) { return Lower(a).find(lower_phrase) != std::string::npos; });
}

// A float32 layer no optimizer holds: its update is exactly 0 while its gradient is not.
// Not bfloat16's lost updates; a parameter that never changes, because of the optimizer.
std::vector<Finding> FrozenLayerRun(bool with_meta, double lr_at_end = 1e-3, bool stale_fc2_grad = false) {
  Feed feed({"precision_fit"});
  if (with_meta) {
    feed.Meta("param_dtypes", R"({"fc1.weight": "float32", "fc2.weight": "float32"})");
    feed.Meta("unoptimized_params", R"(["fc2.weight"])");
  }
  for (int64_t s = 0; s < 40; ++s) {
    feed.Scalar("opt/lr", s, s < 20 ? 1e-3 : lr_at_end);
    for (const char* p : {"fc1.weight", "fc2.weight"}) {
      const bool frozen = std::string(p) == "fc2.weight" || lr_at_end < 1e-12;
      feed.Stats(std::string("weight/") + p, s, Normal(256, 0, 0.1, 3));
      const bool stale = stale_fc2_grad && std::string(p) == "fc2.weight";
      feed.Stats(std::string("grad/") + p, s, Normal(256, 0, 0.01, static_cast<uint32_t>(stale ? 5 : s + 5)));
      feed.Stats(std::string("update/") + p, s, frozen ? Zeros(256) : Normal(256, 0, 1e-4, static_cast<uint32_t>(s + 9)));
    }
  }
  return feed.Finish();
}

TEST(UnseenCode, AFloat32LayerLeftOutOfTheOptimizerIsNotBf16) {
  for (bool meta : {true, false}) {
    const auto f = FrozenLayerRun(meta);
    EXPECT_EQ(FindCode(f, "BF16_STALE_UPDATE"), nullptr) << meta;
    const Finding* n = FindCode(f, "PARAM_NOT_UPDATED");
    ASSERT_NE(n, nullptr) << meta;
    EXPECT_EQ(n->location, "fc2.weight");
    EXPECT_EQ(n->severity, Severity::kWarning);
    EXPECT_EQ(n->causes.at(0).id, "param_not_in_optimizer");
    EXPECT_FALSE(AnyActionMentions(*n, "master weights"));
  }
}

// The same layer with a .grad that never changes (a frozen teacher watched beside its
// student, its .grad left from its own training): no backward writes it, so a weight that
// stays put has lost nothing.
TEST(UnseenCode, AGradientNoBackwardWritesIsNotAnUpdateLost) {
  const auto f = FrozenLayerRun(true, 1e-3, /*stale_fc2_grad=*/true);
  EXPECT_EQ(FindCode(f, "PARAM_NOT_UPDATED"), nullptr);
  EXPECT_EQ(FindCode(f, "BF16_STALE_UPDATE"), nullptr);
}

TEST(UnseenCode, AnLrDecayedToZeroIsNotBf16EitherAndOnlyInformation) {
  const auto f = FrozenLayerRun(true, 1e-20);
  EXPECT_EQ(FindCode(f, "BF16_STALE_UPDATE"), nullptr);
  const Finding* n = FindCode(f, "PARAM_NOT_UPDATED");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(HasCause(*n, "lr_collapsed"));
}

// StepLR(step_size=1, gamma=0.08) stepped per batch: 1e-3 at step 0, 3.8e-31 by step 25.
TEST(UnseenCode, ACollapsedScheduleIsNamedAndTheLrIsNotToBeRaised) {
  Feed feed({"lr_anomaly", "loss_plateau"});
  feed.Meta("config", R"({"num_classes": 10})");
  std::mt19937 rng(1);
  std::normal_distribution<double> n(0, 0.01);
  for (int64_t s = 0; s < 400; ++s) {
    feed.Scalar("opt/lr", s, 1e-3 * std::pow(0.08, static_cast<double>(std::min<int64_t>(s, 25))));
    feed.Scalar("train/loss", s, 2.30 + n(rng));
  }
  const auto f = feed.Finish();
  const Finding* lr = FindCode(f, "LR_ANOMALY");
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->causes.at(0).id, "lr_schedule_collapsed");
  EXPECT_NE(lr->summary.find("fell from 0.001 at step 0 to "), std::string::npos) << lr->summary;
  EXPECT_EQ(lr->step, 6);  // the first LR below 1e-6 of the maximum
  // Found 10 points later, not 50: the LR had collapsed within 6 points of the start.
  EXPECT_LE(lr->last_step, 16) << lr->summary;
  const Finding* plateau = FindCode(f, "LOSS_PLATEAU");
  ASSERT_NE(plateau, nullptr);
  EXPECT_EQ(plateau->causes.at(0).id, "lr_schedule_collapsed");
  EXPECT_FALSE(HasCause(*plateau, "lr_too_low"));
  EXPECT_FALSE(AnyActionMentions(*plateau, "higher learning rate"));
  EXPECT_FALSE(AnyActionMentions(*plateau, "raise the learning rate"));
  // The root comes first: the collapsed schedule explains the plateau.
  EXPECT_EQ(f.front().code, "LR_ANOMALY");
}

// Cosine annealing to eta_min=0 reaches 1e-6 of its peak only in its last steps: no
// collapse, however long the run (for 20,000 steps, the last 13 points are under 1e-6).
TEST(UnseenCode, ACosineScheduleEndingAtZeroIsNoCollapse) {
  for (int64_t total : {2000, 20000}) {
    Feed feed({"lr_anomaly"});
    for (int64_t s = 0; s <= total; ++s) {
      feed.Scalar("opt/lr", s, 0.5e-3 * (1 + std::cos(M_PI * static_cast<double>(s) / static_cast<double>(total))));
    }
    EXPECT_EQ(FindCode(feed.Finish(), "LR_ANOMALY"), nullptr) << total;
  }
}

// zero_grad() between backward() and step(): every gradient is exactly 0 from the first
// step while the loss is finite and moves; the units are alive and the init is random.
TEST(UnseenCode, GradientsClearedBeforeTheStep) {
  Feed feed({"grad_vanishing"});
  std::mt19937 rng(2);
  std::normal_distribution<double> n(0, 0.05);
  for (int64_t s = 0; s < 60; ++s) {
    feed.Scalar("train/loss", s, 2.3 + n(rng));
    TensorStats act = Normal(256, 0.3, 0.5, static_cast<uint32_t>(s + 1));
    act.dead_fraction = 0.1;
    feed.Stats("act/fc1", s, act);
    for (const char* p : {"fc1.weight", "fc2.weight"}) {
      feed.Stats(std::string("weight/") + p, s, Normal(256, 0, 0.1, 4));
      feed.Stats(std::string("grad/") + p, s, Zeros(256));
    }
  }
  const auto f = feed.Finish();
  const Finding* v = FindCode(f, "GRAD_VANISHING");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->causes.at(0).id, "gradients_cleared_before_step");
  for (const char* gone : {"dying_relu", "constant_init", "saturating_activation"}) {
    EXPECT_FALSE(HasCause(*v, gone)) << gone;
  }
  const auto ev = json::parse(v->evidence_json);
  EXPECT_NE(ev["decided_by"].get<std::string>().find("grads_zero_from_start"), std::string::npos);
}

// pytorch/examples' DDP tutorial (distributed/ddp-tutorial-series): nn.Linear(20, 1) trained
// with F.cross_entropy on its one output column. The softmax of one logit is 1: the loss is
// -0 at every step and every gradient exactly 0. The cause is the loss, not the activations
// (the model has none) nor the init.
TEST(UnseenCode, ALossOverOneColumnIsConstantAndNamedAsTheCause) {
  Feed feed({"grad_vanishing"});
  feed.Meta("module_types", R"({"module": "Linear"})");
  for (int64_t s = 0; s < 40; ++s) {
    feed.Scalar("train/loss", s, -0.0);
    feed.Stats("weight/module.weight", s, Normal(20, 0, 0.2, 4));
    feed.Stats("grad/module.weight", s, Zeros(20));
    feed.Stats("grad/module.bias", s, Zeros(1));
  }
  const auto f = feed.Finish();
  const Finding* v = FindCode(f, "GRAD_VANISHING");
  ASSERT_NE(v, nullptr);
  ASSERT_FALSE(v->causes.empty());
  EXPECT_EQ(v->causes.at(0).id, "loss_constant");
  for (const char* gone : {"dying_relu", "constant_init", "saturating_activation"}) EXPECT_FALSE(HasCause(*v, gone)) << gone;
  for (const Cause& c : v->causes) {
    if (c.id == "gradients_cleared_before_step") EXPECT_LE(c.confidence, 0.3);  // it needs a loss that moves
  }
  EXPECT_NE(json::parse(v->evidence_json)["decided_by"].get<std::string>().find("loss_constant"), std::string::npos);
}

// A random init whose ReLUs died: one layer's gradient is 0, its weights differ. Not a
// constant init.
TEST(UnseenCode, RandomInitIsNotConstantInit) {
  Feed feed({"grad_vanishing"});
  for (int64_t s = 0; s < 40; ++s) {
    feed.Scalar("train/loss", s, 2.3 - 0.001 * s);
    TensorStats act = Normal(256, 0.0, 0.5, static_cast<uint32_t>(s + 1));
    act.dead_fraction = 0.95;
    feed.Stats("act/relu1", s, act);
    feed.Stats("weight/fc1.weight", s, Normal(256, 0, 0.1, 4));
    feed.Stats("grad/fc1.weight", s, Zeros(256));
    feed.Stats("weight/fc2.weight", s, Normal(256, 0, 0.1, 5));
    feed.Stats("grad/fc2.weight", s, Normal(256, 0, 0.01, static_cast<uint32_t>(s + 7)));
  }
  const auto f = feed.Finish();
  const Finding* v = FindCode(f, "GRAD_VANISHING");
  ASSERT_NE(v, nullptr);
  EXPECT_FALSE(HasCause(*v, "constant_init"));
  EXPECT_EQ(v->causes.at(0).id, "dying_relu");
}

// F.softmax at the end of forward, then F.cross_entropy: the loss falls from ln 10 to its
// floor ln(1 + 9/e) = 1.46 and stays there while the accuracy reaches 95 %. The same loss
// with no softmax in the forward, or an accuracy near chance, is no architecture finding.
std::vector<Finding> SoftmaxTwice(const char* functional_ops, double accuracy) {
  Feed feed({"loss_plateau"});
  feed.Meta("config", R"({"num_classes": 10})");
  feed.Meta("functional_ops", functional_ops);
  std::mt19937 rng(4);
  std::normal_distribution<double> n(0, 0.01);
  const double floor = std::log(1 + 9 / std::exp(1.0));
  for (int64_t s = 0; s < 300; ++s) {
    feed.Scalar("train/loss", s, floor + (2.302 - floor) * std::exp(-s / 30.0) + 0.02 + n(rng));
    if (s % 60 == 59) feed.Scalar("val/acc", s, accuracy);
  }
  return feed.Finish();
}

TEST(UnseenCode, SoftmaxBeforeCrossEntropyIsNamedByTheLossFloor) {
  const auto f = SoftmaxTwice(R"(["conv2d", "linear", "relu", "softmax"])", 0.95);
  const Finding* a = FindCode(f, "ARCHITECTURE_WARNING");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->severity, Severity::kWarning);
  EXPECT_EQ(a->causes.at(0).id, "double_softmax");
}

TEST(UnseenCode, ALossAtTheFloorWithoutASoftmaxOrAccuracyIsNoArchitectureFinding) {
  EXPECT_EQ(FindCode(SoftmaxTwice(R"(["conv2d", "linear", "log_softmax"])", 0.95), "ARCHITECTURE_WARNING"), nullptr);
  EXPECT_EQ(FindCode(SoftmaxTwice(R"(["conv2d", "linear", "softmax"])", 0.3), "ARCHITECTURE_WARNING"), nullptr);
}

// A plateau at chance with clean labels (nothing says they are noisy): label noise may be
// listed, never first, never above 0.3.
TEST(UnseenCode, LabelNoiseNeedsPositiveEvidence) {
  Feed feed({"loss_plateau"});
  feed.Meta("config", R"({"num_classes": 10})");
  std::mt19937 rng(3);
  std::normal_distribution<double> n(0, 0.01);
  for (int64_t s = 0; s < 300; ++s) {
    feed.Scalar("train/loss", s, 2.302 + n(rng));
    feed.Scalar("opt/lr", s, 0.05);
  }
  const auto f = feed.Finish();
  const Finding* p = FindCode(f, "LOSS_PLATEAU");
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p->causes.at(0).id, "label_noise");
  for (const Cause& c : p->causes) {
    if (c.id == "label_noise") {
      EXPECT_LE(c.confidence, 0.3);
    }
  }
}

// log(torch.sigmoid(x)) (a function, no module) with the logits climbing: the outputs stay finite, the loss falls toward
// 0 and then is NaN. The log of the 0 made it; the saturation is how the 0 came about.
TEST(UnseenCode, LogOfZeroComesFirstWhenTheOutputsAreFinite) {
  Feed feed({"nonfinite"});
  for (int64_t s = 0; s < 40; ++s) {
    // Activations are recorded every few steps: the NaN step has none of its own.
    if (s % 5 == 0) {
      TensorStats out = Normal(64, 0, 1, static_cast<uint32_t>(s + 1));
      out.abs_max = 2 + 0.5 * static_cast<double>(s);  // climbs to ~20: past saturation, below exp overflow
      feed.Stats("act/fc", s, out);
    }
    feed.Scalar("train/loss", s, s >= 37 ? NAN : 0.7 * std::exp(-0.1 * static_cast<double>(s)));
  }
  const auto f = feed.Finish();
  const Finding* n = FindCode(f, "NONFINITE_LOSS");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->causes.at(0).id, "log_of_zero");
}

// Ties are broken by evidence, never by name.
TEST(UnseenCode, ARootIsListedBeforeItsConsequenceAtTheSameSeverityAndStep) {
  Finding vanishing, dead;
  vanishing.code = "GRAD_VANISHING";  // alphabetically first
  dead.code = "DEAD_UNITS";
  for (Finding* f : {&vanishing, &dead}) {
    f->severity = Severity::kWarning;
    f->step = 100;
    f->evidence_json = R"({"detected_at": 119})";
  }
  std::vector<Finding> findings = {vanishing, dead};
  SortFindings(&findings);
  EXPECT_EQ(findings[0].code, "DEAD_UNITS");
  // Unrelated codes: the one the data showed first, then the more confident.
  Finding a, b;
  a.code = "ACTIVATION_DRIFT";
  b.code = "UPDATE_RATIO_HIGH";
  for (Finding* f : {&a, &b}) {
    f->severity = Severity::kWarning;
    f->step = 50;
  }
  a.evidence_json = R"({"detected_at": 90})";
  b.evidence_json = R"({"detected_at": 60})";
  findings = {a, b};
  SortFindings(&findings);
  EXPECT_EQ(findings[0].code, "UPDATE_RATIO_HIGH");
  // A root found later than its consequence still comes first.
  Finding plateau, collapse;
  plateau.code = "LOSS_PLATEAU";
  plateau.severity = Severity::kWarning;
  plateau.step = 0;
  collapse.code = "LR_ANOMALY";
  collapse.severity = Severity::kWarning;
  collapse.step = 30;
  findings = {plateau, collapse};
  SortFindings(&findings);
  EXPECT_EQ(findings[0].code, "LR_ANOMALY");
}

// Advice with the run's numbers.
TEST(UnseenCode, LrAdviceCarriesTheRunsNumbers) {
  RunFacts facts;
  facts.lr = 0.01;
  facts.lr_max = 0.01;
  Finding f;
  f.code = "LOSS_OSCILLATION";
  f.actions = {"Lower the learning rate 3-10x"};
  f.evidence_json = "{}";
  FitActionsToFacts(&f, facts);
  ASSERT_EQ(f.actions.size(), 1u);
  EXPECT_NE(f.actions[0].find("from 0.01 to about 0.0033"), std::string::npos) << f.actions[0];
}

const NotChecked* NotCheckedEntry(const Diagnosis& d, const std::string& check) {
  for (const auto& n : d.not_checked) {
    if (n.check == check) return &n;
  }
  return nullptr;
}

// A model whose activations are functions (F.relu in forward): say what is true, not "no
// ReLU modules seen".
TEST(UnseenCode, FunctionalActivationsAreSaidAsSuch) {
  RunData run;
  run.meta["functional_ops"] = R"(["relu", "log_softmax"])";
  TensorStats act = Normal(64, 0, 1, 1);
  for (int64_t s = 0; s < 5; ++s) {
    run.OnScalar("train/loss", s, 0, 1.0);
    run.OnTensorStats("act/fc1", s, 0, act);
  }
  const Diagnosis d = Diagnose(run);
  const NotChecked* dead = NotCheckedEntry(d, "dead and saturated units");
  ASSERT_NE(dead, nullptr);
  EXPECT_EQ(dead->reason.find("no ReLU/sigmoid/tanh modules seen"), std::string::npos) << dead->reason;
  EXPECT_NE(dead->reason.find("applied as functions (relu)"), std::string::npos) << dead->reason;
}

// functional_ops lists a module's own ops too: minDiffusion's nn.LeakyReLU blocks call
// leaky_relu, which is not an activation applied as a function.
TEST(UnseenCode, AnActivationModulesOwnOpIsNotSaidToBeAFunction) {
  RunData run;
  run.meta["functional_ops"] = R"(["conv2d", "leaky_relu", "sigmoid"])";
  run.meta["module_types"] = R"({"conv.0": "Conv2d", "conv.1": "LeakyReLU"})";
  TensorStats act = Normal(64, 0, 1, 1);
  for (int64_t s = 0; s < 5; ++s) {
    run.OnScalar("train/loss", s, 0, 1.0);
    run.OnTensorStats("act/conv.0", s, 0, act);
  }
  const Diagnosis d = Diagnose(run);
  const NotChecked* dead = NotCheckedEntry(d, "dead and saturated units");
  ASSERT_NE(dead, nullptr);
  EXPECT_NE(dead->reason.find("applied as functions (sigmoid)"), std::string::npos) << dead->reason;
}

// zero_grad() between backward() and step() on an LSTM: every gradient row is 0, which the
// per-unit norms would read as dead units of a ReLU there is not.
TEST(UnseenCode, ClearedGradientsAreNotDeadUnits) {
  Feed feed({"dead_units"});
  for (int64_t s = 0; s < 40; ++s) {
    feed.Scalar("train/loss", s, 0.69 + 0.01 * (s % 3));
    feed.Stats("weight/lstm.weight_ih_l0", s, Normal(256, 0, 0.1, 4));
    feed.Stats("grad/lstm.weight_ih_l0", s, Zeros(256));
    feed.Stats("grad/lstm.bias_ih_l0", s, Zeros(64));
    feed.Vector("grad_units/lstm.weight_ih_l0", s, std::vector<float>(64, 0.0f));
  }
  EXPECT_EQ(FindCode(feed.Finish(), "DEAD_UNITS"), nullptr);
}

// yunjey/pytorch-tutorial's bidirectional LSTM reads out[:, -1, :]: the top layer's reverse
// direction is read at its first step, whose hidden state is the zero initial one, so
// lstm.weight_hh_l1_reverse gets exactly zero gradient while the rest of the LSTM learns.
// That parameter does not learn (GRAD_VANISHING, true) because of its zero input, not a
// ReLU that died (there is none): no DEAD_UNITS from its zero rows, and the cause says so.
TEST(UnseenCode, AParameterWithZeroInputIsNotADeadLayer) {
  Feed feed({"dead_units", "grad_vanishing"});
  for (int64_t s = 0; s < 40; ++s) {
    feed.Scalar("train/loss", s, 2.3 - 0.02 * s);
    feed.Stats("grad/lstm.weight_hh_l1_reverse", s, Zeros(256));
    feed.Vector("grad_units/lstm.weight_hh_l1_reverse", s, std::vector<float>(64, 0.0f));
    feed.Stats("grad/lstm.weight_ih_l1_reverse", s, WithRms(256, 0.01, s + 1));
    feed.Stats("grad/lstm.bias_hh_l1_reverse", s, WithRms(64, 0.01, s + 2));
    feed.Stats("grad/fc.weight", s, WithRms(64, 0.05, s + 3));
  }
  const auto f = feed.Finish();
  EXPECT_EQ(FindCode(f, "DEAD_UNITS"), nullptr);
  const Finding* v = FindCode(f, "GRAD_VANISHING");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->location, "lstm.weight_hh_l1_reverse");
  ASSERT_FALSE(v->causes.empty());
  EXPECT_EQ(v->causes[0].id, "zero_input_or_unused_output");
  for (const Cause& c : v->causes) EXPECT_NE(c.id, "dying_relu");
}

// The control: a Linear whose weight and bias both get no gradient is still a dead layer's
// trace (its units output zero), and the exact-zero weight keeps a dead ReLU among its causes.
TEST(UnseenCode, ALinearWithoutAnyGradientIsStillJudgedDead) {
  Feed feed({"dead_units", "grad_vanishing"});
  for (int64_t s = 0; s < 40; ++s) {
    feed.Scalar("train/loss", s, 2.3 - 0.02 * s);
    feed.Stats("grad/fc1.weight", s, Zeros(256));
    feed.Stats("grad/fc1.bias", s, Zeros(64));
    feed.Vector("grad_units/fc1.weight", s, std::vector<float>(64, 0.0f));
    feed.Stats("grad/fc2.weight", s, WithRms(64, 0.05, s + 3));
  }
  const auto f = feed.Finish();
  EXPECT_NE(FindCode(f, "DEAD_UNITS"), nullptr);
  const Finding* v = FindCode(f, "GRAD_VANISHING");
  ASSERT_NE(v, nullptr);
  bool dying = false;
  for (const Cause& c : v->causes) dying |= c.id == "dying_relu";
  EXPECT_TRUE(dying);
}

// pytorch/examples' word-language model without its zero_grad (a hand-made SGD update,
// lr 20 decayed to 5, clip 0.25): the loss stays at chance, ln(401). The plateau's first
// cause is the one its own series show (train/grad_zeroed 0 at every step), not a learning
// rate too low, and no action asks for a larger one. With the gradients zeroed, the same
// curve keeps the learning rate first.
TEST(UnseenCode, APlateauWithGradientsNeverZeroedIsBlamedOnThem) {
  auto run = [](double zeroed) {
    Feed feed({"loss_plateau"});
    std::mt19937 rng(6);
    std::normal_distribution<double> n(0, 0.01);
    for (int64_t s = 0; s < 360; ++s) {
      feed.Scalar("train/loss", s, 5.99 - 0.00005 * s + n(rng));
      feed.Scalar("train/grad_zeroed", s, zeroed);
      feed.Scalar("opt/lr", s, 5.0);
      feed.Scalar("input/label_min", s, 0);
      feed.Scalar("input/label_max", s, 400);
    }
    return feed.Finish();
  };
  const auto never = run(0);
  const Finding* p = FindCode(never, "LOSS_PLATEAU");
  ASSERT_NE(p, nullptr);
  ASSERT_FALSE(p->causes.empty());
  EXPECT_EQ(p->causes[0].id, "missing_zero_grad");
  EXPECT_GE(p->causes[0].confidence, 0.8);
  ASSERT_FALSE(p->actions.empty());
  EXPECT_NE(p->actions[0].find("zero_grad"), std::string::npos) << p->actions[0];
  for (const std::string& a : p->actions) EXPECT_EQ(Lower(a).find("raise the learning rate"), std::string::npos) << a;
  const auto zeroed = run(1);
  const Finding* q = FindCode(zeroed, "LOSS_PLATEAU");
  ASSERT_NE(q, nullptr);
  ASSERT_FALSE(q->causes.empty());
  EXPECT_NE(q->causes[0].id, "missing_zero_grad");
}

// pytorch/examples' word-language model at AdamW lr 1: the loss climbs, then the epoch's
// `math.exp(val_loss)` raises OverflowError (yunjey's LSTM at lr x100: sampling from NaN
// probabilities). The climb ended the run: it comes first, critical, and the crash says
// what it follows. A crash about something else (a KeyError) leaves both as they were.
TEST(UnseenCode, ACrashAboutAnOverflowFollowsTheBlowUpBeforeIt) {
  auto run = [](const std::string& exception) {
    Feed feed({"loss_divergence", "run_exit"});
    std::mt19937 rng(7);
    std::normal_distribution<double> n(0, 0.02);
    for (int64_t s = 0; s < 200; ++s) {
      const double level = s < 100 ? 2.3 - 0.008 * s : 1.5 * std::exp(0.01 * static_cast<double>(s - 100));
      feed.Scalar("train/loss", s, level + n(rng));
    }
    if (!exception.empty()) feed.Meta("exception", exception);
    return feed.Finish();
  };
  const auto alone = run("");
  ASSERT_EQ(alone.size(), 1u);
  ASSERT_EQ(alone[0].code, "LOSS_DIVERGENCE");
  ASSERT_EQ(alone[0].severity, Severity::kWarning);  // the climb alone: 1.5 -> 4, a warning

  const auto overflow = run(R"({"type": "OverflowError", "message": "math range error"})");
  ASSERT_EQ(overflow.size(), 2u);
  EXPECT_EQ(overflow[0].code, "LOSS_DIVERGENCE");
  EXPECT_EQ(overflow[0].severity, Severity::kCritical);
  EXPECT_EQ(overflow[1].code, "RUN_CRASHED");
  EXPECT_EQ(overflow[1].causes.at(0).id, "numbers_blew_up");
  EXPECT_NE(overflow[1].evidence_json.find(R"("follows":{"code":"LOSS_DIVERGENCE")"), std::string::npos)
      << overflow[1].evidence_json;

  for (const char* exception : {R"({"type": "KeyError", "message": "'val_loss'"})",
                                R"({"type": "RuntimeError", "message": "the store waited indefinitely"})"}) {
    const auto other = run(exception);
    ASSERT_EQ(other.size(), 2u);
    EXPECT_EQ(other[0].code, "RUN_CRASHED") << exception;
    EXPECT_EQ(other[0].causes.at(0).id, "exception");
    EXPECT_EQ(other[1].code, "LOSS_DIVERGENCE");
    EXPECT_EQ(other[1].severity, Severity::kWarning);
  }
}

// Stuck at chance, accuracy at chance: the model learns nothing, which says nothing about
// the labels.
TEST(UnseenCode, AccuracyAtChanceIsNoEvidenceOfLabelNoise) {
  Feed feed({"loss_plateau"});
  feed.Meta("config", R"({"num_classes": 2})");
  std::mt19937 rng(5);
  std::normal_distribution<double> n(0, 0.005);
  for (int64_t s = 0; s < 300; ++s) {
    feed.Scalar("train/loss", s, 0.693 + n(rng));
    feed.Scalar("train/acc", s, 0.5 + n(rng));
    feed.Scalar("opt/lr", s, 0.01);
  }
  const auto f = feed.Finish();
  const Finding* p = FindCode(f, "LOSS_PLATEAU");
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p->causes.at(0).id, "label_noise");
}

}  // namespace
}  // namespace trainscope::doctor
