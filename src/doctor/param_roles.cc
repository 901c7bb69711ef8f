#include "doctor/param_roles.h"

#include <cctype>
#include <string_view>

#include "doctor/detector.h"

namespace trainscope::doctor {

namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool Contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

std::string LastPart(const std::string& dotted) {
  const size_t dot = dotted.rfind('.');
  return Lower(dot == std::string::npos ? dotted : dotted.substr(dot + 1));
}

// A short name `prefix` alone or followed by a digit or '_': bn, bn1, ln_f, ln_1, gn.
bool ShortName(const std::string& name, std::string_view prefix) {
  if (!StartsWith(name, prefix)) return false;
  const std::string_view tail = std::string_view(name).substr(prefix.size());
  return tail.empty() || tail[0] == '_' || std::isdigit(static_cast<unsigned char>(tail[0]));
}

// Leaf names of an additive bias: `bias`, torch's recurrent `bias_ih_l0`/`bias_hh_l1_reverse`,
// `in_proj_bias`, `q_bias`; a norm layer's shift may be called `beta` or `shift`.
bool IsBiasLeaf(const std::string& leaf) {
  return leaf == "bias" || StartsWith(leaf, "bias_") || EndsWith(leaf, "_bias");
}

bool IsBufferLeaf(const std::string& leaf) {
  return StartsWith(leaf, "running_") || leaf == "num_batches_tracked";
}

bool IsEmbeddingModule(const std::string& module, const RunFacts& facts) {
  const std::string type = Lower(facts.ModuleType(module));
  if (!type.empty()) return Contains(type, "embedding");
  const std::string last = LastPart(module);
  // embedding, embed_tokens, word_embeddings, tok_embeddings, tok_emb; GPT-2's wte/wpe.
  return Contains(last, "emb") || last == "wte" || last == "wpe";
}

}  // namespace

const char* ParamRoleName(ParamRole role) {
  switch (role) {
    case ParamRole::kWeight: return "weight";
    case ParamRole::kBias: return "bias";
    case ParamRole::kNormScale: return "norm_scale";
    case ParamRole::kEmbedding: return "embedding";
    case ParamRole::kBuffer: return "buffer";
  }
  return "weight";
}

bool IsNormModule(const std::string& module, const RunFacts& facts) {
  const std::string type = Lower(facts.ModuleType(module));
  if (!type.empty()) return Contains(type, "norm");
  const std::string last = LastPart(module);
  if (Contains(last, "norm")) return true;
  for (const char* p : {"bn", "ln", "gn"}) {
    if (ShortName(last, p)) return true;
  }
  return false;
}

bool IsBatchNormModule(const std::string& module, const RunFacts& facts) {
  const std::string type = Lower(facts.ModuleType(module));
  if (!type.empty()) return Contains(type, "batchnorm");
  const std::string last = LastPart(module);
  return Contains(last, "batchnorm") || ShortName(last, "bn");
}

ParamRole ClassifyParam(const std::string& param, const RunFacts& facts) {
  const std::string leaf = LastPart(param);
  const std::string module = RunFacts::ModuleOfParam(param);
  if (IsBufferLeaf(leaf)) return ParamRole::kBuffer;
  if (IsBiasLeaf(leaf)) return ParamRole::kBias;
  if (IsNormModule(module, facts)) {
    return leaf == "beta" || leaf == "shift" ? ParamRole::kBias : ParamRole::kNormScale;
  }
  // A free parameter (ViT's pos_embedding) or a table in an embedding module.
  if (Contains(leaf, "emb") || IsEmbeddingModule(module, facts)) return ParamRole::kEmbedding;
  return ParamRole::kWeight;
}

bool IsBiasOrNormParam(const std::string& param, const RunFacts& facts) {
  return IsBiasOrNormParam(ClassifyParam(param, facts));
}

}  // namespace trainscope::doctor
