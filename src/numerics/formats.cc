#include "numerics/formats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace trainscope::numerics {

std::string_view EmbeddedFormatsJson();  // generated from data/numerics/formats.json

const char* EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kIeee: return "ieee";
    case Encoding::kFn: return "fn";
    case Encoding::kFnuz: return "fnuz";
    case Encoding::kFinite: return "finite";
  }
  return "ieee";
}

namespace {

bool ParseEncoding(const std::string& name, Encoding* out) {
  for (Encoding e : {Encoding::kIeee, Encoding::kFn, Encoding::kFnuz, Encoding::kFinite}) {
    if (name == EncodingName(e)) {
      *out = e;
      return true;
    }
  }
  return false;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Status DeriveFormat(const FormatLayout& layout, FloatFormat* out) {
  const std::string where = "format '" + layout.name + "': ";
  const int e = layout.exponent_bits;
  const int m = layout.mantissa_bits;
  if (layout.name.empty()) return Status::InvalidArgument("format without a name");
  // Up to FP64's widths, so every value of the format is a double.
  if (e < 1 || e > 11) return Status::InvalidArgument(where + "exponent_bits must be 1..11, got " + std::to_string(e));
  if (m < 0 || m > 52) return Status::InvalidArgument(where + "mantissa_bits must be 0..52, got " + std::to_string(m));
  if (layout.encoding == Encoding::kIeee && m < 1) {
    return Status::InvalidArgument(where + "an 'ieee' encoding needs a mantissa bit to tell NaN from Inf");
  }
  if (layout.encoding == Encoding::kFn && m < 1) {
    return Status::InvalidArgument(where + "an 'fn' encoding needs a mantissa bit (its NaN is S.1..1.1..1)");
  }
  const int top_field = (1 << e) - 1;
  const int bias = layout.bias >= 0 ? layout.bias : (1 << (e - 1)) - 1;
  // The largest exponent field and mantissa that are finite numbers.
  int max_field = top_field;
  uint64_t max_mantissa = (uint64_t{1} << m) - 1;
  switch (layout.encoding) {
    case Encoding::kIeee: max_field = top_field - 1; break;                       // all ones: Inf/NaN
    case Encoding::kFn: max_mantissa = (uint64_t{1} << m) - 2; break;             // S.1..1.1..1: NaN
    case Encoding::kFnuz: case Encoding::kFinite: break;                          // every field is numbers
  }
  if (max_field < 1) return Status::InvalidArgument(where + "no exponent field is left for normal numbers");
  if (bias < 0 || bias > 2000) return Status::InvalidArgument(where + "bias out of range: " + std::to_string(bias));

  FloatFormat f;
  f.layout = layout;
  f.bias = bias;
  f.bits = 1 + e + m;
  f.max_exponent = max_field - bias;
  f.min_exponent = 1 - bias;
  // Every value is (2^m + mantissa) * 2^(exponent - m), or mantissa * 2^(min_exponent - m)
  // for the subnormals: integers times powers of two, exact in a double.
  f.max_finite = std::ldexp(static_cast<double>((uint64_t{1} << m) + max_mantissa), f.max_exponent - m);
  f.min_normal = std::ldexp(1.0, f.min_exponent);
  f.min_subnormal = std::ldexp(1.0, f.min_exponent - m);
  f.epsilon = std::ldexp(1.0, -m);
  f.decimal_digits = (m + 1) * std::log10(2.0);
  f.precision = static_cast<int>(std::floor(-std::log10(f.epsilon)));
  f.resolution = std::pow(10.0, -f.precision);
  f.overflow_threshold = f.max_finite + std::ldexp(1.0, f.max_exponent - m - 1);
  f.underflow_threshold = f.min_subnormal / 2;
  f.normal_threshold = f.min_normal - f.min_subnormal / 2;
  f.has_inf = layout.encoding == Encoding::kIeee;
  f.has_nan = layout.encoding != Encoding::kFinite;
  f.has_negative_zero = layout.encoding != Encoding::kFnuz;
  f.max_pattern = (static_cast<uint64_t>(max_field) << m) | max_mantissa;
  switch (layout.encoding) {
    case Encoding::kIeee:
      f.inf_pattern = static_cast<uint64_t>(top_field) << m;
      f.nan_pattern = f.inf_pattern | (uint64_t{1} << (m - 1));
      f.nan_pattern_count = 2 * ((uint64_t{1} << m) - 1);
      break;
    case Encoding::kFn:
      f.nan_pattern = (static_cast<uint64_t>(top_field) << m) | ((uint64_t{1} << m) - 1);
      f.nan_pattern_count = 2;
      break;
    case Encoding::kFnuz:
      f.nan_pattern = uint64_t{1} << (e + m);  // the sign bit alone: "negative zero"
      f.nan_pattern_count = 1;
      break;
    case Encoding::kFinite: break;
  }
  *out = std::move(f);
  return Status::Ok();
}

double FloatFormat::Round(double x) const {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (a == 0) return x;
  double rounded;
  if (std::isinf(a)) {
    rounded = a;
  } else {
    int exponent = 0;
    std::frexp(a, &exponent);  // a in [2^(exponent-1), 2^exponent)
    const int binade = std::max(exponent - 1, min_exponent);
    const double quantum = std::ldexp(1.0, binade - layout.mantissa_bits);
    rounded = std::nearbyint(a / quantum) * quantum;  // the default mode: ties to even
  }
  if (rounded > max_finite) {
    if (layout.encoding == Encoding::kFinite) rounded = max_finite;  // MX elements saturate
    else if (has_inf) rounded = std::numeric_limits<double>::infinity();
    else return std::numeric_limits<double>::quiet_NaN();
  }
  if (rounded == 0 && !has_negative_zero) return 0.0;
  return std::signbit(x) ? -rounded : rounded;
}

const FormatTable& FormatTable::Builtin() {
  static const FormatTable table = [] {
    FormatTable t;
    const Status s = Parse(EmbeddedFormatsJson(), "data/numerics/formats.json", &t);
    if (!s.ok()) {
      // The file is compiled in and its rows are tested: this is a build from a broken edit.
      std::fprintf(stderr, "trainscope: the built-in format table is invalid: %s\n", s.message().c_str());
    }
    return t;
  }();
  return table;
}

Status FormatTable::Parse(std::string_view json_text, const std::string& source, FormatTable* out) {
  using json = nlohmann::json;
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (doc.is_discarded()) return Status::Corruption(source + ": not valid JSON");
  if (!doc.is_object() || !doc.contains("formats") || !doc["formats"].is_array()) {
    return Status::Corruption(source + ": expected an object with a \"formats\" array");
  }
  FormatTable table;
  size_t index = 0;
  for (const json& row : doc["formats"]) {
    const std::string where = source + ": formats[" + std::to_string(index++) + "]";
    if (!row.is_object()) return Status::Corruption(where + ": expected an object");
    FormatLayout layout;
    auto need_int = [&](const char* key, int* value) -> Status {
      if (!row.contains(key) || !row[key].is_number_integer()) {
        return Status::Corruption(where + ": \"" + key + "\" must be an integer");
      }
      *value = row[key].get<int>();
      return Status::Ok();
    };
    if (!row.contains("name") || !row["name"].is_string() || row["name"].get<std::string>().empty()) {
      return Status::Corruption(where + ": \"name\" must be a non-empty string");
    }
    layout.name = Lower(row["name"].get<std::string>());
    if (Status s = need_int("exponent_bits", &layout.exponent_bits); !s.ok()) return s;
    if (Status s = need_int("mantissa_bits", &layout.mantissa_bits); !s.ok()) return s;
    if (row.contains("bias")) {
      if (Status s = need_int("bias", &layout.bias); !s.ok()) return s;
      if (layout.bias < 0) return Status::Corruption(where + ": \"bias\" must be >= 0");
    }
    const std::string encoding = row.value("encoding", std::string("ieee"));
    if (!ParseEncoding(encoding, &layout.encoding)) {
      return Status::Corruption(where + ": \"encoding\" must be ieee, fn, fnuz or finite, got '" + encoding + "'");
    }
    if (row.contains("aliases")) {
      if (!row["aliases"].is_array()) return Status::Corruption(where + ": \"aliases\" must be an array of strings");
      for (const json& a : row["aliases"]) {
        if (!a.is_string()) return Status::Corruption(where + ": \"aliases\" must be an array of strings");
        layout.aliases.push_back(Lower(a.get<std::string>()));
      }
    }
    layout.torch_dtype = row.value("torch", std::string());
    layout.standard = row.value("standard", std::string());
    FloatFormat format;
    if (Status s = DeriveFormat(layout, &format); !s.ok()) return Status::Corruption(where + ": " + s.message());
    FormatTable one;
    one.formats_.push_back(std::move(format));
    if (Status s = table.Add(one, where); !s.ok()) return s;
  }
  *out = std::move(table);
  return Status::Ok();
}

Status FormatTable::Add(const FormatTable& more, const std::string& source) {
  for (const FloatFormat& f : more.formats_) {
    std::vector<std::string> names = f.layout.aliases;
    names.push_back(f.name());
    for (const std::string& n : names) {
      if (Find(n)) return Status::InvalidArgument(source + ": format name '" + n + "' is already in the table");
    }
    formats_.push_back(f);
  }
  return Status::Ok();
}

const FloatFormat* FormatTable::Find(std::string_view name) const {
  const std::string key = Lower(name);
  for (const FloatFormat& f : formats_) {
    if (f.name() == key) return &f;
    if (std::find(f.layout.aliases.begin(), f.layout.aliases.end(), key) != f.layout.aliases.end()) return &f;
  }
  return nullptr;
}

std::string FormatTable::Names() const {
  std::string out;
  for (const FloatFormat& f : formats_) out += (out.empty() ? "" : ", ") + f.name();
  return out;
}

Status FormatTable::FindList(std::string_view list, std::vector<const FloatFormat*>* out,
                             const std::vector<std::string_view>& all) const {
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view name = list.substr(start, comma - start);
    start = comma + 1;
    if (name.empty()) continue;
    if (name == "all" && !all.empty()) {
      for (std::string_view n : all) out->push_back(Find(n));
      continue;
    }
    const FloatFormat* f = Find(name);
    if (!f) return Status::InvalidArgument("unknown format '" + std::string(name) + "' (known: " + Names() + ")");
    out->push_back(f);
  }
  return Status::Ok();
}

Status LoadFormatTable(const std::string& extra_file, FormatTable* out) {
  FormatTable table = FormatTable::Builtin();
  if (!extra_file.empty()) {
    std::ifstream in(extra_file, std::ios::binary);
    if (!in) return Status::NotFound(extra_file + ": cannot open the formats file");
    std::stringstream text;
    text << in.rdbuf();
    FormatTable more;
    if (Status s = FormatTable::Parse(text.str(), extra_file, &more); !s.ok()) return s;
    if (Status s = table.Add(more, extra_file); !s.ok()) return s;
  }
  *out = std::move(table);
  return Status::Ok();
}

}  // namespace trainscope::numerics
