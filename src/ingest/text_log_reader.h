// Text training logs: the lines the common frameworks print, turned into scalar series.
//
// Recognised line families (each line is tried in this order; a line may carry a leading
// "[2023-04-18 01:46:52,554]" timestamp, read as UTC into wall_time, and [bracketed] tags):
//   deepspeed        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536,
//                    reducing to 32768" -> amp/overflow_skip = 1 and amp/loss_scale at the
//                    step the skip happened (the last reported step + skips since, which
//                    is how DeepSpeed counts them); "step=N, skipped=K, lr=[..]" and
//                    "epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=..."
//   megatron         "iteration 100/ 500000 | ... | lm loss: 9.1E+00 | grad norm: 2.3 | ..."
//   pytorch_examples "| epoch 1 | 200/ 2983 batches | lr 20.00 | ms/batch 11.6 | loss nan |
//                    ppl nan", "| end of epoch 1 | time: 35.58s | valid loss nan | ...";
//                    the step is (epoch - 1) * batches per epoch + batch
//   nanogpt          "iter 100: loss 2.3456, time 123.45ms, mfu 12.34%", "step 500: train
//                    loss 2.1, val loss 2.2"
//   hf_dict          "{'loss': 1.23, 'learning_rate': 5e-05, 'epoch': 0.1}"; the step is the
//                    dict's 'step' or else the count of training dicts so far
//   kv               "key: value" / "key=value" pairs separated by "|", "," or ";" (with a
//                    step/iteration/global_step/epoch key giving the step, else the last
//                    step seen)
// Series are named by the printed key ("lm loss", "grad norm", "loss"); a unit printed with a
// value is appended: "time_ms", "mfu_pct", "MemAllocated_GB". Non-finite spellings (nan,
// NaN, inf, -inf, Infinity) are values. Lists print their first element (lr=[a, b] -> a).
// Lines that match nothing are counted, not errors; a file where nothing matched is.
#pragma once

#include <string>
#include <string_view>

#include "core/run_data.h"
#include "core/status.h"
#include "ingest/import_stats.h"
#include "ingest/line_reader.h"

namespace trainscope::ingest {

Status ReadTextLog(const std::string& path, SampleSink* sink, ImportStats* stats, const ProgressFn& progress = nullptr);
Status ReadTextLogBuffer(std::string_view text, const std::string& name, SampleSink* sink, ImportStats* stats);
Status ReadTextLogLines(LineReader& lines, SampleSink* sink, ImportStats* stats);

// The family a single line belongs to ("" if none); used by format detection.
std::string TextLineFamily(std::string_view line);

}  // namespace trainscope::ingest
