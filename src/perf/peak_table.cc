#include "perf/peak_table.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace trainscope::perf {

std::string_view EmbeddedPeaksJson();  // peaks_data.cc, generated from data/peaks.json

namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  // trim
  const auto first = out.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = out.find_last_not_of(" \t\r\n");
  return out.substr(first, last - first + 1);
}

Status ReadStrings(const nlohmann::json& device, const char* key, const std::string& where,
                   std::vector<std::string>* out) {
  if (!device.contains(key)) return Status::Ok();
  const auto& list = device.at(key);
  if (!list.is_array()) return Status::InvalidArgument(where + ": \"" + key + "\" must be a list of strings");
  for (const auto& item : list) {
    if (!item.is_string()) return Status::InvalidArgument(where + ": \"" + key + "\" must be a list of strings");
    out->push_back(Lower(item.get<std::string>()));
  }
  return Status::Ok();
}

}  // namespace

std::optional<double> DevicePeak::PeakFlops(std::string_view precision) const {
  const auto found = tflops.find(NormalizePrecision(precision));
  if (found == tflops.end()) return std::nullopt;
  return found->second * 1e12;
}

bool DevicePeak::Matches(std::string_view device_name) const {
  const std::string name = Lower(device_name);
  if (name.empty()) return false;
  if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  for (const auto& exclude : excludes) {
    if (name.find(exclude) != std::string::npos) return false;
  }
  for (const auto& part : contains) {
    if (name.find(part) != std::string::npos) return true;
  }
  return false;
}

Status PeakTable::Parse(std::string_view json_text, std::string_view origin, PeakTable* out) {
  const std::string file(origin);
  nlohmann::json root = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Status::InvalidArgument(file + ": not valid JSON");
  if (!root.is_object() || !root.contains("devices") || !root["devices"].is_array()) {
    return Status::InvalidArgument(file + ": expected an object with a \"devices\" list");
  }
  PeakTable table;
  size_t index = 0;
  for (const auto& device : root["devices"]) {
    const std::string where = file + ": devices[" + std::to_string(index++) + "]";
    if (!device.is_object()) return Status::InvalidArgument(where + ": expected an object");
    DevicePeak peak;
    for (const char* key : {"id", "name", "source", "url"}) {
      if (!device.contains(key) || !device[key].is_string()) {
        return Status::InvalidArgument(where + ": \"" + key + "\" must be a string");
      }
    }
    peak.id = device["id"].get<std::string>();
    peak.name = device["name"].get<std::string>();
    peak.source = device["source"].get<std::string>();
    peak.url = device["url"].get<std::string>();
    if (!device.contains("peaks") || !device["peaks"].is_object()) {
      return Status::InvalidArgument(where + " (" + peak.id + "): \"peaks\" must be an object");
    }
    for (const auto& [precision, value] : device["peaks"].items()) {
      if (NormalizePrecision(precision) != precision) {
        return Status::InvalidArgument(where + " (" + peak.id + "): unknown precision \"" + precision +
                                       "\" (expected fp64, fp32, tf32, fp16, bf16 or fp8)");
      }
      if (value.is_null()) continue;
      if (!value.is_number() || value.get<double>() <= 0) {
        return Status::InvalidArgument(where + " (" + peak.id + "): peaks." + precision +
                                       " must be a positive number of TFLOP/s or null");
      }
      peak.tflops[precision] = value.get<double>();
    }
    for (const char* key : {"names", "contains", "excludes"}) {
      auto* list = key[0] == 'n' ? &peak.names : key[0] == 'c' ? &peak.contains : &peak.excludes;
      if (Status s = ReadStrings(device, key, where, list); !s.ok()) return s;
    }
    if (peak.names.empty() && peak.contains.empty()) {
      return Status::InvalidArgument(where + " (" + peak.id + "): needs \"names\" or \"contains\" to be found");
    }
    table.devices_.push_back(std::move(peak));
  }
  *out = std::move(table);
  return Status::Ok();
}

const PeakTable& PeakTable::Builtin() {
  static const PeakTable table = [] {
    PeakTable parsed;
    // The file is checked by the tests at build time; a broken one leaves the table empty
    // (every device unknown: no MFU) rather than a crash.
    (void)Parse(EmbeddedPeaksJson(), "data/peaks.json (compiled in)", &parsed);
    return parsed;
  }();
  return table;
}

const DevicePeak* PeakTable::Find(std::string_view device_name) const {
  for (const auto& device : devices_) {
    if (device.Matches(device_name)) return &device;
  }
  return nullptr;
}

const DevicePeak* PeakTable::FindById(std::string_view id) const {
  for (const auto& device : devices_) {
    if (device.id == id) return &device;
  }
  return nullptr;
}

std::string NormalizePrecision(std::string_view precision) {
  std::string p = Lower(precision);
  if (p.rfind("torch.", 0) == 0) p = p.substr(6);
  if (p == "fp64" || p == "float64" || p == "double") return "fp64";
  if (p == "fp32" || p == "float32" || p == "float") return "fp32";
  if (p == "tf32") return "tf32";
  if (p == "fp16" || p == "float16" || p == "half") return "fp16";
  if (p == "bf16" || p == "bfloat16") return "bf16";
  if (p == "fp8" || p.rfind("float8", 0) == 0 || p.rfind("fp8_", 0) == 0 || p == "e4m3" || p == "e5m2") return "fp8";
  return "";
}

}  // namespace trainscope::perf
