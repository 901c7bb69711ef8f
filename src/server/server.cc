#include "server/server.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "server/access.h"
#include "server/api.h"
#include "server/ingest.h"
#include "server/assets.h"
#include "server/elastic_thread_pool.h"
#include "server/live_feed.h"
#include "server/run_registry.h"
#include "store/run_store.h"

namespace trainscope::server {

namespace {

constexpr size_t kMaxRequestHeaders = 64;

void JsonError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  res.set_content("{\"error\":\"" + escaped + "\"}", "application/json");
}

// The host part of a Host header: "[::1]:6007" -> "::1", "localhost:6007" -> "localhost".
std::string HostOfHeader(const std::string& header) {
  if (!header.empty() && header.front() == '[') {
    const size_t end = header.find(']');
    return end == std::string::npos ? header : header.substr(1, end - 1);
  }
  return header.substr(0, header.find(':'));
}

// The header the client's Accept-Encoding is moved to (see the pre-routing handler).
constexpr char kAcceptEncoding[] = "X-Trainscope-Accept-Encoding";
// An ingest batch's Content-Encoding, moved out of httplib's sight: httplib would inflate a
// gzip body without bound (a 100 KB body can inflate to gigabytes); Gunzip bounds it.
constexpr char kContentEncoding[] = "X-Trainscope-Content-Encoding";

// gzip of `in` at `level`; empty on failure.
std::string Gzip(const char* data, size_t size, int level) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return "";
  std::string out(deflateBound(&z, size), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : "";
}

// Inflates a gzip body; false if it is not gzip or inflates past `limit` bytes.
bool Gunzip(const std::string& packed, size_t limit, std::string* out) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return false;
  out->clear();
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  z.avail_in = static_cast<uInt>(packed.size());
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof(buffer);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out->append(buffer, sizeof(buffer) - z.avail_out);
    if (out->size() > limit) {
      rc = Z_BUF_ERROR;
      break;
    }
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END;
}

// Compression pays on a network, not on loopback, and only for bodies of some size.
bool WantsGzip(const httplib::Request& req, size_t size) {
  return size >= 4096 && !IsLoopbackHost(req.remote_addr) &&
         req.get_header_value(kAcceptEncoding).find("gzip") != std::string::npos;
}


// A connection held in memory: the request's bytes to read, the response's bytes written.
// Stops taking bytes after kMaxWrites writes or kMaxBytes bytes, as a client that hangs up
// would, so that an event stream ends.
class MemoryStream : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view request) : request_(request) {}
  bool is_readable() const override { return read_ < request_.size(); }
  bool is_writable() const override { return writes_ < kMaxWrites && written_.size() < kMaxBytes; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - read_);
    std::memcpy(ptr, request_.data() + read_, n);
    read_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ++writes_;
    written_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = "127.0.0.1", port = 40000; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = "127.0.0.1", port = 6007; }
  socket_t socket() const override { return INVALID_SOCKET; }
  std::string& written() { return written_; }

 private:
  static constexpr size_t kMaxBytes = 1 << 20, kMaxWrites = 32;
  std::string_view request_;
  size_t read_ = 0, writes_ = 0;
  std::string written_;
};

}  // namespace

// httplib's server, which also answers a request held in memory (DashboardServer::Answer).
class HttpServer : public httplib::Server {
 public:
  std::string Answer(std::string_view request) {
    MemoryStream stream(request);
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, [](httplib::Request&) {});
    return std::move(stream.written());
  }
};

std::string DashboardServer::Answer(std::string_view request) { return http_->Answer(request); }

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

std::string GenerateToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {};
  random.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  std::string token;
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    token += hex;
  }
  return token;
}

DashboardServer::DashboardServer(ServerOptions options) : options_(std::move(options)) {}

DashboardServer::~DashboardServer() { Stop(); }

const std::string& DashboardServer::root() const { return registry_->root(); }

