#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/assets.h"
#include "server/live_feed.h"
#include "server/run_registry.h"
#include "store/run_store.h"

namespace trainscope::server {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string TempDir() {
  std::string pattern = (fs::temp_directory_path() / "ts_server_XXXXXX").string();
  return mkdtemp(pattern.data());
}

// A run with a loss (one spike), two layers' gradient stats, spans and one finding.
void MakeRun(const std::string& logdir, const std::string& name, int steps = 200) {
  RunMeta meta;
  meta.name = name;
  meta.config_json = R"({"lr": 0.1})";
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::Create(logdir + "/" + name, meta, &store).ok());
  int64_t loss, g1, g2;
  ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss).ok());
  ASSERT_TRUE(store->EnsureSeries("grad/fc1.weight", SeriesKind::kTensorStats, &g1).ok());
  ASSERT_TRUE(store->EnsureSeries("grad/fc2.weight", SeriesKind::kTensorStats, &g2).ok());
  WriteBatch batch;
  float values[4] = {0.5f, -0.25f, 0.125f, 0.0f};
  for (int step = 1; step <= steps; ++step) {
    batch.scalars.push_back({loss, step, 1000.0 + step, step == 137 ? 50.0 : 1.0 / step});
    batch.tensor_stats.push_back({g1, step, 1000.0 + step, ComputeTensorStats(values, 4, true)});
    batch.tensor_stats.push_back({g2, step, 1000.0 + step, ComputeTensorStats(values, 2, true)});
    batch.spans.push_back({step, "forward", 1000.0 + step, 0.01});
    batch.spans.push_back({step, "backward", 1000.01 + step, 0.02});
  }
  Finding f;
  f.code = "LOSS_SPIKE";
  f.severity = Severity::kWarning;
  f.step = 137;
  f.last_step = 137;
  f.location = "train/loss";
  batch.findings.push_back(f);
  ASSERT_TRUE(store->Write(batch).ok());
  ASSERT_TRUE(store->Close("finished", "").ok());
}

