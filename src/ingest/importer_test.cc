#include "ingest/importer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ingest/test_util.h"
#include "ingest/tfevents_writer.h"
#include "store/run_io.h"
#include "store/run_store.h"

namespace trainscope::ingest {
namespace {

using testing::TempDir;

TEST(Roles, DefaultsPerFormatAndFallback) {
  RoleMap r = ResolveRoles("tfevents", {"train/loss", "train/grad_norm", "train/learning_rate", "eval/loss"});
  EXPECT_EQ(r["loss"], "train/loss");
  EXPECT_EQ(r["val_loss"], "eval/loss");
  EXPECT_EQ(r["lr"], "train/learning_rate");
  EXPECT_EQ(r["grad_norm"], "train/grad_norm");
  r = ResolveRoles("tfevents/keras", {"batch_loss", "epoch_loss", "epoch_val_loss"});
  EXPECT_EQ(r["loss"], "epoch_loss");
  EXPECT_EQ(r["val_loss"], "epoch_val_loss");
  r = ResolveRoles("csv/yolo", {"train/box_loss", "val/box_loss", "lr/pg0"});
  EXPECT_EQ(r["loss"], "train/box_loss");
  EXPECT_EQ(r["val_loss"], "val/box_loss");
  EXPECT_EQ(r["lr"], "lr/pg0");
  // Nothing listed: the name patterns decide.
  r = ResolveRoles("csv", {"Conductor_Copper_loss", "eval_g0_loss", "loss_scale_x"});
  EXPECT_EQ(r["loss"], "Conductor_Copper_loss");
  EXPECT_EQ(r["val_loss"], "eval_g0_loss");
  // The user's word wins.
  r = ResolveRoles("csv", {"a", "b"}, {{"loss", "b"}});
  EXPECT_EQ(r["loss"], "b");
  RoleMap o;
  EXPECT_TRUE(ParseRoleOverride("val_loss=val/x", &o).ok());
  EXPECT_EQ(o["val_loss"], "val/x");
  EXPECT_FALSE(ParseRoleOverride("loss", &o).ok());
}

TEST(Importer, ImportedRunCarriesFormatRolesAndCounts) {
  TempDir dir;
  testing::WriteFile(dir.File("metrics.log"),
                     "iter 1: loss 2.0, time 10ms, mfu 1%\niter 2: loss nan, time 11ms, mfu 1%\n");
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ImportPath(dir.File("metrics.log"), &run, &s).ok());
  EXPECT_EQ(run.meta["format"], "text_log");
  EXPECT_EQ(run.meta["source"], dir.File("metrics.log"));
  auto roles = nlohmann::json::parse(run.meta["roles"]);
  EXPECT_EQ(roles["loss"], "loss");
  EXPECT_EQ(roles["step_time"], "time_ms");
  auto imported = nlohmann::json::parse(run.meta["import"]);
  EXPECT_EQ(imported["scalars"], 6);
}

TEST(Importer, StoreSinkMakesARunLikeARecordedOne) {
  TempDir dir;
  std::string path;
  uint64_t events = 0;
  RunData original;
  for (int i = 0; i < 50; ++i) original.OnScalar("train/loss", i, 1000.0 + i, 1.0 / (i + 1));
  ASSERT_TRUE(ExportRunToTfEvents(original, dir.File("tb"), &path, &events).ok());
  EXPECT_EQ(events, 51u);
  std::unique_ptr<RunStore> store;
  RunMeta meta;
  meta.name = "imported";
  ASSERT_TRUE(RunStore::Create(dir.File("run"), meta, &store).ok());
  StoreSink sink(store.get());
  ImportStats s;
  ASSERT_TRUE(ImportPath(dir.File("tb"), &sink, &s).ok());
  ASSERT_TRUE(sink.Finish().ok());
  store.reset();
  ASSERT_TRUE(RunStore::OpenReadOnly(dir.File("run"), &store).ok());
  RunData back;
  ASSERT_TRUE(ReadRun(*store, &back).ok());
  const ScalarSeries* loss = back.FindScalar("train/loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->values.size(), 50u);
  EXPECT_EQ(loss->values[3], static_cast<double>(static_cast<float>(0.25)));
  EXPECT_EQ(back.meta["format"], "tfevents");
  EXPECT_NE(back.meta["roles"].find("\"loss\":\"train/loss\""), std::string::npos) << back.meta["roles"];
}

TEST(Importer, DirectoryOfUnrelatedFilesFindsNothing) {
  TempDir dir;
  testing::WriteFile(dir.File("README"), "Just some notes.\nNothing to see.\n");
  testing::WriteFile(dir.File("image.png"), std::string("\x89PNG\r\n\x1a\n\0\0\0", 11));
  testing::WriteFile(dir.File("empty.txt"), "");
  std::vector<ImportSource> sources;
  size_t considered = 0;
  ASSERT_TRUE(FindImportSources(dir.path(), &sources, &considered).ok());
  EXPECT_TRUE(sources.empty());
  EXPECT_EQ(considered, 3u);
  RunData run;
  ImportStats stats;
  const Status missing = ImportPath(dir.File("no-such-file.log"), &run, &stats);
  EXPECT_TRUE(missing.IsNotFound()) << StatusCodeName(missing.code()) << ": " << missing.message();
}

TEST(Importer, LogdirWithMixedSources) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("tb/run1"));
  std::string path;
  uint64_t events;
  RunData r;
  r.OnScalar("x", 1, 0, 1);
  ASSERT_TRUE(ExportRunToTfEvents(r, dir.File("tb/run1"), &path, &events).ok());
  testing::WriteFile(dir.File("metrics.csv"), "step,loss\n1,2\n");
  std::vector<ImportSource> sources;
  size_t considered = 0;
  ASSERT_TRUE(FindImportSources(dir.path(), &sources, &considered).ok());
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].name, "metrics.csv");
  EXPECT_EQ(sources[0].format, Format::kCsv);
  EXPECT_EQ(sources[1].name, "tb/run1");
  EXPECT_EQ(sources[1].format, Format::kTfEvents);
}

}  // namespace
}  // namespace trainscope::ingest
