#include "ingest/tfevents_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "ingest/proto_wire.h"
#include "ingest/tfrecord.h"

namespace trainscope::ingest {

namespace fs = std::filesystem;

namespace {

std::string EncodeEvent(int64_t step, double wall_time, const wire::Writer& value) {
  wire::Writer summary;
  summary.Bytes(1, value.data());
  wire::Writer event;
  event.Double(1, wall_time);
  event.Varint(2, static_cast<uint64_t>(step));
  event.Bytes(5, summary.data());
  return event.data();
}

std::string EncodeFileVersion(double wall_time) {
  wire::Writer event;
  event.Double(1, wall_time);
  event.Bytes(3, "brain.Event:2");
  return event.data();
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string EncodeScalarEvent(std::string_view tag, int64_t step, double wall_time, float value) {
  wire::Writer v;
  v.Bytes(1, tag);
  v.Float(2, value);
  return EncodeEvent(step, wall_time, v);
}

std::string EncodeHistogramEvent(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  std::vector<double> limits, counts;
  int first = -1, last = -1;
  for (int i = 0; i < TensorStats::kExponentBins; ++i) {
    if (stats.exponent_counts[i]) {
      if (first < 0) first = i;
      last = i;
    }
  }
  if (stats.zeros || first < 0) {
    limits.push_back(0);
    counts.push_back(static_cast<double>(stats.zeros));
  }
  if (first >= 0) {
    for (int i = first; i <= last; ++i) {
      limits.push_back(std::ldexp(1.0, i + TensorStats::kMinExponent + 1));
      counts.push_back(static_cast<double>(stats.exponent_counts[i]));
    }
  }
  double lo = 0, hi = 0;
  if (first >= 0) {
    lo = stats.zeros ? 0.0 : std::ldexp(1.0, first + TensorStats::kMinExponent);
    hi = std::max(stats.abs_max, lo);
  }
  wire::Writer h;
  h.Double(1, lo);
  h.Double(2, hi);
  h.Double(3, static_cast<double>(stats.finite()));
  h.Double(4, stats.sum);
  h.Double(5, stats.sum_squares);
  h.PackedDoubles(6, limits.data(), limits.size());
  h.PackedDoubles(7, counts.data(), counts.size());
  wire::Writer v;
  v.Bytes(1, tag);
  v.Bytes(5, h.data());
  return EncodeEvent(step, wall_time, v);
}

Status TfEventsWriter::Create(const std::string& dir, std::unique_ptr<TfEventsWriter>* writer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": cannot create directory: " + ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = Now();
  const std::string name = "events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
                           std::to_string(getpid()) + ".trainscope";
  return CreateFile((fs::path(dir) / name).string(), now, writer);
}

Status TfEventsWriter::CreateFile(const std::string& path, double wall_time, std::unique_ptr<TfEventsWriter>* writer) {
  std::unique_ptr<TfEventsWriter> w(new TfEventsWriter);
  w->path_ = path;
  w->file_ = std::fopen(path.c_str(), "wb");
  if (!w->file_) return Status::IOError(path + ": cannot create: " + std::strerror(errno));
  std::setvbuf(w->file_, nullptr, _IOFBF, 1 << 20);
  Status s = w->WriteEvent(EncodeFileVersion(wall_time));
  if (!s.ok()) return s;
  *writer = std::move(w);
  return Status::Ok();
}

TfEventsWriter::~TfEventsWriter() {
  if (file_) std::fclose(file_);
}

Status TfEventsWriter::WriteEvent(std::string_view event) {
  record_.clear();
  AppendTfRecord(event, &record_);
  if (std::fwrite(record_.data(), 1, record_.size(), file_) != record_.size())
    return Status::IOError(path_ + ": write failed: " + std::strerror(errno));
  ++events_;
  return Status::Ok();
}

Status TfEventsWriter::AddScalar(std::string_view tag, int64_t step, double wall_time, double value) {
  return WriteEvent(EncodeScalarEvent(tag, step, wall_time, static_cast<float>(value)));
}

Status TfEventsWriter::AddHistogram(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  return WriteEvent(EncodeHistogramEvent(tag, step, wall_time, stats));
}

Status TfEventsWriter::Flush() {
  if (file_ && std::fflush(file_) != 0) return Status::IOError(path_ + ": flush failed: " + std::strerror(errno));
  return Status::Ok();
}

Status TfEventsWriter::Close() {
  if (!file_) return Status::Ok();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return Status::IOError(path_ + ": close failed: " + std::strerror(errno));
  return Status::Ok();
}

Status ExportRunToTfEvents(const RunData& run, const std::string& dir, std::string* path, uint64_t* events) {
  std::unique_ptr<TfEventsWriter> writer;
  Status s = TfEventsWriter::Create(dir, &writer);
  if (!s.ok()) return s;
  // (step, kind, series, index), sorted by step with ties in logged order.
  struct Item {
    int64_t step;
    uint32_t kind;
    uint32_t series;
    size_t index;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < run.scalars.size(); ++i) {
    for (size_t j = 0; j < run.scalars[i].steps.size(); ++j)
      items.push_back({run.scalars[i].steps[j], 0, static_cast<uint32_t>(i), j});
  }
  for (size_t i = 0; i < run.tensor_stats.size(); ++i) {
    for (size_t j = 0; j < run.tensor_stats[i].steps.size(); ++j)
      items.push_back({run.tensor_stats[i].steps[j], 1, static_cast<uint32_t>(i), j});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.step < b.step; });
  for (const Item& item : items) {
    if (item.kind == 0) {
      const ScalarSeries& series = run.scalars[item.series];
      s = writer->AddScalar(series.tag, item.step, series.wall_times[item.index], series.values[item.index]);
    } else {
      const TensorStatsSeries& series = run.tensor_stats[item.series];
      s = writer->AddHistogram(series.tag, item.step, series.wall_times[item.index], series.stats[item.index]);
    }
    if (!s.ok()) return s;
  }
  *events = writer->events();
  *path = writer->path();
  return writer->Close();
}

}  // namespace trainscope::ingest
