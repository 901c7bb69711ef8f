// Store-and-forward from a rank to a team server (docs/server.md). The rank writes its local
// SQLite file as always; the Forwarder, on a thread of its own, reads what is committed there
// and sends it to the server's ingest API (server/ingest.h), from the positions the server
// says it holds. It never blocks the training, never sends a point the server has (the
// server's positions advance in the transaction that stores the batch), and after a network
// or server outage it asks the server where it is and goes on from there.
//
// As a recorder observer (recorder/observer.h) it is woken by each commit and given a few
// seconds at the close to send the rest; what it could not send stays in the file, and
// `trainscope push RUN --to http://server --project P` sends it later, from the same
// positions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "recorder/observer.h"

namespace trainscope {

struct ForwardTarget {
  std::string server;  // http://host:port (https:// too)
  std::string token;   // with write scope on the project
  std::string project;
  std::string run;     // the run's name on the server
};

// Where a rank forwards to, from TRAINSCOPE_SERVER, TRAINSCOPE_TOKEN and the project given to
// ts.init (or TRAINSCOPE_PROJECT). Empty server: no forwarding.
ForwardTarget ForwardTargetFromEnvironment(const std::string& project, const std::string& run);

// What one forwarding pass did.
struct ForwardStats {
  int64_t batches = 0;
  int64_t points = 0;   // scalar points sent
  int64_t rows = 0;     // tensor statistics, vectors and spans sent
  int64_t failures = 0; // requests that failed (retried)
  bool closed = false;  // the run's end was sent
  std::string last_error;
};

// Sends every committed record of the run file at `db_path` the server does not hold yet,
// in batches of about `batch_points` records; returns when all is sent (Ok) or at the first
// failure. `close` adds the run's end (its status) once everything else is there.
Status ForwardOnce(const std::string& db_path, const ForwardTarget& target, bool close, ForwardStats* stats,
                   int64_t batch_points = 50000);

class Forwarder : public RecorderObserver {
 public:
  explicit Forwarder(ForwardTarget target, double close_timeout_seconds = 10);
  ~Forwarder() override;

  Status OnOpen(const RunStart& run, ObserverHost& host) override;
  void OnCommit(Commit& commit) override;
  void OnClose(std::vector<Finding>* final_state) override;

  ForwardStats stats() const;

 private:
  void Loop();

  ForwardTarget target_;
  double close_timeout_seconds_;
  std::string db_path_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool pending_ = false;  // a commit since the last pass
  bool closing_ = false;        // the recorder closed the run, or the forwarder goes
  bool run_closed_ = false;     // the recorder closed the run (OnClose): its end is sent too
  ForwardStats stats_;
};

}  // namespace trainscope
