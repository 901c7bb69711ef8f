// What a parameter is for, whatever its module type calls it: the one owner of the rule
// the weight checks use to skip biases, normalisation scales, embeddings and buffers.
// torch names them differently per module type (Linear `bias`, LSTM/GRU/RNN `bias_ih_l0`,
// `bias_hh_l0_reverse`, MultiheadAttention `in_proj_bias`; LayerNorm/BatchNorm/GroupNorm/
// RMSNorm `weight` on a module called ln_1, norm, bn1, input_layernorm; Embedding `weight`
// on wte, embed_tokens, embedding), so no detector matches names itself.
#pragma once

#include <string>

namespace trainscope::doctor {

struct RunFacts;

enum class ParamRole {
  kWeight,     // a weight matrix or kernel (Linear, Conv, LSTM weight_ih_l0/weight_hh_l0, ...)
  kBias,       // an additive bias: starts at 0 (any module type, norm layers' shift too)
  kNormScale,  // the scale of a normalisation layer: starts at 1
  kEmbedding,  // an embedding table or a free embedding parameter (pos_embedding)
  kBuffer,     // running statistics (running_mean, running_var, num_batches_tracked)
};

const char* ParamRoleName(ParamRole role);

// The role of `param` (a dotted name, `module.leaf`), by the module's type from meta
// `module_types` when recorded, else by the names.
ParamRole ClassifyParam(const std::string& param, const RunFacts& facts);

// Whether the module is a normalisation layer (by meta type, else by its name: *norm*,
// bn, bn1, ln_f, ln_1, gn).
bool IsNormModule(const std::string& module, const RunFacts& facts);
// Whether the module is a BatchNorm layer (type *batchnorm*, else a batchnorm/bn* name).
bool IsBatchNormModule(const std::string& module, const RunFacts& facts);

// Not judged by the weight checks: bias, norm scale or buffer (statistics follow other
// rules: biases start at 0, norm scales at 1).
inline bool IsBiasOrNormParam(ParamRole role) {
  return role == ParamRole::kBias || role == ParamRole::kNormScale || role == ParamRole::kBuffer;
}
bool IsBiasOrNormParam(const std::string& param, const RunFacts& facts);

}  // namespace trainscope::doctor