// DashboardServer::Answer (the request fuzz target's way in): the same parser and handlers
// as a connection, no socket.
TEST(ServerAnswerTest, AnswersRequestsHeldInMemory) {
  const std::string logdir = TempDir();
  MakeRun(logdir, "a", 20);
  ServerOptions options;
  options.logdir = logdir;
  options.port = 0;
  std::unique_ptr<DashboardServer> server;
  ASSERT_TRUE(DashboardServer::Create(options, &server).ok());
  const std::string runs = server->Answer("GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  ASSERT_EQ(runs.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << runs;
  const json body = json::parse(runs.substr(runs.find("\r\n\r\n") + 4));
  ASSERT_EQ(body["runs"].size(), 1u);
  EXPECT_EQ(body["runs"][0]["name"], "a");
  // The checks of a connection hold: another origin's Host, a method that writes, bytes
  // that are no request.
  EXPECT_EQ(server->Answer("GET /api/runs HTTP/1.1\r\nHost: evil.example\r\n\r\n").rfind("HTTP/1.1 403", 0), 0u);
  EXPECT_EQ(server->Answer("POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(server->Answer("\x01\x02 nonsense\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  fs::remove_all(logdir);
}

// Issue 15: a crashed run kept health "ok" and showed no exception text.
TEST(ApiTest, ACrashedRunIsCriticalWithItsException) {
  const std::string root = TempDir();
  RunMeta meta;
  meta.name = "crash";
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::Create(root + "/crash", meta, &store).ok());
  ASSERT_TRUE(store->SetMetaValue("exception", "ValueError: bad batch").ok());
  ASSERT_TRUE(store->Close("crashed", "ValueError").ok());
  store.reset();
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  Api api(registry.get());
  ApiReply reply = api.Handle("runs", {});
  ASSERT_EQ(reply.status, 200) << reply.body;
  json j = json::parse(reply.body);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["status"], "crashed");
  EXPECT_EQ(j["runs"][0]["health"], "critical");
  EXPECT_EQ(j["runs"][0]["exit_reason"], "ValueError");
  EXPECT_EQ(j["runs"][0]["exception"], "ValueError: bad batch");
}

TEST(RunRegistryTest, ValidatesNames) {
  EXPECT_TRUE(RunRegistry::ValidateName("run1").ok());
  EXPECT_TRUE(RunRegistry::ValidateName("sweep/lr=0.1").ok());
  for (const char* bad : {"", "/etc", "..", "../x", "a/../b", "a/./b", "a//b", "a/", "a\\b", "a\nb"}) {
    EXPECT_FALSE(RunRegistry::ValidateName(bad).ok()) << bad;
  }
  EXPECT_FALSE(RunRegistry::ValidateName(std::string(kMaxRunNameBytes + 1, 'a')).ok());
  EXPECT_FALSE(RunRegistry::ValidateName("\xff\xfe").ok());
}

TEST(RunRegistryTest, RefusesSymlinksOutOfTheLogdir) {
  const std::string root = TempDir(), outside = TempDir();
  MakeRun(root, "inside");
  MakeRun(outside, "secret");
  fs::create_directory_symlink(outside + "/secret", root + "/linked_dir");
  fs::create_directory(root + "/linked_db");
  fs::create_symlink(outside + "/secret/trainscope.db", root + "/linked_db/trainscope.db");
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  EXPECT_EQ(registry->Names(), std::vector<std::string>{"inside"});
  EXPECT_EQ(registry->Resolve("inside").http_status, 200);
  EXPECT_EQ(registry->Resolve("linked_dir").http_status, 403);
  EXPECT_EQ(registry->Resolve("linked_db").http_status, 403);
  EXPECT_EQ(registry->Resolve("../" + fs::path(outside).filename().string() + "/secret").http_status, 400);
  EXPECT_EQ(registry->Resolve("missing").http_status, 404);
  EXPECT_EQ(registry->Resolve(outside + "/secret").http_status, 400);  // absolute
}

// A big model's run: 100 census/ and 200 update_ratio/ series, created before the user's
// metrics (as watch does); the runs list's 64 final values must still hold the user's.
TEST(ApiTest, RunsListKeepsTheUsersFinalMetricsFirst) {
  const std::string root = TempDir();
  RunMeta meta;
  meta.name = "big";
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::Create(root + "/big", meta, &store).ok());
  WriteBatch batch;
  std::vector<std::string> tags;
  for (int i = 0; i < 100; ++i) tags.push_back("census/type" + std::to_string(i));
  for (int i = 0; i < 200; ++i) tags.push_back("update_ratio/layer" + std::to_string(i) + ".weight");
  tags.insert(tags.end(), {"train/grad_zeroed", "train/loss", "val/acc", "test/loss"});
  for (size_t i = 0; i < tags.size(); ++i) {
    int64_t id;
    ASSERT_TRUE(store->EnsureSeries(tags[i], SeriesKind::kScalar, &id).ok());
    batch.scalars.push_back({id, 5, 1000.0, static_cast<double>(i)});
  }
  ASSERT_TRUE(store->Write(batch).ok());
  ASSERT_TRUE(store->Close("finished", "").ok());
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  Api api(registry.get());
  json j = json::parse(api.Handle("runs", {}).body);
  const json& final_values = j["runs"][0]["final"];
  EXPECT_EQ(final_values.size(), 64u);
  EXPECT_DOUBLE_EQ(final_values["train/loss"].get<double>(), 301);
  EXPECT_DOUBLE_EQ(final_values["val/acc"].get<double>(), 302);
  EXPECT_DOUBLE_EQ(final_values["test/loss"].get<double>(), 303);
  EXPECT_TRUE(final_values.contains("census/type0"));  // trainscope's own fill the rest
}

