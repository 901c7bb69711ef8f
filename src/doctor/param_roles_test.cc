#include "doctor/param_roles.h"

#include <gtest/gtest.h>

#include "doctor/detector.h"

namespace trainscope::doctor {
namespace {

TEST(ParamRoles, TorchNamesWhateverTheModuleType) {
  RunFacts facts;  // no module types: by name
  for (const char* p : {"fc.bias", "rnn.bias_ih_l0", "rnn.bias_hh_l0", "lstm.bias_ih_l1_reverse",
                        "gru.bias_hh_l0_reverse", "attn.in_proj_bias", "ln_1.bias"}) {
    EXPECT_EQ(ClassifyParam(p, facts), ParamRole::kBias) << p;
  }
  for (const char* p : {"h.0.ln_1.weight", "ln_f.weight", "model.norm.weight", "layers.0.input_layernorm.weight",
                        "bn1.weight", "layer1.0.bn2.weight", "encoder.LayerNorm.weight", "gn.weight"}) {
    EXPECT_EQ(ClassifyParam(p, facts), ParamRole::kNormScale) << p;
  }
  for (const char* p : {"transformer.wte.weight", "transformer.wpe.weight", "model.embed_tokens.weight",
                        "embedding.weight", "bert.embeddings.word_embeddings.weight", "pos_embedding"}) {
    EXPECT_EQ(ClassifyParam(p, facts), ParamRole::kEmbedding) << p;
  }
  for (const char* p : {"rnn.weight_ih_l0", "rnn.weight_hh_l0", "lstm.weight_ih_l1_reverse", "fc.weight",
                        "conv1.weight", "h.0.attn.c_attn.weight", "lnr.weight", "bnk.weight"}) {
    EXPECT_EQ(ClassifyParam(p, facts), ParamRole::kWeight) << p;
  }
  EXPECT_EQ(ClassifyParam("bn1.running_mean", facts), ParamRole::kBuffer);
  EXPECT_EQ(ClassifyParam("bn1.num_batches_tracked", facts), ParamRole::kBuffer);
}

TEST(ParamRoles, ModuleTypeDecidesOverTheName) {
  RunFacts facts;
  facts.module_types = {{"norm", "LlamaRMSNorm"}, {"tok", "Embedding"}, {"bn", "Linear"}, {"proj", "GroupNorm"},
                        {"embed_conv", "Conv2d"}};
  EXPECT_EQ(ClassifyParam("norm.weight", facts), ParamRole::kNormScale);
  EXPECT_EQ(ClassifyParam("proj.weight", facts), ParamRole::kNormScale);
  EXPECT_EQ(ClassifyParam("tok.weight", facts), ParamRole::kEmbedding);
  EXPECT_EQ(ClassifyParam("bn.weight", facts), ParamRole::kWeight);
  EXPECT_EQ(ClassifyParam("embed_conv.weight", facts), ParamRole::kWeight);
  EXPECT_FALSE(IsBatchNormModule("bn", facts));
  facts.module_types["bn"] = "BatchNorm2d";
  EXPECT_TRUE(IsBatchNormModule("bn", facts));
  EXPECT_TRUE(IsBatchNormModule("layer1.bn2", RunFacts{}));
  EXPECT_FALSE(IsBatchNormModule("ln_1", RunFacts{}));
}

}  // namespace
}  // namespace trainscope::doctor
