// The API's dispatch (server/api.h) and its run-level answers: the runs list, a run, its
// damage, the ranks of a data-parallel run. The per-run series endpoints are api_series.cc's.
#include "server/api.h"

#include "server/access.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/json_number.h"
#include "read/rank_view.h"
#include "read/run_summary.h"
#include "server/api_request.h"
#include "server/store_lease.h"
#include "store/json_forms.h"
#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::server {

using namespace api_request;

ApiReply Api::Handle(const std::string& endpoint, const QueryParams& params, const ProjectFilter* readable) {
  if (params.size() > kMaxParams) {
    return Error(400, "too many query parameters (" + std::to_string(params.size()) + ", at most " +
                          std::to_string(kMaxParams) + ")");
  }
  for (const auto& [key, value] : params) {
    if (key.size() > 64 || value.size() > kMaxParamBytes) {
      return Error(400, "query parameter '" + key.substr(0, 64) + "' is longer than " +
                            std::to_string(kMaxParamBytes) + " bytes");
    }
  }
  if (endpoint == "runs") return Runs(readable);
  if (endpoint == "ranks") return Ranks(params, readable);
  // The per-run endpoints: adding one is one entry here (and its method). The dashboard's
  // views (web/src/views/) name the endpoints they read.
  using Handler = ApiReply (*)(Api*, const std::string& db, const QueryParams&);
  static const std::pair<const char*, Handler> kPerRun[] = {
      {"run", [](Api* a, const std::string& db, const QueryParams&) { return a->Run(db); }},
      {"scalars", [](Api* a, const std::string& db, const QueryParams& p) { return a->Scalars(db, p); }},
      {"tensor_stats", [](Api* a, const std::string& db, const QueryParams& p) { return a->TensorStatsSeries(db, p); }},
      {"layers", [](Api* a, const std::string& db, const QueryParams& p) { return a->Layers(db, p); }},
      {"vectors", [](Api* a, const std::string& db, const QueryParams& p) { return a->Vectors(db, p); }},
      {"spans", [](Api* a, const std::string& db, const QueryParams& p) { return a->Spans(db, p); }},
      {"findings", [](Api* a, const std::string& db, const QueryParams&) { return a->Findings(db); }},
      {"config", [](Api* a, const std::string& db, const QueryParams&) { return a->Config(db); }},
#ifdef TRAINSCOPE_WITH_NUMERICS
      {"numerics", [](Api* a, const std::string& db, const QueryParams& p) { return a->Numerics(db, p); }},
#endif
  };
  Handler handler = nullptr;
  for (const auto& [name, h] : kPerRun) {
    if (endpoint == name) handler = h;
  }
  if (!handler) return Error(404, "no API endpoint '" + endpoint + "'");
  const std::string* run = Param(params, "run");
  if (!run) return Error(400, "parameter 'run' is required");
  if (readable && !(*readable)(ProjectOfRun(*run))) {
    return Error(403, "the token may not read project '" + ProjectOfRun(*run) + "'");
  }
  RunRegistry::Resolved resolved = registry_->Resolve(*run);
  if (resolved.http_status != 200) return Error(resolved.http_status, RedactPaths(resolved.error, registry_->root()));
  const std::string& db = resolved.db_path;
  ApiReply reply = handler(this, db, params);
  // Every answer about a damaged run says so ("damage": what a whole read skips), so that no
  // view shows its series as whole.
  if (reply.status == 200 && !reply.body.empty() && reply.body.back() == '}') {
    if (std::string damage = Damage(db); damage != "null") {
      reply.body.pop_back();
      reply.body += ",\"damage\":" + damage + "}";
    }
  }
  // A failed read may come from a connection left in a bad state (a store rewritten under
  // it): forget it so the next request reopens.
  if (reply.status >= 500) ForgetStores(db);
  if (reply.status >= 400) reply.body = RedactPaths(std::move(reply.body), registry_->root());
  return reply;
}

namespace {

// The rank of a run name's last component rank-<r> (r up to 9 digits), else -1.
int RankOfName(std::string_view name) {
  constexpr std::string_view kPrefix = "rank-";
  if (name.size() <= kPrefix.size() || name.size() > kPrefix.size() + 9 || name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int rank = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    rank = rank * 10 + (c - '0');
  }
  return rank;
}

}  // namespace