TEST(ApiTest, DecimatesAndKeepsTheSpike) {
  const std::string root = TempDir();
  MakeRun(root, "r");
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  Api api(registry.get());
  ApiReply reply = api.Handle("scalars", {{"run", "r"}, {"tag", "train/loss"}, {"width", "10"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  json j = json::parse(reply.body);
  EXPECT_EQ(j["points"], 200);
  EXPECT_EQ(j["max"].size(), 10u);
  double peak = 0;
  for (const auto& v : j["max"]) peak = std::max(peak, v.get<double>());
  EXPECT_EQ(peak, 50.0);  // the spike at step 137 survives 20:1 decimation
  EXPECT_EQ(j["step"].back(), 200);

  reply = api.Handle("runs", {});
  ASSERT_EQ(reply.status, 200);
  j = json::parse(reply.body);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["health"], "warning");
  EXPECT_EQ(j["runs"][0]["config"]["lr"], 0.1);
  EXPECT_EQ(j["runs"][0]["max_step"], 200);
  EXPECT_DOUBLE_EQ(j["runs"][0]["final"]["train/loss"].get<double>(), 1.0 / 200);

  reply = api.Handle("layers", {{"run", "r"}, {"family", "grad"}, {"width", "50"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  j = json::parse(reply.body);
  EXPECT_EQ(j["layers"], json({"fc1.weight", "fc2.weight"}));  // model order, not alphabetical
  EXPECT_EQ(j["values"][0].size(), 50u);
  EXPECT_NEAR(j["values"][0][0].get<double>(), std::sqrt(0.25 + 0.0625 + 0.015625), 1e-6);

  reply = api.Handle("tensor_stats", {{"run", "r"}, {"tag", "grad/fc1.weight"}, {"hist", "1"}, {"width", "20"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  j = json::parse(reply.body);
  EXPECT_EQ(j["step"].size(), 20u);
  EXPECT_EQ(j["exponent_lo"], -3);  // 0.125 = 2^-3 ... 0.5 = 2^-1
  EXPECT_EQ(j["exponent_hi"], 0);
  EXPECT_EQ(j["hist"][0], json({1, 1, 1}));
  EXPECT_EQ(j["has_hist"][0], true);

  reply = api.Handle("spans", {{"run", "r"}, {"width", "200"}});
  ASSERT_EQ(reply.status, 200);
  j = json::parse(reply.body);
  // Steps start 1 s apart and their phases take 0.03 s: the rest of each step is "other",
  // and the phases add up to the step; the last step has no successor to measure it by.
  EXPECT_EQ(j["phases"], json({"forward", "backward", "other"}));
  EXPECT_NEAR(j["step_time"][0].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(j["mean"]["other"][0].get<double>(), 0.97, 1e-9);
  EXPECT_NEAR(j["mean"]["forward"][0].get<double>() + j["mean"]["backward"][0].get<double>() +
                  j["mean"]["other"][0].get<double>(), j["step_time"][0].get<double>(), 1e-9);
  EXPECT_NEAR(j["step_time"].back().get<double>(), 0.03, 1e-9);

  reply = api.Handle("findings", {{"run", "r"}});
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(json::parse(reply.body)["findings"][0]["code"], "LOSS_SPIKE");
}

// A data-parallel run of `ranks` ranks (<name>/rank-<r>), 240 steps: a loss per rank (its
// own shard: a level that differs a little), the all-reduced gradient norm (equal on every
// rank), step and forward times, two layers' gradients. `slow_rank` forwards 30 ms longer
// (its step too); `diverging_rank`'s gradients are 10x the others' from step 120 on.
void MakeRankedRun(const std::string& logdir, const std::string& name, int ranks, int slow_rank, int diverging_rank) {
  for (int r = 0; r < ranks; ++r) {
    RunMeta meta;
    meta.name = name + "/rank-" + std::to_string(r);
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::Create(logdir + "/" + name + "/rank-" + std::to_string(r), meta, &store).ok());
    int64_t loss, norm, step_time, forward, g1, g2;
    ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss).ok());
    ASSERT_TRUE(store->EnsureSeries("grad/global_norm", SeriesKind::kScalar, &norm).ok());
    ASSERT_TRUE(store->EnsureSeries("time/step", SeriesKind::kScalar, &step_time).ok());
    ASSERT_TRUE(store->EnsureSeries("time/forward", SeriesKind::kScalar, &forward).ok());
    ASSERT_TRUE(store->EnsureSeries("grad/fc1.weight", SeriesKind::kTensorStats, &g1).ok());
    ASSERT_TRUE(store->EnsureSeries("grad/fc2.weight", SeriesKind::kTensorStats, &g2).ok());
    WriteBatch batch;
    double wall = 1000;
    for (int step = 1; step <= 240; ++step) {
      const double jitter = 0.001 * ((step * 7 + r * 3) % 5);  // the host's noise, < 5 ms
      const double fwd = 0.010 + jitter + (r == slow_rank ? 0.030 : 0.0);
      const double seconds = fwd + 0.020;
      wall += seconds;
      const double scale = r == diverging_rank && step >= 120 ? 10.0 : 1.0;
      const double shared_norm = 1.0 + 0.5 / step;  // all-reduced: bit-equal on every rank
      batch.scalars.push_back({loss, step, wall, 2.0 / std::sqrt(step) * (1 + 0.02 * ((step + r) % 3))});
      batch.scalars.push_back({norm, step, wall, shared_norm * scale});
      batch.scalars.push_back({step_time, step, wall, seconds});
      batch.scalars.push_back({forward, step, wall, fwd});
      float v1[4] = {0.5f, -0.25f, 0.125f, 0.0f}, v2[2] = {0.1f, 0.2f};
      for (float& v : v1) v *= static_cast<float>(scale);
      for (float& v : v2) v *= static_cast<float>(scale);
      batch.tensor_stats.push_back({g1, step, wall, ComputeTensorStats(v1, 4, true)});
      batch.tensor_stats.push_back({g2, step, wall, ComputeTensorStats(v2, 2, true)});
    }
    ASSERT_TRUE(store->Write(batch).ok());
    ASSERT_TRUE(store->Close("finished", "").ok());
  }
}

TEST(ApiTest, RanksViewShowsEachRanksStepTimeTheSpreadAndTheOddRank) {
  std::string root = TempDir();
  MakeRankedRun(root, "dp", 4, /*slow_rank=*/1, /*diverging_rank=*/2);
  MakeRankedRun(root, "healthy", 3, -1, -1);
  MakeRun(root, "alone");
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  Api api(registry.get());

  ApiReply reply = api.Handle("ranks", {{"run", "dp"}, {"width", "24"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  json view = json::parse(reply.body);
  ASSERT_EQ(view["ranks"].size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const json& row = view["ranks"][r];
    EXPECT_EQ(row["rank"], r);
    EXPECT_EQ(row["run"], "dp/rank-" + std::to_string(r));
    EXPECT_EQ(row["status"], "finished");
    EXPECT_EQ(row["step_time_source"], "time/step");
    const double expected = r == 1 ? 0.062 : 0.032;  // the median of 10 ms + jitter (0-4 ms) + 20 ms
    EXPECT_NEAR(row["step_time"].get<double>(), expected, 0.0011) << r;
    EXPECT_NEAR(row["steps_per_second"].get<double>(), 1 / row["step_time"].get<double>(), 1e-9);
    EXPECT_NEAR(row["phases"]["forward"].get<double>(), expected - 0.020, 0.0011);
  }
  ASSERT_EQ(view["step"].size(), 24u);  // 240 steps in 24 buckets of 10
  EXPECT_EQ(view["step"][0], 1);
  EXPECT_EQ(view["step_time"].size(), 4u);
  // The gradient norm: equal on every rank until step 120, then rank 2 at 10x: the spread over
  // the ranks is 0 before and (10 - 1) / 1 after (the median is a healthy rank's).
  const json* grad = nullptr;
  for (const json& series : view["series"]) {
    if (series["role"] == "grad_norm") grad = &series;
  }
  ASSERT_NE(grad, nullptr) << view["series"].dump();
  EXPECT_EQ((*grad)["tag"], "grad/global_norm");
  EXPECT_DOUBLE_EQ((*grad)["spread"][0].get<double>(), 0.0);
  EXPECT_NEAR((*grad)["spread"][23].get<double>(), 9.0, 1e-9);
  EXPECT_NEAR((*grad)["values"][2][23].get<double>() / (*grad)["median"][23].get<double>(), 10.0, 1e-9);
  // Per layer: rank 2's gradient norms over the run (its median: half the steps at 10x) against the ranks' median.
  const json& layers = view["layers"];
  EXPECT_EQ(layers["family"], "grad");
  EXPECT_EQ(layers["names"], json({"fc1.weight", "fc2.weight"}));
  for (int layer = 0; layer < 2; ++layer) {
    for (int r = 0; r < 4; ++r) {
      const double ratio = layers["ratio"][layer][r].get<double>();
      if (r == 2) EXPECT_GT(ratio, 4.0);
      else EXPECT_NEAR(ratio, 1.0, 1e-9);
      EXPECT_EQ(layers["nonfinite"][layer][r], 0);
    }
  }
  std::set<std::pair<std::string, int>> named;
  for (const json& f : view["findings"]) named.insert({f["code"].get<std::string>(), f["rank"].get<int>()});
  EXPECT_EQ(named, (std::set<std::pair<std::string, int>>{{"STRAGGLER", 1}, {"RANK_DIVERGENCE", 2}})) << view["findings"].dump();

  // Healthy replicas: no finding, no spread of the gradient norm, every layer at 1.
  reply = api.Handle("ranks", {{"run", "healthy"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  view = json::parse(reply.body);
  EXPECT_TRUE(view["findings"].empty()) << view["findings"].dump();
  for (const json& series : view["series"]) {
    if (series["role"] != "grad_norm") continue;
    for (const json& v : series["spread"]) EXPECT_DOUBLE_EQ(v.get<double>(), 0.0);
  }
  for (const json& row : view["layers"]["ratio"]) {
    for (const json& v : row) EXPECT_NEAR(v.get<double>(), 1.0, 1e-12);
  }

  // A rank whose store cannot be read is named; the others are still shown.
  {
    const std::string db = root + "/healthy/rank-2/trainscope.db";
    fs::remove(db + "-wal");
    fs::remove(db + "-shm");
    std::ofstream(db + ".new") << "this is not an SQLite file, whatever its name says";
    fs::rename(db + ".new", db);
  }
  reply = api.Handle("ranks", {{"run", "healthy"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  view = json::parse(reply.body);
  ASSERT_EQ(view["ranks"].size(), 2u);
  ASSERT_EQ(view["unreadable"].size(), 1u);
  EXPECT_EQ(view["unreadable"][0]["rank"], 2);
  EXPECT_EQ(view["unreadable"][0]["run"], "healthy/rank-2");
  EXPECT_EQ(view["unreadable"][0]["error"].get<std::string>().find(root), std::string::npos);  // no server path

  EXPECT_EQ(api.Handle("ranks", {{"run", "alone"}}).status, 404);
  EXPECT_EQ(api.Handle("ranks", {{"run", "nothing"}}).status, 404);
  EXPECT_EQ(api.Handle("ranks", {}).status, 400);
  EXPECT_EQ(api.Handle("ranks", {{"run", "../dp"}}).status, 400);
  EXPECT_EQ(api.Handle("ranks", {{"run", "dp"}, {"family", "bogus"}}).status, 400);
  // Asked again: the same answer (from the cache, the stores unchanged).
  EXPECT_EQ(api.Handle("ranks", {{"run", "dp"}, {"width", "24"}}).body, api.Handle("ranks", {{"run", "dp"}, {"width", "24"}}).body);
  fs::remove_all(root);
}

TEST(ApiTest, RefusesBadParameters) {
  const std::string root = TempDir();
  MakeRun(root, "r", 10);
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  Api api(registry.get());
  EXPECT_EQ(api.Handle("scalars", {{"run", "r"}, {"tag", "train/loss"}, {"width", "0"}}).status, 400);
  EXPECT_EQ(api.Handle("scalars", {{"run", "r"}, {"tag", "train/loss"}, {"width", "99999999"}}).status, 400);
  EXPECT_EQ(api.Handle("scalars", {{"run", "r"}, {"tag", "train/loss"}, {"min", "1e3"}}).status, 400);
  EXPECT_EQ(api.Handle("scalars", {{"run", "r"}, {"tag", "nope"}}).status, 404);
  EXPECT_EQ(api.Handle("scalars", {{"run", "r"}}).status, 400);
  EXPECT_EQ(api.Handle("scalars", {{"run", "r"}, {"tag", std::string(5000, 'x')}}).status, 400);
  EXPECT_EQ(api.Handle("layers", {{"run", "r"}, {"family", "evil"}}).status, 400);
  EXPECT_EQ(api.Handle("nothing", {}).status, 404);
  QueryParams many;
  for (int i = 0; i < 40; ++i) {
    std::string key = "p";
    key += std::to_string(i);
    many.emplace(key, "1");
  }
  EXPECT_EQ(api.Handle("runs", many).status, 400);
}

TEST(ApiTest, DamagedStoreIsReportedNotFatal) {
  const std::string root = TempDir();
  MakeRun(root, "good", 10);
  fs::create_directory(root + "/bad");
  std::ofstream(root + "/bad/trainscope.db") << "this is not a SQLite database, just bytes";
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  Api api(registry.get());
  ApiReply reply = api.Handle("runs", {});
  ASSERT_EQ(reply.status, 200) << reply.body;
  json j = json::parse(reply.body);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["name"], "bad");
  EXPECT_EQ(j["runs"][0]["status"], "unreadable");
  EXPECT_NE(j["runs"][0]["error"].get<std::string>().find("trainscope.db"), std::string::npos);
  EXPECT_EQ(j["runs"][1]["health"], "warning");
  reply = api.Handle("scalars", {{"run", "bad"}, {"tag", "train/loss"}});
  EXPECT_EQ(reply.status, 500);
  EXPECT_NE(reply.body.find("error"), std::string::npos);
}

// A server on a free loopback port, running on its own thread.
class ServerFixture {
 public:
  explicit ServerFixture(ServerOptions options) {
    options.port = 0;
    options.poll_interval = std::chrono::milliseconds(100);
    Status s = DashboardServer::Create(options, &server_);
    EXPECT_TRUE(s.ok()) << s.message();
    if (server_) thread_ = std::thread([this] { server_->Run(); });
  }
  ~ServerFixture() {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Client Client() {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_read_timeout(5, 0);
    return client;
  }

 private:
  std::unique_ptr<DashboardServer> server_;
  std::thread thread_;
};

TEST(ServerTest, ServesApiAndUiAndRefusesTraversal) {
  const std::string root = TempDir(), outside = TempDir();
  MakeRun(root, "r");
  std::ofstream(outside + "/secret.txt") << "TOP SECRET";
  fs::create_directory_symlink(outside, root + "/escape");
  ServerOptions options;
  options.logdir = root;
  ServerFixture fixture(options);
  httplib::Client client = fixture.Client();

  auto res = client.Get("/api/runs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("\"r\""), std::string::npos);

  res = client.Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(res->body.find("trainscope"), std::string::npos);

  // Traversal through the run parameter, raw and percent-encoded, and through the path.
  for (const char* target : {"/api/run?run=../../etc", "/api/run?run=%2e%2e%2f%2e%2e%2fetc",
                             "/api/findings?run=%2Fetc", "/api/config?run=r%2F..%2F..%2Fetc"}) {
    res = client.Get(target);
    ASSERT_TRUE(res) << target;
    EXPECT_EQ(res->status, 400) << target;
  }
  for (const char* target : {"/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/escape/secret.txt",
                             "/api/../../etc/passwd"}) {
    res = client.Get(target);
    ASSERT_TRUE(res) << target;
    EXPECT_EQ(res->status, 404) << target;
    EXPECT_EQ(res->body.find("root:"), std::string::npos);
    EXPECT_EQ(res->body.find("TOP SECRET"), std::string::npos);
  }
  res = client.Get("/api/run?run=escape");  // a symlinked directory: no store, 404; never read
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  // Oversized: a parameter over the limit is a 400, a URI over 8 KiB a 414.
  res = client.Get(("/api/scalars?run=r&tag=" + std::string(3000, 'a')).c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = client.Get(("/api/scalars?run=r&tag=" + std::string(10000, 'a')).c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 414);

  // Read-only.
  res = client.Post("/api/runs", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  res = client.Delete("/api/run?run=r");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);

  // DNS rebinding: a foreign Host header is refused without a token.
  res = client.Get("/api/runs", {{"Host", "evil.example:6007"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
}

TEST(ServerTest, NonLoopbackNeedsAToken) {
  const std::string root = TempDir();
  ServerOptions options;
  options.logdir = root;
  options.port = 0;
  options.host = "0.0.0.0";
  std::unique_ptr<DashboardServer> server;
  Status s = DashboardServer::Create(options, &server);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token"), std::string::npos);
  options.token = "short";
  EXPECT_FALSE(DashboardServer::Create(options, &server).ok());
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("192.168.1.4"));
  EXPECT_EQ(GenerateToken().size(), 32u);
  EXPECT_NE(GenerateToken(), GenerateToken());
}

TEST(ServerTest, TokenIsCheckedOnEveryApiCall) {
  const std::string root = TempDir();
  MakeRun(root, "r", 10);
  ServerOptions options;
  options.logdir = root;
  options.token = "s3cret-token-123";
  ServerFixture fixture(options);
  httplib::Client client = fixture.Client();
  for (const char* target : {"/api/runs", "/api/run?run=r", "/api/scalars?run=r&tag=train/loss", "/api/events"}) {
    auto res = client.Get(target);
    ASSERT_TRUE(res) << target;
    EXPECT_EQ(res->status, 401) << target;
    EXPECT_EQ(res->body.find("train/loss\""), std::string::npos);
  }
  auto res = client.Get("/api/runs", {{"Authorization", "Bearer wrong-token-1234"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client.Get("/api/runs?token=s3cret-token-12");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client.Get("/api/runs", {{"Authorization", "Bearer s3cret-token-123"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = client.Get("/api/scalars?run=r&tag=train/loss&token=s3cret-token-123");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = client.Get("/");  // the UI shell carries no data
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(ServerTest, EventStreamReportsNewRuns) {
  const std::string root = TempDir();
  MakeRun(root, "first", 10);
  ServerOptions options;
  options.logdir = root;
  ServerFixture fixture(options);
  httplib::Client client = fixture.Client();
  std::string received;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    MakeRun(root, "second", 10);
  });
  auto res = client.Get("/api/events", [&](const char* data, size_t n) {
    received.append(data, n);
    return received.find("\"run\":\"second\"") == std::string::npos;  // stop once seen
  });
  writer.join();
  EXPECT_NE(received.find("event: hello"), std::string::npos);
  EXPECT_NE(received.find("\"run\":\"second\""), std::string::npos) << received;
  EXPECT_NE(received.find("\"new\":true"), std::string::npos) << received;
}

TEST(LiveFeedTest, PublishesChangesNewRunsAndRemovals) {
  const std::string root = TempDir();
  MakeRun(root, "a", 10);
  std::unique_ptr<RunRegistry> registry;
  ASSERT_TRUE(RunRegistry::Open(root, &registry).ok());
  LiveFeed feed(registry.get(), std::chrono::milliseconds(1000));
  feed.PollOnce();  // records the state; publishes nothing
  EXPECT_EQ(feed.latest(), 0u);
  feed.PollOnce();  // nothing changed
  EXPECT_EQ(feed.latest(), 0u);

  {
    std::unique_ptr<RunStore> store;
    ASSERT_TRUE(RunStore::OpenForWrite(root + "/a", &store).ok());
    int64_t loss;
    ASSERT_TRUE(store->EnsureSeries("train/loss", SeriesKind::kScalar, &loss).ok());
    WriteBatch batch;
    batch.scalars.push_back({loss, 11, 2000.0, 0.5});
    ASSERT_TRUE(store->Write(batch).ok());
  }
  MakeRun(root, "b", 5);
  feed.PollOnce();
  std::vector<LiveFeed::Event> events;
  EXPECT_TRUE(feed.Wait(0, std::chrono::milliseconds(0), &events));
  ASSERT_EQ(events.size(), 2u);
  json a = json::parse(events[0].json), b = json::parse(events[1].json);
  EXPECT_EQ(a["run"], "a");
  EXPECT_EQ(a["max_step"], 11);
  EXPECT_FALSE(a.contains("new"));
  EXPECT_EQ(b["run"], "b");
  EXPECT_EQ(b["new"], true);

  fs::remove_all(root + "/b");
  feed.PollOnce();
  events.clear();
  feed.Wait(2, std::chrono::milliseconds(0), &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(json::parse(events[0].json)["type"], "removed");
  feed.Stop();
  EXPECT_FALSE(feed.Wait(3, std::chrono::milliseconds(10), &events));  // stopped: streams end
}

TEST(AssetsTest, IndexIsEmbedded) {
  const Asset* index = FindAsset("/");
  ASSERT_NE(index, nullptr);
  EXPECT_GT(index->size, 100u);
  EXPECT_EQ(FindAsset("/../etc/passwd"), nullptr);
}

}  // namespace
}  // namespace trainscope::server