Status DashboardServer::Create(const ServerOptions& options, std::unique_ptr<DashboardServer>* out) {
  std::unique_ptr<AccessList> access;
  if (!options.token_file.empty()) {
    if (!options.token.empty()) return Status::InvalidArgument("--token and --token-file: give one of them");
    if (!IsDatabaseLocation(options.logdir)) {
      return Status::InvalidArgument(options.logdir + ": a server with a token file keeps its runs in a database "
                                     "(postgresql://host[:port]/database)");
    }
    access = std::make_unique<AccessList>();
    Status loaded = AccessList::Load(options.token_file, access.get());
    if (!loaded.ok()) return loaded;
  }
  if (!IsLoopbackHost(options.host) && options.token.empty() && !access) {
    return Status::InvalidArgument("serving on " + options.host +
                         " (not a loopback address) needs a token: pass --token SECRET, or --token auto "
                         "to have one generated");
  }
  if (!options.token.empty()) {
    const auto visible = std::count_if(options.token.begin(), options.token.end(),
                                       [](unsigned char c) { return std::isgraph(c); });
    if (visible != static_cast<std::ptrdiff_t>(options.token.size()) || options.token.size() < kMinTokenChars) {
      return Status::InvalidArgument("the token has " + std::to_string(visible) + " visible characters" +
                           (visible != static_cast<std::ptrdiff_t>(options.token.size()) ? " and spaces or control characters" : "") +
                           "; use at least " + std::to_string(kMinTokenChars) +
                           " characters, none a space (or --token auto)");
    }
  }
  if (options.port < 0 || options.port > 65535) {
    return Status::InvalidArgument("port " + std::to_string(options.port) + " is not in [0, 65535]");
  }
  std::unique_ptr<DashboardServer> server(new DashboardServer(options));
  Status s = RunRegistry::Open(options.logdir, &server->registry_);
  if (!s.ok()) return s;
  server->api_ = std::make_unique<Api>(server->registry_.get());
  if (access) {
    server->access_ = std::move(access);
    server->ingest_ = std::make_unique<Ingest>(options.logdir.substr(0, options.logdir.find('#')));
  }
  server->feed_ = std::make_unique<LiveFeed>(server->registry_.get(), options.poll_interval);
  server->http_ = std::make_unique<HttpServer>();
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second server on
  // the same port starts as well and the two answer in turn.
  auto listening = std::make_shared<socket_t>(INVALID_SOCKET);
  server->http_->set_socket_options([listening](socket_t sock) {
    int yes = 1;
    (void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
    *listening = sock;
  });
  const int threads = std::max(4, options.threads);
  server->http_->new_task_queue = [threads] { return new ElasticThreadPool(static_cast<size_t>(threads)); };
  // A client that sends nothing for 5 s, between requests or within one, loses its
  // connection (httplib's defaults, said here because the pool relies on them).
  server->http_->set_read_timeout(5, 0);
  server->http_->set_keep_alive_timeout(5);
  server->Routes();
  if (options.port == 0) {
    server->port_ = server->http_->bind_to_any_port(options.host);
    if (server->port_ <= 0) return Status::IOError("cannot bind " + options.host + " on any port");
  } else {
    if (!server->http_->bind_to_port(options.host, options.port)) {
      return Status::IOError("cannot bind " + options.host + ":" + std::to_string(options.port) +
                           " (in use, or not an address of this machine)");
    }
    server->port_ = options.port;
  }
  // Debian's compiled httplib listens with a backlog of 5: a burst of connections (80 slow
  // clients, a page opening 6) overflowed it, and each dropped SYN cost its client a 1 s
  // retry. Listening again on the bound socket raises the backlog (Linux keeps the socket).
  if (*listening != INVALID_SOCKET) (void)::listen(*listening, SOMAXCONN);
  *out = std::move(server);
  return Status::Ok();
}

std::string DashboardServer::TokenOf(const httplib::Request& req) {
  static const std::string kBearer = "Bearer ";
  const std::string header = req.get_header_value("Authorization");
  if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0) return header.substr(kBearer.size());
  return req.get_param_value("token");
}