ApiReply Api::Ranks(const QueryParams& params, const ProjectFilter* readable) {
  const std::string* group = Param(params, "run");
  if (!group) return Error(400, "parameter 'run' is required (a data-parallel run: the runs <run>/rank-<r>)");
  if (Status s = RunRegistry::ValidateName(*group); !s.ok()) return Error(400, s.message());
  if (readable && !(*readable)(ProjectOfRun(*group))) {
    return Error(403, "the token may not read project '" + ProjectOfRun(*group) + "'");
  }
  const std::string* family_param = Param(params, "family");
  const std::string family = family_param ? *family_param : "grad";
  if (!read::IsRankLayerFamily(family)) return Error(400, "parameter 'family' must be grad, weight, update or act");
  int64_t width = 200;
  std::string error;
  if (!IntParam(params, "width", 1, kMaxWidth, &width, &error)) return Error(400, error);
  registry_->Refresh();
  struct Member {
    int rank;
    std::string name, db;
  };
  std::vector<Member> members;
  std::string signature = family + "|" + std::to_string(width);
  const std::string prefix = *group + "/";
  for (const std::string& name : registry_->Names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const int rank = RankOfName(std::string_view(name).substr(prefix.size()));
    if (rank < 0) continue;
    RunRegistry::Resolved resolved = registry_->Resolve(name);
    if (resolved.http_status != 200) continue;
    members.push_back({rank, name, resolved.db_path});
    signature += "|" + name + "=" + StoreSignature(resolved.db_path);
  }
  if (members.empty()) return Error(404, "no run named " + *group + "/rank-<r>: '" + *group + "' is not a data-parallel run");
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.rank < b.rank; });
  const std::string cache_key = "ranks|" + *group;
  {
    std::lock_guard<std::mutex> lock(summaries_mu_);
    auto it = run_details_.find(cache_key);
    if (it != run_details_.end() && it->second.signature == signature) return {200, it->second.json};
  }
  // A rank whose store cannot be read is named with why; the others are still compared.
  std::vector<read::RankMember> ranks;
  json unreadable = json::array();
  for (const Member& member : members) {
    read::RankMember rank;
    rank.rank = member.rank;
    rank.run = member.name;
    StoreLease store;
    RunMeta meta;
    Status s = StoreFor(member.db, &store);
    if (s.ok()) s = store->ReadMeta(&meta);
    if (s.ok()) s = read::LoadRankMember(*store, family, &rank);
    if (!s.ok()) {
      ForgetStores(member.db);
      unreadable.push_back({{"rank", member.rank}, {"run", member.name}, {"error", RedactPaths(s.message(), registry_->root())}});
      continue;
    }
    rank.status = RunStore::EffectiveStatus(meta);
    ranks.push_back(std::move(rank));
  }
  if (ranks.empty()) return Error(500, "no rank of '" + *group + "' could be read: " + unreadable.dump());
  json view = read::RankViewJson(ranks, family, width);
  view["run"] = *group;
  view["unreadable"] = std::move(unreadable);
  std::string body = Dump(view);
  std::lock_guard<std::mutex> lock(summaries_mu_);
  if (run_details_.size() > 256) run_details_.clear();
  run_details_[cache_key] = {signature, body};
  return {200, std::move(body)};
}

std::string Api::Damage(const std::string& db_path) {
  const std::string signature = StoreSignature(db_path);
  {
    std::lock_guard<std::mutex> lock(summaries_mu_);
    auto it = damage_.find(db_path);
    if (it != damage_.end() && it->second.signature == signature) return it->second.json;
  }
  {
    // A run being written is not read through on each request (its files change every
    // second); it is once it has ended.
    StoreLease store;
    RunMeta meta;
    if (StoreFor(db_path, &store).ok() && store->ReadMeta(&meta).ok() && store->EffectiveStatus(meta) == "running") {
      return "null";
    }
  }
  DamageLog log;
  const Status read = CheckRun(db_path, &log);
  json damage = nullptr;
  if (!read.ok() || log.count()) {
    const std::string summary = read.ok() ? log.Summary() : "not read through: " + read.message();
    damage = {{"records", log.count()}, {"series", log.Series()}, {"summary", RedactPaths(summary, registry_->root())}};
  }
  std::string text = Dump(damage);
  std::lock_guard<std::mutex> lock(summaries_mu_);
  if (damage_.size() > 1024) damage_.clear();
  damage_[db_path] = {signature, text};
  return text;
}

