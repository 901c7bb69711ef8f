// JSON formats: Hugging Face trainer_state.json, Megatron-LM golden-values JSON, and JSONL
// (one object a line).
//
// JSON as Python writes it may hold NaN, Infinity and -Infinity outside strings; those are
// values (a NaN loss is evidence), so the readers accept them.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/run_data.h"
#include "core/status.h"
#include "ingest/import_stats.h"

namespace trainscope::ingest {

// Parses JSON that may contain NaN/Infinity/-Infinity literals; they become the strings
// "NaN", "Infinity", "-Infinity" (JsonToNumber turns them back). Errors name the line
// and column.
Status ParseLenientJson(std::string_view text, const std::string& name, nlohmann::json* out);

// A JSON number, bool, or one of the non-finite spellings as a string -> double.
bool JsonToNumber(const nlohmann::json& v, double* out);

// trainer_state.json: every numeric key of every log_history entry becomes a scalar series
// under its own name (loss, grad_norm, learning_rate, eval_loss, epoch, custom keys), at
// the entry's "step". Non-numeric values are skipped and counted. Meta: "trainer_state"
// holds the top-level fields other than log_history.
Status ReadTrainerState(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats);

// Megatron-LM golden values: {"lm loss": {"start_step": 1, "end_step": 50,
// "step_interval": 5, "values": {"1": 10.9, ...} or [10.9, ...]}, ...}.
Status ReadMegatronGolden(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats);

// One JSON object a line. The step is the first of step, global_step, iteration, iter,
// _step, trainer/global_step, epoch present; else the line's index. Nested objects are
// flattened with "/". Bad lines are skipped and counted.
Status ReadJsonl(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress = nullptr);
Status ReadJsonlBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats);

}  // namespace trainscope::ingest
