// The low-precision formats a run declares: its config and meta read for float16,
// bfloat16 (and bfloat16 weights), FP8 and TF32 settings, each with where it was found.
#include "doctor/detectors/numerics.h"

#include <cctype>

namespace trainscope::doctor {

namespace {

std::string LowerText(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool Contains(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// One (key, value) of a config, judged. `path` is where it was found ("config.precision").
void JudgeSetting(const std::string& key, const nlohmann::json& value, const std::string& path,
                  DeclaredPrecision* d) {
  const std::string k = LowerText(key);
  auto set = [&](bool* flag, std::string* why) {
    if (*flag) return;
    *flag = true;
    *why = path + " = " + value.dump();
  };
  bool enabled = value.is_boolean() && value.get<bool>();
  if (value.is_object() && value.contains("enabled") && value["enabled"].is_boolean()) {
    enabled = value["enabled"].get<bool>();  // DeepSpeed: {"fp16": {"enabled": true}}
  }
  if (enabled) {
    if (k == "fp16" || k == "half" || k == "use_fp16" || k == "fp16_enabled") set(&d->fp16, &d->fp16_why);
    if (k == "bf16" || k == "use_bf16" || k == "bf16_enabled" || k == "bfloat16") set(&d->bf16, &d->bf16_why);
    if (k == "fp8" || k == "use_fp8" || k == "fp8_enabled") set(&d->fp8, &d->fp8_why);
    if (k == "tf32" || k == "allow_tf32" || k == "use_tf32") set(&d->tf32, &d->tf32_why);
    return;
  }
  static const char* kPrecisionKeys[] = {"precision", "dtype", "torch_dtype", "amp", "amp_dtype", "mixed_precision",
                                         "compute_dtype", "param_dtype", "autocast", "autocast_dtype",
                                         "weight_dtype", "model_dtype", "precision_mode", "matmul_precision"};
  bool precision_key = false;
  for (const char* p : kPrecisionKeys) precision_key = precision_key || k == p;
  if (!precision_key) return;
  // Keys that name the parameters' own type: a bfloat16 there means bfloat16 weights.
  const bool weight_key = k == "param_dtype" || k == "torch_dtype" || k == "weight_dtype" || k == "model_dtype" ||
                          k == "dtype";
  if (value.is_number() && value.get<double>() == 16) {
    set(&d->fp16, &d->fp16_why);  // Lightning's precision=16
    return;
  }
  if (!value.is_string()) return;
  const std::string v = LowerText(value.get<std::string>());
  if (Contains(v, "bf16") || Contains(v, "bfloat16")) {
    set(&d->bf16, &d->bf16_why);
    if (weight_key || Contains(v, "true")) {  // Lightning's "bf16-true": the weights too
      d->bf16_weights = true;
    }
  } else if (Contains(v, "fp16") || Contains(v, "float16") || Contains(v, "half") || v == "16" ||
             v.rfind("16-", 0) == 0) {
    set(&d->fp16, &d->fp16_why);
  }
  if (Contains(v, "fp8") || Contains(v, "float8") || Contains(v, "e4m3") || Contains(v, "e5m2")) set(&d->fp8, &d->fp8_why);
  if (Contains(v, "tf32") || (k == "matmul_precision" && (v == "high" || v == "medium"))) set(&d->tf32, &d->tf32_why);
}

void WalkConfig(const nlohmann::json& node, const std::string& path, int depth, DeclaredPrecision* d) {
  if (!node.is_object() || depth > 3) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string here = path + "." + it.key();
    JudgeSetting(it.key(), it.value(), here, d);
    if (it.value().is_object()) WalkConfig(it.value(), here, depth + 1, d);
  }
}

}  // namespace

DeclaredPrecision ParseDeclaredPrecision(const std::map<std::string, std::string>& meta) {
  DeclaredPrecision d;
  for (const char* key : {"config", "precision"}) {
    auto it = meta.find(key);
    if (it == meta.end()) continue;
    nlohmann::json value = nlohmann::json::parse(it->second, nullptr, false);
    if (value.is_discarded()) value = it->second;  // a plain string meta value
    if (value.is_object()) WalkConfig(value, key, 0, &d);
    else JudgeSetting(key, value, key, &d);
  }
  return d;
}

bool IsSixteenBitFloat(const std::string& dtype) {
  const std::string d = Lower(dtype);
  return d.find("bfloat16") != std::string::npos || d.find("float16") != std::string::npos ||
         d.find("half") != std::string::npos || d == "bf16" || d == "fp16" || d.find("torch.bf16") != std::string::npos;
}

}  // namespace trainscope::doctor
