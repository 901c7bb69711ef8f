// The differential diagnosis: causes a run's own recorded facts contradict are not listed,
// and advice the evidence contradicts is not given. The knowledge base names, per cause,
// the fact ids that exclude it (`excluded_by`) and those it needs (`requires`); this is
// the one table of what each fact id means as a predicate over RunFacts (facts.cc).
// docs/doctor.md "Differential diagnosis".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/sample.h"

namespace trainscope::doctor {

struct RunFacts;
class KnowledgeBase;

enum class FactState { kTrue, kFalse, kUnknown };

struct FactInfo {
  const char* id;
  const char* meaning;  // what holds when the fact is true (evidence text)
  FactState (*eval)(const RunFacts& facts, const Finding& finding);
};

// Every fact id the knowledge base may name, in one table.
const std::vector<FactInfo>& Facts();
const FactInfo* FindFact(std::string_view id);

// Drops the causes a fact excludes; a cause whose required facts do not hold is kept at
// most at 0.3 and after every cause whose requirements hold; writes evidence.decided_by
// (one line: which facts decided the first cause) and evidence.excluded.
void ApplyDifferential(Finding* finding, const RunFacts& facts, const KnowledgeBase& kb);

// Drops actions the run's facts contradict (no "clip" when the script clips, no "raise the
// learning rate" while it has collapsed, no bfloat16 advice for a float32 parameter; noted
// in evidence.actions_dropped) and gives the learning-rate advice its numbers from the
// evidence ("lower the learning rate: from 0.01 to about 0.003").
void FitActionsToFacts(Finding* finding, const RunFacts& facts);

}  // namespace trainscope::doctor
