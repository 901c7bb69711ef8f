#include "server/live_feed.h"

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/store_lease.h"
#include "store/run_store.h"

namespace trainscope::server {

using json = nlohmann::json;

LiveFeed::LiveFeed(RunRegistry* registry, std::chrono::milliseconds interval)
    : registry_(registry), interval_(interval) {}

LiveFeed::~LiveFeed() { Stop(); }

void LiveFeed::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopped_) return;
  thread_ = std::thread([this] { Loop(); });
}

void LiveFeed::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LiveFeed::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    lock.unlock();
    PollOnce();
    lock.lock();
    changed_.wait_for(lock, interval_, [this] { return stopped_; });
  }
}

void LiveFeed::Publish(std::string event_json) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({++seq_, std::move(event_json)});
    while (events_.size() > kHistory) events_.pop_front();
  }
  changed_.notify_all();
}

void LiveFeed::PollOnce() {
  registry_->Refresh();
  const std::vector<std::string> names = registry_->Names();
  // Runs that disappeared.
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (!std::binary_search(names.begin(), names.end(), it->first)) {
      Publish(json({{"type", "removed"}, {"run", it->first}}).dump());
      it = runs_.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::string& name : names) {
    const RunRegistry::Resolved resolved = registry_->Resolve(name);
    if (resolved.http_status != 200) continue;
    const std::string signature = StoreSignature(resolved.db_path);
    RunState& state = runs_[name];
    if (state.announced && state.signature == signature) {
      // Unchanged files; but a "running" run whose writer died turns "crashed" without a
      // write, so the status is re-read on a slower beat through the summary below.
      continue;
    }
    std::unique_ptr<RunStore> store;
    RunMeta meta;
    int64_t max_step = 0;
    std::vector<Finding> findings;
    Status s = RunStore::OpenReadOnly(resolved.db_path, &store);
    if (s.ok()) s = store->ReadMeta(&meta);
    if (s.ok()) s = store->MaxStep(&max_step);
    if (s.ok()) s = store->ReadFindings(&findings);
    if (!s.ok()) continue;  // mid-creation or damaged: looked at again next tick
    state.signature = signature;
    json event = {{"type", "run"},
                  {"run", name},
                  {"status", store->EffectiveStatus(meta)},
                  {"max_step", max_step},
                  {"heartbeat", meta.heartbeat},
                  {"findings", findings.size()}};
    std::string summary = event.dump(-1, ' ', false, json::error_handler_t::replace);
    if (summary == state.summary) continue;
    state.summary = summary;
    if (!state.announced && !first_poll_) event["new"] = true;
    state.announced = true;
    // The first poll only records the state: a client connecting later asks the API.
    if (!first_poll_) Publish(event.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  first_poll_ = false;
}

uint64_t LiveFeed::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

bool LiveFeed::Wait(uint64_t after, std::chrono::milliseconds timeout, std::vector<Event>* out) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return stopped_ || seq_ > after; });
  for (const Event& e : events_) {
    if (e.seq > after) out->push_back(e);
  }
  return !stopped_;
}

}  // namespace trainscope::server
