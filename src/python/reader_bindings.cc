// Reading a recorded run from Python: trainscope.open(path) wraps RunReader.
// Arrays come back as bytearrays of packed native values that python/trainscope/reader.py
// wraps with numpy.frombuffer: pybind11's numpy API reads NumPy's C structures, whose
// layout changed in NumPy 2, and a module built with an older pybind11 then hands out
// arrays with wrong strides and no error. The buffer protocol has one layout everywhere.
// Structured things (meta, findings, tensor stats) come as JSON text that the Python side
// parses (one conversion path, the same as the CLI's).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <nlohmann/json.hpp>

#include "cli/run_diagnosis.h"
#include "cli/source.h"
#include "doctor/doctor.h"
#include "python/bindings.h"
#include "store/json_forms.h"
#include "store/run_store.h"

namespace py = pybind11;
using json = nlohmann::json;

namespace trainscope::python {

namespace {

class RunReader {
 public:
  explicit RunReader(const std::string& path) {
    Status s = RunStore::OpenReadOnly(path, &store_);
    if (!s.ok()) throw py::value_error(s.message());
  }

  std::string MetaJson() {
    RunMeta meta;
    Check(store_->ReadMeta(&meta));
    return RunMetaToJson(meta, store_->EffectiveStatus(meta)).dump();
  }

  std::string SeriesJson() {
    std::vector<SeriesInfo> series;
    Check(store_->ListSeries(&series));
    json out = json::array();
    for (const auto& s : series) {
      out.push_back({{"tag", s.tag},
                     {"kind", SeriesKindName(s.kind)},
                     {"points", s.points},
                     {"first_step", s.first_step},
                     {"last_step", s.last_step},
                     {"last_value", JsonNumber(s.last_value)}});
    }
    return out.dump();
  }

  py::dict Scalars(const std::string& tag, int64_t start, int64_t end) {
    std::vector<Point> points;
    Check(store_->ReadScalars(tag, start, end, &points));
    return ScalarColumns(points);
  }

  static py::dict ScalarColumns(const std::vector<Point>& points) {
    py::dict out;
    out["step"] = Column<int64_t>(points, [](const Point& p) { return p.step; });
    out["value"] = Column<double>(points, [](const Point& p) { return p.value; });
    out["wall_time"] = Column<double>(points, [](const Point& p) { return p.wall_time; });
    return out;
  }

  py::dict Decimated(const std::string& tag, size_t buckets, int64_t start, int64_t end) {
    std::vector<Bucket> b;
    Check(store_->ReadDecimated(tag, buckets, start, end, &b));
    py::dict out;
    out["step_begin"] = Column<int64_t>(b, [](const Bucket& x) { return x.step_begin; });
    out["step_end"] = Column<int64_t>(b, [](const Bucket& x) { return x.step_end; });
    out["last_step"] = Column<int64_t>(b, [](const Bucket& x) { return x.last_step; });
    out["count"] = Column<int64_t>(b, [](const Bucket& x) { return x.count; });
    out["min"] = Column<double>(b, [](const Bucket& x) { return x.min; });
    out["max"] = Column<double>(b, [](const Bucket& x) { return x.max; });
    out["last"] = Column<double>(b, [](const Bucket& x) { return x.last; });
    return out;
  }

  std::string TensorStatsJson(const std::string& tag, int64_t start, int64_t end) {
    std::vector<TensorStatsPoint> points;
    Check(store_->ReadTensorStats(tag, start, end, &points));
    json out = json::array();
    for (const auto& p : points) {
      json item = TensorStatsToJson(p.stats);
      item["step"] = p.step;
      item["wall_time"] = p.wall_time;
      out.push_back(std::move(item));
    }
    return out.dump();
  }

  py::list Vectors(const std::string& tag, int64_t start, int64_t end) {
    std::vector<VectorPoint> points;
    Check(store_->ReadVectors(tag, start, end, &points));
    py::list out;
    for (const auto& p : points) {
      out.append(py::make_tuple(p.step, Packed(p.values.data(), p.values.size())));
    }
    return out;
  }

  std::string SpansJson(int64_t start, int64_t end) {
    std::vector<Span> spans;
    Check(store_->ReadSpans(start, end, &spans));
    json out = json::array();
    for (const auto& s : spans) {
      out.push_back({{"step", s.step}, {"phase", s.phase}, {"start", s.start}, {"duration", s.duration}});
    }
    return out.dump();
  }

  std::string FindingsJson() {
    std::vector<Finding> findings;
    Check(store_->ReadFindings(&findings));
    json out = json::array();
    for (const auto& f : findings) out.push_back(FindingToJson(f));
    return out.dump();
  }

 private:
  template <typename T>
  static py::bytearray Packed(const T* values, size_t n) {
    return py::bytearray(reinterpret_cast<const char*>(values), n * sizeof(T));
  }

  // One field of each row, packed as T: the bytes of a numpy array of that dtype.
  template <typename T, typename Row, typename Field>
  static py::bytearray Column(const std::vector<Row>& rows, Field field) {
    std::vector<T> values(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) values[i] = static_cast<T>(field(rows[i]));
    return Packed(values.data(), values.size());
  }

  static void Check(const Status& s) {
    if (!s.ok()) throw py::value_error(s.message());
  }
  std::unique_ptr<RunStore> store_;
};

}  // namespace

void RegisterReader(py::module_& m) {
  constexpr int64_t kFirst = INT64_MIN, kLast = INT64_MAX;
  py::class_<RunReader>(m, "RunReader")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("meta_json", &RunReader::MetaJson)
      .def("series_json", &RunReader::SeriesJson)
      .def("scalars", &RunReader::Scalars, py::arg("tag"), py::arg("start") = kFirst, py::arg("end") = kLast)
      .def("decimated", &RunReader::Decimated, py::arg("tag"), py::arg("buckets"), py::arg("start") = kFirst,
           py::arg("end") = kLast)
      .def("tensor_stats_json", &RunReader::TensorStatsJson, py::arg("tag"), py::arg("start") = kFirst,
           py::arg("end") = kLast)
      .def("vectors", &RunReader::Vectors, py::arg("tag"), py::arg("start") = kFirst, py::arg("end") = kLast)
      .def("spans_json", &RunReader::SpansJson, py::arg("start") = kFirst, py::arg("end") = kLast)
      .def("findings_json", &RunReader::FindingsJson);
  // Known points through the same packing as RunReader.scalars: reader.py checks them at
  // import, so a build that would hand out wrong arrays refuses to load instead.
  m.def("scalar_columns_probe", [] {
    return RunReader::ScalarColumns({{0, 0.5, 4.0}, {1, 1.5, -1.0}, {10, 2.5, 1e300}, {1LL << 40, 3.5, -0.0}});
  });
  // ts.diagnose(path): the same loading and doctor as `trainscope diagnose --json`.
  m.def(
      "diagnose_json",
      [](const std::string& path) {
        Status s;
        json out;
        {
          py::gil_scoped_release release;
          cli::PathReport report;  // a data-parallel run's ranks compared, as the CLI does
          s = cli::DiagnosePath(path, &report);
          if (s.ok()) out = cli::PathReportJson(report, path);
        }
        if (!s.ok()) throw py::value_error(s.message());
        return out.dump();
      },
      py::arg("path"));
  m.def("list_runs", [](const std::string& logdir) {
    std::vector<RunEntry> runs;
    Status s = ListRuns(logdir, &runs);
    if (!s.ok()) throw py::value_error(s.message());
    py::list out;
    for (const auto& r : runs) out.append(py::make_tuple(r.name, r.dir));
    return out;
  });
}

}  // namespace trainscope::python