bool DashboardServer::WithinRate(const std::string& token) {
  const double rate = options_.requests_per_second, burst = 4 * rate;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(rate_mu_);
  auto [it, fresh] = rates_.try_emplace(token, Bucket{burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens = std::min(burst, b.tokens + rate * std::chrono::duration<double>(now - b.refilled).count());
    b.refilled = now;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

bool DashboardServer::Authorized(const std::string& header, const std::string& query_token) const {
  static const std::string kBearer = "Bearer ";
  if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0 &&
      ConstantTimeEquals(header.substr(kBearer.size()), options_.token)) {
    return true;
  }
  return !query_token.empty() && ConstantTimeEquals(query_token, options_.token);
}

void DashboardServer::Routes() {
  httplib::Server& http = *http_;
  http.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                            {"X-Frame-Options", "DENY"},
                            {"Referrer-Policy", "no-referrer"},
                            {"Content-Security-Policy",
                             "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                             "connect-src 'self'; frame-ancestors 'none'"}});
  http.set_keep_alive_max_count(1000);
  // No request bodies but an ingest batch's (a team server's only write).
  http.set_payload_max_length(access_ ? options_.max_body_bytes : 0);
  GuardRoutes();
  EventRoutes();
  if (access_) IngestRoutes();
  ApiRoutes();
  AssetRoutes();
}

// Before any route: every request's token, rate and address checked, and the server's own
// compression chosen.
void DashboardServer::GuardRoutes() {
  httplib::Server& http = *http_;
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Debian's cpp-httplib is built with brotli and compresses every JSON/text answer at
    // brotli's best (slowest) quality: ~700 ms for one 130 KB series. The encoding is chosen
    // here instead (gzip at level 1, off on loopback), so the client's Accept-Encoding is
    // moved out of httplib's sight.
    auto& headers = const_cast<httplib::Request&>(req).headers;
    auto accept = headers.find("Accept-Encoding");
    if (accept != headers.end()) {
      std::string value = accept->second;
      headers.erase(accept);
      headers.emplace(kAcceptEncoding, std::move(value));
    }
    auto content = headers.find("Content-Encoding");
    if (content != headers.end()) {
      std::string value = content->second;
      headers.erase(content);
      headers.emplace(kContentEncoding, std::move(value));
    }
    const bool ingest = access_ && req.method == "POST" && req.path == "/api/v1/ingest";
    if (req.method != "GET" && req.method != "HEAD" && !ingest) {
      res.set_header("Allow", access_ ? "GET, HEAD, POST" : "GET, HEAD");
      JsonError(res, 405,
                access_ ? "only GET and HEAD are answered, and POST to /api/v1/ingest"
                        : "the dashboard is read-only: only GET and HEAD are answered");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Strict framing: a request whose length is ambiguous (Content-Length twice, as request
    // smuggling sends it) or that carries more headers than any browser sends is refused.
    if (req.headers.count("Content-Length") > 1) {
      res.set_header("Connection", "close");
      JsonError(res, 400, "more than one Content-Length");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.headers.size() > kMaxRequestHeaders) {
      res.set_header("Connection", "close");
      JsonError(res, 431, "more than " + std::to_string(kMaxRequestHeaders) + " request headers");
      return httplib::Server::HandlerResponse::Handled;
    }
    // A GET with a body: httplib leaves the body unread (it would be parsed as the next
    // request), so it is refused and the connection closed before any of it is read.
    if (!ingest && ((req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0") ||
                    req.has_header("Transfer-Encoding"))) {
      res.set_header("Connection", "close");
      JsonError(res, 413, "request bodies are refused: the dashboard is read-only");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path.rfind("/api/", 0) != 0 && req.path != "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    if (access_) {
      const std::string token = TokenOf(req);
      if (!access_->Known(token)) {
        res.set_header("WWW-Authenticate", "Bearer");
        JsonError(res, 401, "missing or unknown token (Authorization: Bearer TOKEN)");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!WithinRate(token)) {
        res.set_header("Retry-After", "1");
        JsonError(res, 429, "too many requests for this token");
        return httplib::Server::HandlerResponse::Handled;
      }
    } else if (!options_.token.empty()) {
      const std::string query_token = req.get_param_value("token");
      if (!Authorized(req.get_header_value("Authorization"), query_token)) {
        res.set_header("WWW-Authenticate", "Bearer");
        JsonError(res, 401, "missing or wrong token (Authorization: Bearer TOKEN, or ?token=TOKEN)");
        return httplib::Server::HandlerResponse::Handled;
      }
    } else if (req.has_header("Host") && !IsLoopbackHost(HostOfHeader(req.get_header_value("Host")))) {
      JsonError(res, 403, "without a token the API answers only requests addressed to a loopback name");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

// The live feed: server-sent events of runs that changed, filtered by the token's projects.
void DashboardServer::EventRoutes() {
  httplib::Server& http = *http_;
  http.Get("/api/events", [this](const httplib::Request& req, httplib::Response& res) {
    if (streams_.fetch_add(1) >= options_.max_streams) {
      streams_.fetch_sub(1);
      JsonError(res, 503, "too many open event streams");
      return;
    }
    uint64_t after = feed_->latest();
    const std::string last_id = req.get_header_value("Last-Event-ID");
    if (!last_id.empty()) {
      try {
        after = std::min<uint64_t>(after, std::stoull(last_id));
      } catch (...) {
      }
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto first = std::make_shared<bool>(true);
    // On a team server a stream carries only the events of the token's projects.
    std::function<bool(const std::string&)> readable = [](const std::string&) { return true; };
    if (access_) {
      readable = [this, token = TokenOf(req)](const std::string& event) {
        const auto parsed = nlohmann::json::parse(event, nullptr, false);
        const std::string run = parsed.is_object() ? parsed.value("run", "") : "";
        return access_->Allows(token, ProjectOfRun(run), Scope::kRead);
      };
    }
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, after, first, readable](size_t, httplib::DataSink& sink) mutable {
          std::string chunk;
          if (*first) {
            *first = false;
            chunk = "retry: 2000\nevent: hello\ndata: {\"type\":\"hello\"}\n\n";
          } else {
            std::vector<LiveFeed::Event> events;
            const bool live = feed_->Wait(after, options_.stream_keepalive, &events);
            if (!live || stopping_) {
              sink.done();
              return true;
            }
            for (const LiveFeed::Event& e : events) {
              after = e.seq;
              if (!readable(e.json)) continue;
              chunk += "id: " + std::to_string(e.seq) + "\ndata: " + e.json + "\n\n";
            }
            if (chunk.empty()) chunk = ": keep-alive\n\n";  // also finds clients that left
          }
          return sink.write(chunk.data(), chunk.size());
        },
        [this](bool) { streams_.fetch_sub(1); });
  });

}

// The JSON API (server/api.h) and Prometheus' scrape, under the same token rules.
void DashboardServer::ApiRoutes() {
  httplib::Server& http = *http_;
  // Prometheus' scrape: OpenMetrics text, under the same token rules as the API.
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    Api::ProjectFilter readable;
    if (access_) {
      readable = [this, token = TokenOf(req)](const std::string& project) {
        return access_->Allows(token, project, Scope::kRead);
      };
    }
    res.set_header("Cache-Control", "no-store");
    res.set_content(api_->Metrics(access_ ? &readable : nullptr), "application/openmetrics-text; version=1.0.0; charset=utf-8");
  });

  http.Get(R"(/api/([a-z_]+))", [this](const httplib::Request& req, httplib::Response& res) {
    QueryParams params(req.params.begin(), req.params.end());
    params.erase("token");
    Api::ProjectFilter readable;
    if (access_) {
      readable = [this, token = TokenOf(req)](const std::string& project) {
        return access_->Allows(token, project, Scope::kRead);
      };
    }
    ApiReply reply = api_->Handle(req.matches[1], params, access_ ? &readable : nullptr);
    res.status = reply.status;
    res.set_header("Cache-Control", "no-store");
    res.set_header("Vary", "Accept-Encoding");
    if (WantsGzip(req, reply.body.size())) {
      std::string packed = Gzip(reply.body.data(), reply.body.size(), 1);
      if (!packed.empty()) {
        res.set_header("Content-Encoding", "gzip");
        reply.body = std::move(packed);
      }
    }
    res.set_content(std::move(reply.body), "application/json");
  });

  http.Get(R"(/api/.*)", [](const httplib::Request& req, httplib::Response& res) {
    JsonError(res, 404, "no API endpoint here");
  });
}

// The embedded web UI (server/assets.h), gzipped once per file for clients that take it.
void DashboardServer::AssetRoutes() {
  httplib::Server& http = *http_;
  http.Get(R"(/.*)", [](const httplib::Request& req, httplib::Response& res) {
    const Asset* asset = FindAsset(req.path);
    if (!asset) {
      JsonError(res, 404, "not found");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("Vary", "Accept-Encoding");
    if (WantsGzip(req, asset->size)) {
      // Compressed once per asset, at the best level: they never change.
      static std::mutex mu;
      static std::map<const Asset*, std::string> packed;
      std::lock_guard<std::mutex> lock(mu);
      auto it = packed.find(asset);
      if (it == packed.end()) it = packed.emplace(asset, Gzip(reinterpret_cast<const char*>(asset->data), asset->size, 9)).first;
      if (!it->second.empty()) {
        res.set_header("Content-Encoding", "gzip");
        res.set_content(it->second, asset->content_type);
        return;
      }
    }
    res.set_content(reinterpret_cast<const char*>(asset->data), asset->size, asset->content_type);
  });
}

void DashboardServer::IngestRoutes() {
  httplib::Server& http = *http_;
  auto reply_json = [](httplib::Response& res, const ApiReply& reply) {
    res.status = reply.status;
    res.set_header("Cache-Control", "no-store");
    res.set_content(reply.body, "application/json");
  };
  // project and run of an ingest call, checked; empty project on error (answered).
  auto names = [](const httplib::Request& req, httplib::Response& res, std::string* project, std::string* run) {
    *project = req.get_param_value("project");
    *run = req.get_param_value("run");
    Status s = RunRegistry::ValidateName(*run);
    if (project->empty() || project->find('/') != std::string::npos || !RunRegistry::ValidateName(*project).ok()) {
      s = Status::InvalidArgument("parameter 'project': expected one name without '/'");
    }
    if (!s.ok()) JsonError(res, 400, s.message());
    return s.ok();
  };
  http.Post("/api/v1/ingest", [this, names, reply_json](const httplib::Request& req, httplib::Response& res) {
    std::string project, run;
    if (!names(req, res, &project, &run)) return;
    if (!access_->Allows(TokenOf(req), project, Scope::kWrite)) {
      JsonError(res, 403, "the token may not write to project '" + project + "'");
      return;
    }
    const std::string encoding = req.get_header_value(kContentEncoding);
    if (encoding.empty() || encoding == "identity") {
      reply_json(res, ingest_->Post(project, run, req.body));
      return;
    }
    std::string body;
    if (encoding != "gzip") {
      JsonError(res, 415, "Content-Encoding '" + encoding + "': expected gzip or none");
    } else if (!Gunzip(req.body, options_.max_body_bytes, &body)) {
      JsonError(res, body.size() > options_.max_body_bytes ? 413 : 400,
                body.size() > options_.max_body_bytes
                    ? "the batch inflates past " + std::to_string(options_.max_body_bytes) + " bytes"
                    : "the body is not gzip");
    } else {
      reply_json(res, ingest_->Post(project, run, body));
    }
  });
  http.Get("/api/v1/positions", [this, names, reply_json](const httplib::Request& req, httplib::Response& res) {
    std::string project, run;
    if (!names(req, res, &project, &run)) return;
    if (!access_->Allows(TokenOf(req), project, Scope::kRead)) {
      JsonError(res, 403, "the token may not read project '" + project + "'");
      return;
    }
    reply_json(res, ingest_->Positions(project, run));
  });
  http.Get("/api/projects", [this, reply_json](const httplib::Request& req, httplib::Response& res) {
    reply_json(res, {200, nlohmann::json({{"projects", access_->Projects(TokenOf(req))}}).dump()});
  });
}

Status DashboardServer::Run() {
  run_started_ = true;
  if (stopping_) {
    run_finished_ = true;
    return Status::Ok();
  }
  feed_->Start();
  const bool ok = http_->listen_after_bind();
  run_finished_ = true;
  feed_->Stop();
  if (!ok && !stopping_) return Status::Internal("the HTTP server stopped with an error");
  return Status::Ok();
}

void DashboardServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (feed_) feed_->Stop();  // wakes the event streams, which then end
  if (!http_) return;
  // httplib's stop() does nothing before its listen loop runs: when Run() has begun but
  // is not listening yet, wait for it (Run() itself returns early once stopping_ is set).
  while (run_started_ && !run_finished_ && !http_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  http_->stop();
}

}  // namespace trainscope::server
