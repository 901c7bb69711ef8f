// `trainscope serve LOGDIR [--host 127.0.0.1] [--port 6007] [--token T|auto]`: the dashboard.
// `trainscope server --store postgresql://... [--listen HOST:PORT] [--token-file FILE]`: a
// team's server over a database, with tokens per project and the ingest API (docs/server.md).
#include <fmt/format.h>
#include <signal.h>

#include <thread>

#include "cli/commands.h"
#include "server/server.h"

namespace trainscope::cli {

namespace {

int Serve(server::ServerOptions options) {
  if (options.token == "auto") options.token = server::GenerateToken();
  const std::string& host = options.host;
  const std::string& token = options.token;
  // SIGINT/SIGTERM are taken by a thread that stops the server cleanly (blocked here, before
  // any other thread exists, so every thread inherits the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::unique_ptr<server::DashboardServer> dashboard;
  Status s = server::DashboardServer::Create(options, &dashboard);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope serve: {}\n", s.message());
    return 2;
  }
  const std::string shown_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const std::string url = fmt::format("http://{}:{}/", shown_host, dashboard->port());
  if (!options.token_file.empty()) {
    fmt::print("trainscope serve: {} on {} (tokens of {})\n", dashboard->root(), url, options.token_file);
  } else if (token.empty()) {
    fmt::print("trainscope serve: {} on {}\n", dashboard->root(), url);
  } else {
    // The token travels in the fragment, which browsers never send to a server or log.
    fmt::print("trainscope serve: {} on {}#token={}\n", dashboard->root(), url, token);
    fmt::print("API clients: Authorization: Bearer TOKEN (the token after #token= above)\n");
  }
  std::fflush(stdout);
  server::DashboardServer* raw = dashboard.get();
  std::thread waiter([raw, signals] {
    int received = 0;
    sigwait(&signals, &received);
    raw->Stop();
  });
  s = dashboard->Run();
  // Wake the waiter if the server ended on its own.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (!s.ok()) {
    fmt::print(stderr, "trainscope serve: {}\n", s.message());
    return 2;
  }
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("serve", "Serve the dashboard: every run of LOGDIR, live, in a browser.");
  auto options = std::make_shared<server::ServerOptions>();
  cmd->add_option("LOGDIR", options->logdir,
                  "Directory holding runs (each a directory with trainscope.db), or a database: "
                  "postgresql://host[:port]/database[#project]")
      ->required();
  cmd->add_option("--host", options->host, "Address to listen on; anything but loopback needs --token")
      ->capture_default_str();
  cmd->add_option("--port", options->port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd->add_option("--token", options->token,
                  "Secret every API call must carry (Authorization: Bearer T or ?token=T); 'auto' generates one");
  cmd->add_option("--token-file", options->token_file,
                  "Grants per project, one 'TOKEN PROJECT read|write' a line (a team server over a database)");
  cmd->callback([=] { *exit_code = Serve(*options); });

  auto* team = app.add_subcommand("server", "A team's server over a PostgreSQL database: tokens per project, ingest API.");
  auto listen = std::make_shared<std::string>("127.0.0.1:6007");
  auto team_options = std::make_shared<server::ServerOptions>();
  team->add_option("--store", team_options->logdir, "The database: postgresql://[user@]host[:port]/database")->required();
  team->add_option("--listen", *listen, "HOST:PORT to listen on (loopback by default)")->capture_default_str();
  team->add_option("--token-file", team_options->token_file, "Grants: one 'TOKEN PROJECT read|write' a line")->required();
  team->add_option("--max-body", team_options->max_body_bytes, "Largest ingest batch, in bytes")->capture_default_str();
  team->add_option("--rate", team_options->requests_per_second, "Requests per second per token")->capture_default_str();
  team->callback([=] {
    server::ServerOptions options = *team_options;
    const size_t colon = listen->rfind(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no port");
      options.host = listen->substr(0, colon);
      if (options.host.size() > 1 && options.host.front() == '[') options.host = options.host.substr(1, options.host.size() - 2);
      options.port = std::stoi(listen->substr(colon + 1));
    } catch (const std::exception&) {
      fmt::print(stderr, "trainscope server: --listen {}: expected HOST:PORT\n", *listen);
      *exit_code = 2;
      return;
    }
    *exit_code = Serve(options);
  });
}

}  // namespace trainscope::cli
