// Reading TensorBoard event files (events.out.tfevents.*) into the sample stream.
//
// What becomes what:
//   Summary.Value.simple_value                 -> scalar
//   tensor of rank 0 (float, double, half, bfloat16, int32, int64, bool)  -> scalar
//   HistogramProto (histo), and the TF2 "histograms" plugin tensor [k, 3]
//                                              -> TensorStats (numel, min, max, sum, sum of
//                                                 squares, exponent histogram from the buckets)
//   hparams plugin session_start_info          -> meta "hparams" (a JSON object)
//   images, audio, text, pr curves, graphs, run metadata, other plugins
//                                              -> skipped and counted (stats->skipped_values)
//   protobuf fields we do not know             -> skipped and counted (stats->unknown_fields)
// Every point is delivered, duplicates and backward steps included: judging them is the
// doctor's job, not the reader's.
//
// Damage: a record whose data checksum fails is skipped and counted; a broken header or an
// impossible length stops the file with an error naming the file and offset; samples
// before the damage have already been delivered. A file that ends inside a record is not
// an error: stats->partial_tail is set and stats->resume_offset says where to resume.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"
#include "core/status.h"
#include "ingest/import_stats.h"

namespace trainscope::ingest {

struct TfEventsOptions {
  bool verify_crc = true;
  ProgressFn progress;  // optional
  // Optional: called with a buffer offset before which no byte will be read again (the
  // file reader uses it to drop pages already parsed, so memory stays flat).
  std::function<void(uint64_t)> consumed;
};

// Decodes the records in data (the bytes of an event file from file offset `base_offset`)
// into sink. `name` is used in messages. stats accumulates (it is not reset).
Status ReadTfEventsBuffer(std::string_view data, const std::string& name, uint64_t base_offset, SampleSink* sink,
                          ImportStats* stats, const TfEventsOptions& options = {});

// Reads one event file from `offset` (0, or a previous stats->resume_offset) to its end.
Status ReadTfEventsFile(const std::string& path, uint64_t offset, SampleSink* sink, ImportStats* stats,
                        const TfEventsOptions& options = {});

// An event file's name as TensorBoard recognises it ("tfevents" in the name).
bool IsTfEventsFileName(std::string_view filename);

// The runs of a TensorBoard logdir: every directory (the logdir itself included) directly
// holding event files, with those files in name order (which is time order for writer-made
// names). A path to a single event file gives one run of one file.
struct TfEventsRun {
  std::string name;  // path relative to the logdir ("." for the logdir itself)
  std::string dir;
  std::vector<std::string> files;
};
Status FindTfEventsRuns(const std::string& path, std::vector<TfEventsRun>* runs);

// Reads every file of a run, in order, into sink (meta "format" = "tfevents").
Status ReadTfEventsRun(const TfEventsRun& run, SampleSink* sink, ImportStats* stats,
                       const TfEventsOptions& options = {});

// HistogramProto-style buckets -> TensorStats. Bucket i holds counts[i] values in
// (lefts[i], rights[i]]; min/max/sum/sum_squares as the writer computed them.
TensorStats HistogramToStats(double min, double max, double num, double sum, double sum_squares,
                             const std::vector<double>& lefts, const std::vector<double>& rights,
                             const std::vector<double>& counts);

}  // namespace trainscope::ingest
