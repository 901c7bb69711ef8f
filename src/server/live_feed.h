// LiveFeed: what changed in the logdir, as a numbered stream of events for server-sent
// events. A poller thread looks every interval (1 s by default) at each run's store files
// (size and mtime of the .db and its WAL, a stat each: cheap) and, for those that changed,
// reads the run's status, last step, heartbeat and finding count. New runs are discovered
// on the same tick.
//
// Events are JSON objects: {"type": "run", "run", "status", "max_step", "heartbeat",
// "findings", "new"} and {"type": "removed", "run"}. The last kHistory events are kept so
// a reconnecting client resumes from its Last-Event-ID.
//
// Thread-safe. The poller owns its own RunStore objects (stores are single-threaded).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/run_registry.h"

namespace trainscope::server {

class LiveFeed {
 public:
  static constexpr size_t kHistory = 1024;

  struct Event {
    uint64_t seq;
    std::string json;
  };

  // `registry` must outlive the feed.
  LiveFeed(RunRegistry* registry, std::chrono::milliseconds interval);
  ~LiveFeed();  // Stop()
  LiveFeed(const LiveFeed&) = delete;
  LiveFeed& operator=(const LiveFeed&) = delete;

  void Start();
  // Stops the poller and wakes every Wait.
  void Stop();

  // Runs one poll on the caller's thread (tests; Start does it every interval).
  void PollOnce();

  // Sequence number of the newest event (0 when none yet).
  uint64_t latest() const;
  // Appends the events newer than `after` to *out, waiting up to `timeout` for one.
  // Returns false once the feed is stopped.
  bool Wait(uint64_t after, std::chrono::milliseconds timeout, std::vector<Event>* out);

 private:
  struct RunState {
    std::string signature;
    std::string summary;  // the last event's JSON without seq, to detect change
    bool announced = false;  // seen in a successful read (so no longer "new")
  };
  void Loop();
  void Publish(std::string json);

  RunRegistry* registry_;
  const std::chrono::milliseconds interval_;
  std::map<std::string, RunState> runs_;  // poller thread only
  bool first_poll_ = true;               // poller thread only

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Event> events_;
  uint64_t seq_ = 0;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace trainscope::server
