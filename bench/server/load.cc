// trainscope_server_load: a bounded load generator for the dashboard API.
//
//   trainscope_server_load --port P [--host 127.0.0.1] [--clients 8] [--requests 200]
//                          --path-template '/api/scalars?run=big&tag=metric/m%04d&width=1000'
//                          [--series 1000] [--token T]
//
// Each client is a thread with its own keep-alive connection that sends --requests
// requests back to back, each for a series picked at random (%04d in the template is
// replaced by a number in [1, series)). Prints one JSON line: latency p50/p90/p99/max in
// milliseconds over every request, throughput, and the count of non-200 answers.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", path_template, token;
  int port = 0, clients = 8, requests = 200, series = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--host") host = value;
    else if (flag == "--port") port = std::stoi(value);
    else if (flag == "--clients") clients = std::stoi(value);
    else if (flag == "--requests") requests = std::stoi(value);
    else if (flag == "--series") series = std::stoi(value);
    else if (flag == "--path-template") path_template = value;
    else if (flag == "--token") token = value;
  }
  if (!port || path_template.empty()) {
    std::fprintf(stderr, "usage: trainscope_server_load --port P --path-template T [--clients 8] [--requests 200]\n");
    return 2;
  }
  std::vector<std::vector<double>> latencies(clients);
  std::vector<int> failures(clients, 0);
  std::vector<size_t> bytes(clients, 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client(host, port);
      client.set_keep_alive(true);
      client.set_read_timeout(30, 0);
      httplib::Headers headers;
      if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
      std::mt19937 rng(1234 + c);
      std::uniform_int_distribution<int> pick(1, std::max(1, series - 1));
      char path[2048];
      for (int r = 0; r < requests; ++r) {
        std::snprintf(path, sizeof(path), path_template.c_str(), pick(rng));
        const auto t0 = std::chrono::steady_clock::now();
        auto res = client.Get(path, headers);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        latencies[c].push_back(ms);
        if (!res || res->status != 200) ++failures[c];
        else bytes[c] += res->body.size();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  int failed = 0;
  size_t total_bytes = 0;
  for (int c = 0; c < clients; ++c) {
    all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    failed += failures[c];
    total_bytes += bytes[c];
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  std::printf("{\"clients\": %d, \"requests\": %zu, \"failed\": %d, \"p50_ms\": %.2f, \"p90_ms\": %.2f, "
              "\"p99_ms\": %.2f, \"max_ms\": %.2f, \"requests_per_s\": %.1f, \"mean_body_bytes\": %.0f}\n",
              clients, all.size(), failed, pct(0.50), pct(0.90), pct(0.99), all.empty() ? 0.0 : all.back(),
              all.size() / seconds, all.empty() ? 0.0 : static_cast<double>(total_bytes) / (all.size() - failed + 1e-9));
  return failed ? 1 : 0;
}