ApiReply Api::Runs(const ProjectFilter* readable) {
  registry_->Refresh();
  json runs = json::array();
  for (const std::string& name : registry_->Names()) {
    if (readable && !(*readable)(ProjectOfRun(name))) continue;
    RunRegistry::Resolved resolved = registry_->Resolve(name);
    if (resolved.http_status != 200) continue;
    const std::string signature = StoreSignature(resolved.db_path);
    {
      std::lock_guard<std::mutex> lock(summaries_mu_);
      auto it = summaries_.find(name);
      if (it != summaries_.end() && it->second.signature == signature) {
        runs.push_back(json::parse(it->second.json));
        continue;
      }
    }
    json entry = {{"name", name}};
    StoreLease store;
    RunMeta meta;
    std::vector<SeriesInfo> series;
    std::vector<Finding> findings;
    int64_t max_step = 0;
    Status s = StoreFor(resolved.db_path, &store);
    if (s.ok()) s = store->ReadMeta(&meta);
    if (s.ok()) s = store->ListSeries(&series);
    if (s.ok()) s = store->ReadFindings(&findings);
    if (!s.ok()) {
      entry["status"] = "unreadable";
      entry["health"] = "unknown";
      entry["error"] = RedactPaths(s.message(), registry_->root());
      runs.push_back(entry);
      continue;  // not cached: it may become readable
    }
    json counts = {{"critical", 0}, {"warning", 0}, {"info", 0}};
    for (const Finding& f : findings) counts[SeverityName(f.severity)] = counts[SeverityName(f.severity)].get<int>() + 1;
    json final_values = json::object();
    for (const SeriesInfo* info : read::FinalValueSeries(series, 64)) final_values[info->tag] = JsonNumber(info->last_value);
    for (const SeriesInfo& info : series) max_step = std::max(max_step, info.points ? info.last_step : 0);
    json config = json::parse(meta.config_json, nullptr, false);
    if (config.is_discarded()) config = json::object();
    const std::string status = store->EffectiveStatus(meta);
    if (!meta.exit_reason.empty()) entry["exit_reason"] = meta.exit_reason;
    if (auto e = meta.extra.find("exception"); e != meta.extra.end()) entry["exception"] = e->second;
    // A run being written is not read through on each poll; any other is, once per version
    // of its files: a damaged store is not listed as whole.
    const json damage = json::parse(Damage(resolved.db_path));
    std::string health = read::RunHealth(findings, status);
    if (!damage.is_null()) {
      entry["damage"] = damage;
      if (health == "ok") health = "damaged";
    }
    entry.update({{"status", status},
                  {"health", health},
                  {"findings", counts},
                  {"start_time", meta.start_time},
                  {"end_time", meta.end_time},
                  {"heartbeat", meta.heartbeat},
                  {"host", meta.host},
                  {"max_step", max_step},
                  {"series", series.size()},
                  {"config", config},
                  {"final", final_values}});
    if (meta.status != "running") {  // a running run may turn "crashed" without a write
      std::lock_guard<std::mutex> lock(summaries_mu_);
      summaries_[name] = {signature, Dump(entry)};
    }
    runs.push_back(std::move(entry));
  }
  return {200, Dump({{"runs", runs}})};
}

ApiReply Api::Run(const std::string& db_path) {
  StoreLease store;
  RunMeta meta;
  std::vector<SeriesInfo> series;
  int64_t max_step = 0;
  // Listing a run of a thousand series costs a few hundred milliseconds; the answer is
  // kept until the store's files change.
  const std::string signature = StoreSignature(db_path);
  {
    std::lock_guard<std::mutex> lock(summaries_mu_);
    auto it = run_details_.find(db_path);
    if (it != run_details_.end() && it->second.signature == signature) return {200, it->second.json};
  }
  Status s = StoreFor(db_path, &store);
  if (s.ok()) s = store->ReadMeta(&meta);
  if (s.ok()) s = store->ListSeries(&series);
  if (!s.ok()) return Error(s);
  for (const SeriesInfo& info : series) max_step = std::max(max_step, info.points ? info.last_step : 0);
  std::sort(series.begin(), series.end(), [](const SeriesInfo& a, const SeriesInfo& b) { return a.id < b.id; });
  json list = json::array();
  for (const SeriesInfo& info : series) {
    list.push_back({{"tag", info.tag},
                    {"kind", SeriesKindName(info.kind)},
                    {"points", info.points},
                    {"first_step", info.first_step},
                    {"last_step", info.last_step},
                    {"last_value", Num(info.last_value)}});
  }
  std::string body = Dump({{"meta", RunMetaToJson(meta, store->EffectiveStatus(meta))},
                           {"max_step", max_step},
                           {"series", list}});
  // A running run's status can turn "crashed" without a write: only finished runs' answers
  // are kept.
  if (meta.status != "running") {
    std::lock_guard<std::mutex> lock(summaries_mu_);
    if (run_details_.size() > 256) run_details_.clear();
    run_details_[db_path] = {signature, body};
  }
  return {200, std::move(body)};
}

}  // namespace trainscope::server
