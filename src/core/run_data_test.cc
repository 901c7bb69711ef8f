#include "core/run_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace trainscope {
namespace {

void ExpectSameStats(const TensorStats& a, const TensorStats& b) {
  EXPECT_EQ(a.numel, b.numel);
  EXPECT_EQ(a.nan, b.nan);
  EXPECT_EQ(a.inf, b.inf);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(a.sum_squares, b.sum_squares);
  EXPECT_EQ(a.abs_max, b.abs_max);
  EXPECT_EQ(std::isnan(a.dead_fraction), std::isnan(b.dead_fraction));
  if (!std::isnan(a.dead_fraction)) EXPECT_EQ(a.dead_fraction, b.dead_fraction);
  EXPECT_EQ(std::isnan(a.saturated_fraction), std::isnan(b.saturated_fraction));
  if (!std::isnan(a.saturated_fraction)) EXPECT_EQ(a.saturated_fraction, b.saturated_fraction);
  EXPECT_EQ(a.has_histogram, b.has_histogram);
  EXPECT_EQ(a.exponent_counts, b.exponent_counts);
}

TEST(TensorStatsColumn, KeepsEveryFieldAndEveryBin) {
  std::vector<TensorStats> originals;
  // Real statistics of real values, with and without histogram, with edge bins and counts
  // beyond 32 bits.
  const std::vector<double> values = {0, 0, 0.5, -3, 1e-3, 7, 7.5, NAN, INFINITY, 1e-30, -1e25};
  originals.push_back(ComputeTensorStats(values.data(), values.size(), true));
  originals.push_back(ComputeTensorStats(values.data(), values.size(), false));
  TensorStats edges = ComputeTensorStats(values.data(), 3, true);
  edges.exponent_counts[0] = 1;
  edges.exponent_counts[TensorStats::kExponentBins - 1] = uint64_t{1} << 40;
  edges.dead_fraction = 0.25;
  edges.saturated_fraction = 0.125;
  originals.push_back(edges);
  originals.push_back(TensorStats{});  // empty: no bins at all, between points that have some
  originals.push_back(ComputeTensorStats(values.data() + 2, 4, true));

  TensorStatsColumn column;
  for (const TensorStats& s : originals) column.push_back(s);
  ASSERT_EQ(column.size(), originals.size());
  for (size_t i = 0; i < originals.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSameStats(column[i], originals[i]);
  }
  ExpectSameStats(column.front(), originals.front());
  ExpectSameStats(column.back(), originals.back());
  size_t n = 0;
  for (const TensorStats& s : column) ExpectSameStats(s, originals[n++]);
  EXPECT_EQ(n, originals.size());
  column.clear();
  EXPECT_TRUE(column.empty());
}

TEST(RunData, InterleavedTagsLandInTheirSeries) {
  // Tags in a repeating order (the common case the series guess is for), then the order
  // changes, a new tag appears mid-way and one tag repeats back to back: every point must
  // still land in its own series, in order.
  RunData run;
  std::vector<std::string> order = {"a", "b", "c"};
  int64_t step = 0;
  for (; step < 50; ++step) {
    for (const auto& t : order) run.OnScalar(t, step, step * 0.5, step * 10.0 + (t[0] - 'a'));
  }
  order = {"c", "new", "a", "a", "b"};
  for (; step < 60; ++step) {
    for (const auto& t : order) run.OnScalar(t, step, step * 0.5, step * 10.0 + (t == "new" ? 9 : t[0] - 'a'));
  }
  ASSERT_EQ(run.scalars.size(), 4u);
  EXPECT_EQ(run.scalars[0].tag, "a");
  EXPECT_EQ(run.scalars[3].tag, "new");
  const ScalarSeries* a = run.FindScalar(std::string_view("a"));
  const ScalarSeries* c = run.FindScalar("c");
  const ScalarSeries* added = run.FindScalar("new");
  ASSERT_TRUE(a && c && added);
  ASSERT_EQ(a->steps.size(), 50u + 2 * 10u);
  ASSERT_EQ(c->steps.size(), 60u);
  ASSERT_EQ(added->steps.size(), 10u);
  for (size_t i = 0; i < c->steps.size(); ++i) {
    EXPECT_EQ(c->steps[i], static_cast<int64_t>(i));
    EXPECT_EQ(c->values[i], i * 10.0 + 2);
    EXPECT_EQ(c->wall_times[i], i * 0.5);
  }
  EXPECT_EQ(a->steps[50], 50);
  EXPECT_EQ(a->steps[51], 50);  // the repeated tag keeps both points
  EXPECT_EQ(added->values[0], 509.0);
  EXPECT_EQ(run.FindScalar("missing"), nullptr);
  EXPECT_EQ(run.FindTensorStats("a"), nullptr);  // scalars and tensor stats are apart
  EXPECT_EQ(run.MaxStep(), 59);
}

// Records what a sink is given, and when a step is said to be done.
struct Transcript : SampleSink {
  void OnScalar(std::string_view tag, int64_t step, double, double value) override {
    lines.push_back(std::string(tag) + "@" + std::to_string(step) + "=" + std::to_string(value));
  }
  void OnTensorStats(std::string_view tag, int64_t step, double, const TensorStats&) override {
    lines.push_back("stats " + std::string(tag) + "@" + std::to_string(step));
  }
  void OnVector(std::string_view tag, int64_t step, double, const std::vector<float>&) override {
    lines.push_back("vector " + std::string(tag) + "@" + std::to_string(step));
  }
  void OnSpan(const Span& span) override { lines.push_back("span " + span.phase + "@" + std::to_string(span.step)); }
  void OnFinding(const Finding& f) override { lines.push_back("finding " + f.code); }
  void OnMeta(std::string_view key, std::string_view) override { lines.push_back("meta " + std::string(key)); }
  std::vector<std::string> lines;
};

TEST(RunData, ReplayInStepOrderGroupsEveryPointByStep) {
  RunData run;
  run.OnScalar("a", 2, 0, 20);
  run.OnScalar("a", 1, 0, 10);  // logged backwards
  run.OnScalar("b", 1, 0, 11);
  run.OnScalar("a", 1, 0, 12);  // a second point at step 1, after the first
  run.OnSpan({2, "data", 0, 0.1});
  run.OnSpan({1, "data", 0, 0.1});
  run.OnTensorStats("grad/w", 1, 0, TensorStats{});
  run.OnVector("v", 3, 0, {1.0f});
  run.OnMeta("format", "test");
  run.OnFinding(Finding{.code = "X"});
  Transcript t;
  std::vector<int64_t> done;
  run.ReplayInStepOrder(&t, [&](int64_t step) {
    done.push_back(step);
    t.lines.push_back("done " + std::to_string(step));
  });
  const std::vector<std::string> expected = {
      "meta format",         "a@1=10.000000",  "a@1=12.000000", "b@1=11.000000", "stats grad/w@1", "span data@1",
      "done 1",              "a@2=20.000000",  "span data@2",   "done 2",        "vector v@3",     "done 3",
      "finding X"};
  EXPECT_EQ(t.lines, expected);
  EXPECT_EQ(done, (std::vector<int64_t>{1, 2, 3}));
}

TEST(RunData, ReplayDeliversEveryPoint) {
  RunData run;
  const std::vector<double> values = {1, -2, 0, 4e10};
  for (int step = 0; step < 5; ++step) {
    run.OnScalar("loss", step, 100 + step, 1.0 / (step + 1));
    run.OnTensorStats("grad/w", step, 100 + step, ComputeTensorStats(values.data(), values.size(), true));
    run.OnTensorStats("grad/b", step, 100 + step, ComputeTensorStats(values.data(), step % 4 + 1, true));
  }
  run.OnMeta("format", "test");
  RunData copy;
  run.Replay(&copy);
  EXPECT_EQ(copy.meta.at("format"), "test");
  ASSERT_EQ(copy.FindScalar("loss")->values, run.FindScalar("loss")->values);
  for (const char* tag : {"grad/w", "grad/b"}) {
    const TensorStatsSeries* a = run.FindTensorStats(tag);
    const TensorStatsSeries* b = copy.FindTensorStats(tag);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->stats.size(), 5u);
    ASSERT_EQ(b->stats.size(), 5u);
    EXPECT_EQ(a->steps, b->steps);
    for (size_t i = 0; i < 5; ++i) ExpectSameStats(a->stats[i], b->stats[i]);
  }
  // grad/b's points differ in their values: the column keeps them apart.
  const TensorStatsSeries* b = run.FindTensorStats("grad/b");
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE(step);
    ExpectSameStats(b->stats[step], ComputeTensorStats(values.data(), step % 4 + 1, true));
  }
}

}  // namespace
}  // namespace trainscope
