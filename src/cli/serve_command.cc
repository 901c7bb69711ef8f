// `trainscope serve LOGDIR [--host 127.0.0.1] [--port 6007] [--token T|auto]`: the dashboard.
#include <fmt/format.h>
#include <signal.h>

#include <thread>

#include "cli/commands.h"
#include "server/server.h"

namespace trainscope::cli {

namespace {

int Serve(const std::string& logdir, const std::string& host, int port, std::string token) {
  if (token == "auto") token = server::GenerateToken();
  server::ServerOptions options;
  options.logdir = logdir;
  options.host = host;
  options.port = port;
  options.token = token;
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
  if (token.empty()) {
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
  auto logdir = std::make_shared<std::string>();
  auto host = std::make_shared<std::string>("127.0.0.1");
  auto port = std::make_shared<int>(6007);
  auto token = std::make_shared<std::string>();
  cmd->add_option("LOGDIR", *logdir,
                  "Directory holding runs (each a directory with trainscope.db), or a database: "
                  "postgresql://host[:port]/database[#project]")
      ->required();
  cmd->add_option("--host", *host, "Address to listen on; anything but loopback needs --token")
      ->capture_default_str();
  cmd->add_option("--port", *port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd->add_option("--token", *token,
                  "Secret every API call must carry (Authorization: Bearer T or ?token=T); 'auto' generates one");
  cmd->callback([=] { *exit_code = Serve(*logdir, *host, *port, *token); });
}

}  // namespace trainscope::cli
