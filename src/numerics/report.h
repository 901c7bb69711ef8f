// The JSON forms of the numerics part, shared by the CLI (`trainscope numerics ...`) and the
// server (/api/runs/<run>/numerics): one writer per shape (DESIGN.md's contract for fit).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/run_data.h"
#include "numerics/fit.h"
#include "numerics/formats.h"

namespace trainscope::numerics {

// One row of `numerics formats --json`.
nlohmann::json FormatToJson(const FloatFormat& format);
// "2^15 x (2 - 2^-10)": the largest finite value as a formula of its layout.
std::string MaxFormula(const FloatFormat& format);
// A bit pattern in hex with the format's width ("0x7c00").
std::string PatternHex(const FloatFormat& format, uint64_t pattern);

// `numerics fit --json` for one format: {"format", "loss_scale", "loss_scale_exponent",
// "tensors": [{"tag", "family", "layer", "step_first", "step_last", "points", "overflow",
// "underflow", "subnormal", "overflow_min", "underflow_min", "subnormal_min", "lost",
// "abs_max", "abs_max_step", "first_overflow_step", "worst_step", "worst_lost"}],
// "gradient_loss_scale": {...}} (the last only when the run has gradient histograms).
nlohmann::json FitToJson(const RunData& run, const FloatFormat& format, const FitOptions& options);

// The layer x format table the dashboard colours: {"formats": [names], "rows": [{"tag",
// "family", "layer", "step_first", "step_last", "lost": [per format], "overflow": [...],
// "underflow": [...], "subnormal": [...]}]}, rows worst first (their worst format).
nlohmann::json FitMatrixJson(const RunData& run, const std::vector<const FloatFormat*>& formats,
                             const FitOptions& options);

// `numerics fp8 --json`: per tensor, delayed per-tensor scaling in E4M3 for weights and
// activations (forward) and E5M2 for gradients (backward).
nlohmann::json Fp8ReadinessJson(const RunData& run, const FloatFormat& forward, const FloatFormat& backward,
                                int history, int64_t step_min = INT64_MIN, int64_t step_max = INT64_MAX);

}  // namespace trainscope::numerics
