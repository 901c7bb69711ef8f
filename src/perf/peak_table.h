// The accelerators' dense peak FLOP/s per precision, as data with sources (data/peaks.json,
// compiled in), and which device a name from torch.cuda.get_device_name() is.
//
// A device that is not in the table, or a precision the table has no figure for, has no
// peak: callers report no MFU then, never one against a guessed peak.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainscope::perf {

// The precisions of the table, in its column order.
inline constexpr std::string_view kPrecisions[] = {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8"};

struct DevicePeak {
  std::string id;    // "h100-sxm"
  std::string name;  // "NVIDIA H100 SXM"
  std::map<std::string, double> tflops;  // precision -> dense TFLOP/s; a missing precision has no figure
  std::string source;  // the datasheet and the column read
  std::string url;
  std::vector<std::string> names, contains, excludes;  // lowercased match rules (peaks.json's "about")

  // Dense peak in FLOP/s for a precision ("bf16", "fp32", ...), or nullopt.
  std::optional<double> PeakFlops(std::string_view precision) const;
  bool Matches(std::string_view device_name) const;
};

class PeakTable {
 public:
  // Parses the peaks.json format; `origin` names the text in errors ("data/peaks.json").
  static Status Parse(std::string_view json_text, std::string_view origin, PeakTable* out);
  // The table compiled in from data/peaks.json.
  static const PeakTable& Builtin();

  const std::vector<DevicePeak>& devices() const { return devices_; }
  // The first device whose rules match the name (case-insensitive), or nullptr.
  const DevicePeak* Find(std::string_view device_name) const;
  const DevicePeak* FindById(std::string_view id) const;

 private:
  std::vector<DevicePeak> devices_;
};

// "bfloat16", "torch.bfloat16", "BF16", "float32", "half", "fp8_e4m3" -> the table's names
// (fp64, fp32, tf32, fp16, bf16, fp8); "" when it is none of them.
std::string NormalizePrecision(std::string_view precision);

}  // namespace trainscope::perf
