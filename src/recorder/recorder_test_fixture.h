// The fixture of every test that opens a Recorder: a logdir of the test's own under the
// system's temp directory, removed before and after it, and Options pointing into it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "recorder/recorder.h"

namespace trainscope {

class RecorderFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    logdir_ = std::filesystem::temp_directory_path() /
              ("ts_" + std::string(test->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" + test->name());
    std::filesystem::remove_all(logdir_);
  }
  void TearDown() override { std::filesystem::remove_all(logdir_); }
  Recorder::Options Options(const std::string& name) {
    Recorder::Options o;
    o.logdir = logdir_.string();
    o.name = name;
    return o;
  }
  std::filesystem::path logdir_;
};

}  // namespace trainscope
