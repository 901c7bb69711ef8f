// The knowledge base: what each finding code means, the causes behind it with the evidence
// that raises or lowers each, and what to do. It is data (data/knowledge/knowledge.json),
// embedded into the library at build time so the binary is self-contained; the doctor's
// detectors name codes and cause ids, the knowledge base supplies the words.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/sample.h"
#include "core/status.h"

namespace trainscope::doctor {

struct CauseInfo {
  std::string id;
  std::string title;
  std::vector<std::string> raised_by;   // evidence that makes this cause more likely
  std::vector<std::string> lowered_by;  // evidence against it
  std::vector<std::string> actions;     // concrete things to do, most useful first
  // Fact ids (facts.h): a fact that holds rules the cause out; a required fact that does
  // not hold keeps it at most at 0.3 and never first; a confirming fact that holds puts it
  // first, at 0.8 or more (the run's own series show it).
  std::vector<std::string> excluded_by;
  std::vector<std::string> required;  // "requires" in the file
  std::vector<std::string> confirmed_by;
};

struct CodeInfo {
  std::string code;
  std::string title;
  std::string meaning;
  std::string severity;  // the usual severity: info, warning, critical
  std::vector<std::string> causes;   // cause ids, most common first
  std::vector<std::string> actions;  // actions whatever the cause
  // Codes this one's finding explains when both are found: those follow from it (the LR
  // collapsed -> the loss plateaus); listed after it whatever their order otherwise.
  std::vector<std::string> explains;
  // About speed, not about what the model learns ("speed": true): one action on top goes
  // to what the model learns first (FirstAction in doctor.h).
  bool speed = false;
  // After a root finding (non-finite weights, or an early blow-up: Doctor::IsConsequence),
  // a finding of this code is folded into the root's evidence instead of standing alone:
  // "broken_weights" after either root, "early_blowup" after a blow-up only, "" never.
  std::string consequence_of;
  // How the report's loss chart marks it: "point" (at its step), "range" (step to
  // last_step) or "" (not on the loss chart).
  std::string loss_mark;
  // The dashboard view it belongs to ("scalars", "performance"): its markers are drawn there
  // and a click opens it unless its location is a series or a layer of its own; "" for the
  // view of its location. The web UI reads it from the same file (web/src/codes.ts).
  std::string view;
};

class KnowledgeBase {
 public:
  // The knowledge base compiled into the library (parsed once; never fails in a correct
  // build: the build checks the file with the same parser through the tests).
  static const KnowledgeBase& Builtin();
  // Parses the JSON text of a knowledge file; `origin` names it in error messages.
  static Status Parse(std::string_view text, std::string_view origin, KnowledgeBase* kb);

  const CodeInfo* Code(std::string_view code) const;
  const CauseInfo* Cause(std::string_view id) const;
  // Actions for a finding: those of its likeliest causes (confidence >= 0.2, at most 3
  // causes), then the code's own, without repeats, at most `max_actions`.
  std::vector<std::string> ActionsFor(const Finding& finding, size_t max_actions = 5) const;

  const std::map<std::string, CodeInfo, std::less<>>& codes() const { return codes_; }
  const std::map<std::string, CauseInfo, std::less<>>& causes() const { return causes_; }

 private:
  std::map<std::string, CodeInfo, std::less<>> codes_;
  std::map<std::string, CauseInfo, std::less<>> causes_;
};

// The text of data/knowledge/knowledge.json as embedded at build time.
std::string_view EmbeddedKnowledgeJson();

}  // namespace trainscope::doctor
