// How findings are presented: causes merged and ranked, findings sorted worst first with
// ties broken by evidence, findings that differ only by location grouped into one, and the
// finding whose action goes first.
#include <algorithm>
#include <cmath>

#include "doctor/doctor.h"
#include "doctor/knowledge.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

void RaiseCause(std::vector<Cause>* causes, const std::string& id, double confidence) {
  for (Cause& c : *causes) {
    if (c.id == id) {
      c.confidence = 1 - (1 - c.confidence) * (1 - confidence);
      return;
    }
  }
  causes->push_back({id, confidence});
}

void RankCauses(std::vector<Cause>* causes) {
  causes->erase(std::remove_if(causes->begin(), causes->end(), [](const Cause& c) { return c.confidence < 0.05; }),
                causes->end());
  for (Cause& c : *causes) c.confidence = std::round(std::min(c.confidence, 0.95) * 100) / 100;
  std::stable_sort(causes->begin(), causes->end(),
                   [](const Cause& a, const Cause& b) { return a.confidence > b.confidence; });
}

namespace {

int64_t DetectedAt(const Finding& f) {
  const json evidence = json::parse(f.evidence_json, nullptr, false);
  if (evidence.is_object() && evidence.contains("detected_at") && evidence["detected_at"].is_number_integer()) {
    return evidence["detected_at"].get<int64_t>();
  }
  return f.step;
}

// Whether finding a's code explains b's (knowledge.json "explains"), or a is the same
// kind of root the doctor suppresses consequences for.
bool Explains(const Finding& a, const Finding& b) {
  if (a.code == b.code) return false;
  const CodeInfo* info = KnowledgeBase::Builtin().Code(a.code);
  return info && std::find(info->explains.begin(), info->explains.end(), b.code) != info->explains.end();
}

}  // namespace

void SortFindings(std::vector<Finding>* findings) {
  // Worst first, then the earliest; ties are broken by evidence, never by name: the
  // finding whose code explains the other's, then the one the data showed first, then the
  // one with the more confident first cause.
  std::vector<int64_t> detected(findings->size());
  std::vector<size_t> order(findings->size());
  for (size_t i = 0; i < findings->size(); ++i) {
    detected[i] = DetectedAt((*findings)[i]);
    order[i] = i;
  }
  auto top = [](const Finding& f) { return f.causes.empty() ? 0.0 : f.causes.front().confidence; };
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) {
    const Finding& a = (*findings)[i];
    const Finding& b = (*findings)[j];
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.step != b.step) return a.step < b.step;
    const bool ab = Explains(a, b), ba = Explains(b, a);
    if (ab != ba) return ab;
    if (detected[i] != detected[j]) return detected[i] < detected[j];
    return top(a) > top(b);
  });
  std::vector<Finding> sorted;
  for (size_t i : order) sorted.push_back(std::move((*findings)[i]));
  // A consequence never outranks its root: a root found after (or less severe than) what it
  // explains moves up to just before the first finding it explains.
  for (size_t pass = 0; pass < sorted.size(); ++pass) {
    bool moved = false;
    for (size_t r = 0; r < sorted.size() && !moved; ++r) {
      for (size_t c = 0; c < r; ++c) {
        if (Explains(sorted[r], sorted[c]) && !Explains(sorted[c], sorted[r])) {
          Finding root = std::move(sorted[r]);
          sorted.erase(sorted.begin() + static_cast<std::ptrdiff_t>(r));
          sorted.insert(sorted.begin() + static_cast<std::ptrdiff_t>(c), std::move(root));
          moved = true;
          break;
        }
      }
    }
    if (!moved) break;
  }
  *findings = std::move(sorted);
}

namespace {

std::string WithoutLocation(std::string text, const std::string& location) {
  if (location.empty()) return text;
  for (size_t at = text.find(location); at != std::string::npos; at = text.find(location, at + 1)) {
    text.replace(at, location.size(), "\x01");
  }
  return text;
}

json EvidenceWithoutLocation(const json& value, const std::string& location) {
  if (value.is_string()) return WithoutLocation(value.get<std::string>(), location);
  if (value.is_array() || value.is_object()) {
    json out = value;
    for (auto& item : out) item = EvidenceWithoutLocation(item, location);
    return out;
  }
  return value;
}

std::string GroupKey(const Finding& f) {
  std::string key = f.code + '\x02' + SeverityName(f.severity) + '\x02' + std::to_string(f.step) + '\x02' +
                    std::to_string(f.last_step) + '\x02' + WithoutLocation(f.summary, f.location) + '\x02';
  for (const Cause& c : f.causes) key += c.id + '=' + FormatNumber(c.confidence, 6) + ';';
  key += '\x02';
  for (const std::string& a : f.actions) key += WithoutLocation(a, f.location) + '\x03';
  const json evidence = json::parse(f.evidence_json, nullptr, false);
  key += '\x02' + (evidence.is_discarded() ? f.evidence_json : EvidenceWithoutLocation(evidence, f.location).dump());
  return key;
}

}  // namespace

void GroupFindings(std::vector<Finding>* findings) {
  std::map<std::string, size_t> first;             // group key -> index in `out`
  std::vector<std::vector<std::string>> places;    // per kept finding: its locations
  std::vector<Finding> out;
  for (Finding& f : *findings) {
    const std::string key = GroupKey(f);
    auto [it, added] = first.try_emplace(key, out.size());
    if (added) {
      places.push_back({f.location});
      out.push_back(std::move(f));
      continue;
    }
    auto& where = places[it->second];
    if (std::find(where.begin(), where.end(), f.location) == where.end()) where.push_back(f.location);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    json evidence = json::parse(out[i].evidence_json, nullptr, false);
    if (!evidence.is_object()) continue;
    if (places[i].size() < 2) continue;  // a repeat of the same place: one finding, no list
    evidence["locations"] = places[i];
    evidence["count"] = places[i].size();
    out[i].evidence_json = evidence.dump();
    out[i].summary += " (and " + std::to_string(places[i].size() - 1) + " more places like it: evidence.locations)";
  }
  *findings = std::move(out);
}

const Finding* FirstAction(const std::vector<Finding>& findings) {
  if (findings.empty() || findings.front().severity < Severity::kWarning) return nullptr;
  const Severity worst = findings.front().severity;
  const Finding* speed = nullptr;
  for (const Finding& f : findings) {
    if (f.severity != worst) break;
    if (f.actions.empty()) continue;
    const CodeInfo* info = KnowledgeBase::Builtin().Code(f.code);
    if (info == nullptr || !info->speed) return &f;
    if (speed == nullptr) speed = &f;
  }
  return speed;
}

}  // namespace trainscope::doctor
