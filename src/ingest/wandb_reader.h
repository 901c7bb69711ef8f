// Weights & Biases local runs: the run folder (`wandb/run-<time>-<id>/` with `files/`, or
// an older flat folder) and its binary `run-<id>.wandb` datastore.
//
// The datastore is a LevelDB-style record log (wandb/sdk/internal/datastore.py): a 7-byte
// header (":W&B", magic 0xBEE1 little-endian, version 0), then 32 KiB blocks of chunks,
// each a 7-byte header (CRC-32 (zlib) of the type byte and the data, little-endian; uint16
// length; type FULL 1, FIRST 2, MIDDLE 3, LAST 4) and its data; a block's last < 7 bytes are
// zero padding. The chunks join into serialized wandb_internal.Record protobufs
// (wandb/proto/wandb_internal.proto), read here with proto_wire.h. Record types used:
//   history (2)    HistoryRecord: items (key or nested_key, value_json) at step.num ->
//                  one scalar per numeric item; `_step` is the step when step is absent,
//                  `_timestamp` the wall time; `_runtime` and media objects are skipped
//   summary (3)    SummaryRecord updates -> meta "wandb_summary" (JSON object)
//   config (5)     ConfigRecord updates -> meta "config" (JSON object, `_wandb` left out)
//   run (17)       RunRecord: run_id, project, display_name, its config -> meta
//   exit (18)      RunExitRecord: exit_code, runtime -> meta "wandb_exit_code", "wandb_runtime_s"
//   output_raw (13), output (4), stats (7), telemetry (11), files (6), metric (12),
//   header/footer/final (21/22/20) and requests -> counted only (stats: system metrics
//   have a time, not a step).
// A file that ends inside a chunk, or inside a record split over chunks, was cut (or is
// still being written): the complete records before the cut are kept, partial_tail is set
// and a warning says how much was kept. A chunk whose CRC fails is skipped with the rest
// of its block (where the next chunk must start), counted as damaged and named.
//
// The folder: metrics come from whichever of the datastore's history, `wandb-history.jsonl`
// (wandb < 0.10) and the console capture `output.log` (read as a text log) holds the most
// points, since W&B's history is sometimes sparser than what the script printed (nanoGPT
// logs its history only at evaluations); the others are read and noted in meta
// "wandb_sources". `wandb-summary.json` -> meta "wandb_summary", `config.yaml` -> meta
// "config" (each key's `value`; `_wandb` and `wandb_version` left out), `wandb-events.jsonl`
// (system metrics) -> counted.
#pragma once

#include <string>
#include <string_view>

#include "core/run_data.h"
#include "core/status.h"
#include "ingest/import_stats.h"

namespace trainscope::ingest {

// The run-*.wandb datastore in `bytes` (name for messages).
Status ReadWandbDatastore(std::string_view bytes, const std::string& name, SampleSink* sink, ImportStats* stats);
Status ReadWandbDatastoreFile(const std::string& path, SampleSink* sink, ImportStats* stats);

// True if `dir` is a W&B run folder (see above).
bool IsWandbRunFolder(const std::string& dir);
// Reads a run folder as one run, or a lone .wandb file.
Status ReadWandbRun(const std::string& path, SampleSink* sink, ImportStats* stats);

// config.yaml text -> {key: value} (W&B's {desc, value} blocks unwrapped); name for errors.
Status ParseWandbConfig(std::string_view text, const std::string& name, std::string* config_json);

}  // namespace trainscope::ingest
