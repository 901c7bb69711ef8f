// DashboardServer: `trainscope serve` — the HTTP JSON API (server/api.h), the live stream
// (server-sent events at /api/events, fed by server/live_feed.h) and the embedded web UI,
// on cpp-httplib.
//
// Security (docs/dashboard.md):
// - Binds to loopback by default. A non-loopback host is refused unless a token is set.
// - With a token, every /api/ request must carry it (`Authorization: Bearer T` or
//   `?token=T`, compared in constant time) or gets 401. The UI's static files carry no
//   data and are served without it.
// - Without a token (loopback only), /api/ requests whose Host header is not a loopback
//   name get 403: a web page on another origin cannot read the API through DNS rebinding.
// - With a token file (a team server, docs/server.md): each token reads, or writes, only
//   its projects; the runs list shows only those; POST /api/v1/ingest is the one write,
//   bounded in size and, with every other request, in rate per token.
// - Otherwise only GET and HEAD are answered (405 otherwise); nothing is written. Only stores under
//   the logdir are read (server/run_registry.h). Query strings are bounded (414 for a URI
//   over 8 KiB, 400 for an oversized or malformed parameter).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"

namespace httplib {
struct Request;
}

namespace trainscope::server {

class HttpServer;
class AccessList;
class Ingest;
class Api;
class LiveFeed;
class RunRegistry;

// A token shorter than this, or with a space or control character in it, is refused.
inline constexpr size_t kMinTokenChars = 16;

struct ServerOptions {
  std::string logdir;
  std::string host = "127.0.0.1";
  int port = 6007;  // 0: any free port (see port())
  std::string token;  // empty: no token (loopback hosts only)
  // A team server (docs/server.md): grants per project (server/access.h) instead of `token`,
  // the ingest API (POST /api/v1/ingest) on, `logdir` a database.
  std::string token_file;
  size_t max_body_bytes = 16u << 20;  // an ingest batch, as received (413 above)
  double requests_per_second = 100;   // per token, in bursts of up to 4 s worth (429 above)
  int threads = 512;  // most worker threads, started as connections need them; each open connection or event stream holds one
  int max_streams = 32;  // concurrent event streams; more get 503
  std::chrono::milliseconds poll_interval{1000};
  std::chrono::milliseconds stream_keepalive{5000};
};

class DashboardServer {
 public:
  // Checks the options (a non-loopback host needs a token), opens the logdir and binds the
  // socket. Fails naming what was wrong.
  static Status Create(const ServerOptions& options, std::unique_ptr<DashboardServer>* server);
  ~DashboardServer();  // Stop()

  int port() const { return port_; }
  const std::string& host() const { return options_.host; }
  const std::string& root() const;

  // Serves until Stop(); returns after the last request finished.
  Status Run();
  // Thread-safe; may be called from a signal-handling thread.
  void Stop();
  // Answers one request given as the bytes a client sends, without a socket, through the
  // same parser and handlers as a connection: the bytes of the response. For the request
  // fuzz target (fuzz/fuzz_server.cc).
  std::string Answer(std::string_view request);

 private:
  explicit DashboardServer(ServerOptions options);
  // The routes, in the order httplib matches them.
  void Routes();
  void GuardRoutes();
  void EventRoutes();
  void ApiRoutes();
  void AssetRoutes();
  bool Authorized(const std::string& header, const std::string& query_token) const;
  // The token a request carries (Authorization: Bearer T, or ?token=T); empty if none.
  static std::string TokenOf(const httplib::Request& req);
  // Whether the token may make one more request now (a token bucket per token).
  bool WithinRate(const std::string& token);
  void IngestRoutes();

  ServerOptions options_;
  int port_ = 0;
  std::unique_ptr<RunRegistry> registry_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<LiveFeed> feed_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<AccessList> access_;  // a team server's grants; null otherwise
  std::unique_ptr<Ingest> ingest_;
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point refilled;
  };
  std::mutex rate_mu_;
  std::map<std::string, Bucket> rates_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> run_started_{false};
  std::atomic<bool> run_finished_{false};
  std::atomic<int> streams_{0};
};

// 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);
// 32 hex characters from the kernel's random source.
std::string GenerateToken();

}  // namespace trainscope::server
