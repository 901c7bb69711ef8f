// The team server's load benchmark (docs/benchmarks.md "Team server ingest"): RANKS simulated
// ranks, each a process of its own, stream scalar points into one or more servers' ingest API
// (POST /api/v1/ingest, the packed form, gzip off: loopback), as fast as the servers take them,
// for SECONDS; one more process reads the dashboard's API meanwhile. Prints one JSON object:
// points sent and acknowledged, points/s, ingest latency p50/p99, the lag from a point's
// making to its commit p99, and the dashboard API's p50/p99.
//
//   trainscope_ingest_load --servers http://127.0.0.1:7001,http://127.0.0.1:7002 --token T
//       --project load [--ranks 64] [--seconds 600] [--series 16] [--points 2048]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/base64.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

struct Args {
  std::vector<std::string> servers;
  std::string token, read_token, project = "load", out_dir = "/tmp";
  int ranks = 64, series = 16, points = 2048;
  double seconds = 600;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// One rank: batches of `series` series x `points` points, one after another.
void Rank(const Args& a, int rank, const std::string& file) {
  httplib::Client client(a.servers[static_cast<size_t>(rank) % a.servers.size()]);
  client.set_bearer_token_auth(a.token);
  client.set_read_timeout(120);
  const std::string target = "/api/v1/ingest?project=" + a.project + "&run=rank-" + std::to_string(rank);
  std::vector<int64_t> from(static_cast<size_t>(a.series), 0);
  int64_t step = 0, sent = 0, acknowledged = 0, failures = 0;
  std::vector<double> latency, lag;
  const auto deadline = Clock::now() + std::chrono::duration<double>(a.seconds);
  const size_t n = static_cast<size_t>(a.points);
  std::string bytes(24 * n, '\0');
  while (Clock::now() < deadline) {
    json body = {{"version", 1}, {"batch", std::to_string(rank) + ":" + std::to_string(step)}};
    const double made = Now();
    for (int s = 0; s < a.series; ++s) {
      for (size_t i = 0; i < n; ++i) {
        const int64_t st = step + static_cast<int64_t>(i);
        const double wall = made + 1e-6 * static_cast<double>(i), value = 1.0 / static_cast<double>(st + s + 1);
        std::memcpy(bytes.data() + 8 * i, &st, 8);
        std::memcpy(bytes.data() + 8 * (n + i), &wall, 8);
        std::memcpy(bytes.data() + 8 * (2 * n + i), &value, 8);
      }
      body["scalars"]["series/" + std::to_string(s)] = {{"from", from[static_cast<size_t>(s)]}, {"packed", trainscope::Base64Encode(bytes)}};
    }
    const auto t0 = Clock::now();
    auto result = client.Post(target, body.dump(), "application/json");
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    sent += a.series * a.points;
    if (result && result->status == 200) {
      latency.push_back(took);
      lag.push_back(Now() - made);
      for (int s = 0; s < a.series; ++s) from[static_cast<size_t>(s)] += a.points;
      acknowledged += a.series * a.points;
      step += a.points;
    } else {
      ++failures;  // resent from the same positions next time round
      sent -= a.series * a.points;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::ofstream(file) << json({{"sent", sent}, {"acknowledged", acknowledged}, {"failures", failures},
                               {"latency", latency}, {"lag", lag}})
                             .dump();
}

// The dashboard meanwhile: the runs list and one series, in turn.
void Reader(const Args& a, const std::string& file) {
  httplib::Client client(a.servers.front());
  client.set_bearer_token_auth(a.read_token.empty() ? a.token : a.read_token);
  client.set_read_timeout(120);
  std::vector<double> latency;
  int errors = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(a.seconds);
  for (int i = 0; Clock::now() < deadline; ++i) {
    const std::string target = i % 2 ? "/api/runs"
                                     : "/api/scalars?run=" + a.project + "/rank-" + std::to_string(i % a.ranks) +
                                           "&tag=series/0&width=1000";
    const auto t0 = Clock::now();
    auto result = client.Get(target);
    if (result && result->status == 200) {
      latency.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      ++errors;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::ofstream(file) << json({{"latency", latency}, {"errors", errors}}).dump();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--servers") {
      for (size_t b = 0, e; b <= v.size(); b = e + 1) {
        e = std::min(v.find(',', b), v.size());
        a.servers.push_back(v.substr(b, e - b));
      }
    } else if (k == "--token") a.token = v;
    else if (k == "--read-token") a.read_token = v;
    else if (k == "--project") a.project = v;
    else if (k == "--out-dir") a.out_dir = v;
    else if (k == "--ranks") a.ranks = std::stoi(v);
    else if (k == "--series") a.series = std::stoi(v);
    else if (k == "--points") a.points = std::stoi(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.servers.empty() || a.token.empty()) {
    std::fprintf(stderr, "usage: %s --servers URL[,URL] --token T [--project P] [--ranks N] [--seconds S]\n", argv[0]);
    return 2;
  }
  const std::string prefix = a.out_dir + "/ingest_load_" + std::to_string(getpid()) + "_";
  std::vector<pid_t> children;
  const auto start = Clock::now();
  for (int r = 0; r <= a.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (r == a.ranks) Reader(a, prefix + "reader.json");
      else Rank(a, r, prefix + std::to_string(r) + ".json");
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  int64_t sent = 0, acknowledged = 0, failures = 0;
  std::vector<double> latency, lag;
  for (int r = 0; r < a.ranks; ++r) {
    const std::string file = prefix + std::to_string(r) + ".json";
    const json j = json::parse(std::ifstream(file), nullptr, false);
    std::remove(file.c_str());
    if (!j.is_object()) continue;
    sent += j["sent"].get<int64_t>(), acknowledged += j["acknowledged"].get<int64_t>();
    failures += j["failures"].get<int64_t>();
    for (double x : j["latency"]) latency.push_back(x);
    for (double x : j["lag"]) lag.push_back(x);
  }
  const json reader = json::parse(std::ifstream(prefix + "reader.json"), nullptr, false);
  std::remove((prefix + "reader.json").c_str());
  std::vector<double> api;
  if (reader.is_object()) for (double x : reader["latency"]) api.push_back(x);
  std::printf("%s\n", json({{"ranks", a.ranks},
                            {"servers", a.servers.size()},
                            {"seconds", elapsed},
                            {"points_acknowledged", acknowledged},
                            {"points_per_second", static_cast<double>(acknowledged) / elapsed},
                            {"batches", latency.size()},
                            {"failed_requests", failures},
                            {"ingest_p50_ms", 1e3 * Percentile(latency, 0.5)},
                            {"ingest_p99_ms", 1e3 * Percentile(latency, 0.99)},
                            {"lag_p99_ms", 1e3 * Percentile(lag, 0.99)},
                            {"api_requests", api.size()},
                            {"api_errors", reader.is_object() ? reader["errors"].get<int>() : -1},
                            {"api_p50_ms", 1e3 * Percentile(api, 0.5)},
                            {"api_p99_ms", 1e3 * Percentile(api, 0.99)}})
                          .dump()
                          .c_str());
  return 0;
}
