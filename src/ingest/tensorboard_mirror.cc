#include "ingest/tensorboard_mirror.h"

#include <cstdio>
#include <filesystem>

namespace trainscope::ingest {

namespace fs = std::filesystem;

Status TensorBoardMirror::OnOpen(const RunStart& run, ObserverHost& host) {
  // A given directory is a TensorBoard logdir: each run gets its own folder in it.
  const std::string dir = dir_.empty() ? (fs::path(run.run_dir) / "tensorboard").string()
                                       : (fs::path(dir_) / run.name).string();
  Status created = TfEventsWriter::Create(dir, &writer_);
  if (!created.ok()) return created.WithMessage("tensorboard mirror: " + created.message());
  path_ = writer_->path();
  return Status::Ok();
}

void TensorBoardMirror::OnCommit(Commit& commit) {
  if (!writer_ || failed_) return;
  Status s;
  for (const auto& p : commit.batch.scalars) {
    if (s.ok()) s = writer_->AddScalar(commit.tags[p.series_id], p.step, p.wall_time, p.value);
  }
  for (const auto& p : commit.batch.tensor_stats) {
    // Only statistics with their exponent histogram make a TensorBoard histogram.
    if (s.ok() && p.stats.has_histogram) s = writer_->AddHistogram(commit.tags[p.series_id], p.step, p.wall_time, p.stats);
  }
  if (s.ok()) s = writer_->Flush();
  if (!s.ok()) {
    failed_ = true;
    std::fprintf(stderr, "trainscope: the TensorBoard mirror stopped (%s); the run's store goes on\n",
                 s.message().c_str());
  }
}

void TensorBoardMirror::OnClose(std::vector<Finding>* final_state) {
  if (!writer_) return;
  Status closed = writer_->Close();
  if (!closed.ok() && !failed_) std::fprintf(stderr, "trainscope: %s\n", closed.message().c_str());
  writer_.reset();
}

}  // namespace trainscope::ingest
