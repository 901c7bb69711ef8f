#include "watch/helper_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace trainscope::watch {
namespace {

using namespace std::chrono_literals;

TEST(HelperThread, RunsJobsInPushOrderAndTicketsCount) {
  HelperThread helper;
  std::vector<int> order;  // written by the helper only, read after WaitAll
  HelperThread::Ticket first = helper.Push([&] { order.push_back(1); });
  HelperThread::Ticket second = helper.Push([&] { order.push_back(2); });
  HelperThread::Ticket third = helper.Push([&] { order.push_back(3); });
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(second, 2u);
  EXPECT_EQ(third, 3u);
  helper.WaitAll();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(helper.Done(third));
}

TEST(HelperThread, WaitForReturnsBeforeLaterJobsFinish) {
  HelperThread helper;
  std::atomic<bool> release{false}, early_done{false}, late_done{false};
  HelperThread::Ticket early = helper.Push([&] { early_done = true; });
  HelperThread::Ticket late = helper.Push([&] {
    while (!release) std::this_thread::sleep_for(1ms);
    late_done = true;
  });
  helper.WaitFor(early);
  EXPECT_TRUE(early_done);
  EXPECT_FALSE(late_done);  // still spinning: WaitFor(early) did not wait for it
  EXPECT_FALSE(helper.Done(late));
  release = true;
  helper.WaitFor(late);
  EXPECT_TRUE(late_done);
  helper.WaitFor(0);  // "no job": returns at once
}

TEST(HelperThread, PauseHoldsQueuedJobsUntilResume) {
  HelperThread helper;
  helper.Pause();
  std::atomic<int> runs{0};
  HelperThread::Ticket ticket = helper.Push([&] { ++runs; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(runs.load(), 0);
  EXPECT_FALSE(helper.Done(ticket));
  helper.Resume();
  helper.WaitFor(ticket);
  EXPECT_EQ(runs.load(), 1);
}

TEST(HelperThread, DestructorFinishesQueuedJobsEvenWhenPaused) {
  std::atomic<int> runs{0};
  {
    HelperThread helper;
    helper.Pause();
    for (int i = 0; i < 5; ++i) helper.Push([&] { ++runs; });
  }
  EXPECT_EQ(runs.load(), 5);
}

TEST(HelperThread, AJobsCapturesAreReleasedBeforeItsTicketIsDone) {
  // The submitter may free what a job points at once WaitFor returns; the job's own
  // captures (shared owners) must be gone by then too.
  HelperThread helper;
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  HelperThread::Ticket ticket = helper.Push([kept = std::move(held)] { EXPECT_EQ(*kept, 7); });
  helper.WaitFor(ticket);
  EXPECT_TRUE(watch.expired());
}

TEST(HelperThread, RunHereIfIdleRunsOnTheCallerOnlyWhenNothingIsQueuedOrRunning) {
  HelperThread helper;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  HelperThread::Ticket here = helper.RunHereIfIdle([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(here, 1u);  // the ticket sequence is shared with Push
  EXPECT_EQ(ran_on, caller);
  EXPECT_TRUE(helper.Done(here));

  // Busy (a job running): not run, 0 returned; the caller pushes it instead.
  std::atomic<bool> release{false}, started{false};
  HelperThread::Ticket slow = helper.Push([&] {
    started = true;
    while (!release) std::this_thread::sleep_for(1ms);
  });
  while (!started) std::this_thread::sleep_for(1ms);
  bool ran = false;
  EXPECT_EQ(helper.RunHereIfIdle([&] { ran = true; }), 0u);
  EXPECT_FALSE(ran);
  release = true;
  helper.WaitFor(slow);

  // Paused (tests make passes late that way): never run here.
  helper.Pause();
  EXPECT_EQ(helper.RunHereIfIdle([&] { ran = true; }), 0u);
  EXPECT_FALSE(ran);
  helper.Resume();
}

TEST(HelperThread, AJobPushedWhileOneRunsHereWaitsForIt) {
  HelperThread helper;
  std::vector<int> order;
  std::thread other;
  HelperThread::Ticket here = helper.RunHereIfIdle([&] {
    other = std::thread([&] { helper.Push([&] { order.push_back(2); }); });
    std::this_thread::sleep_for(30ms);  // the pushed job must not start meanwhile
    order.push_back(1);
  });
  other.join();
  helper.WaitAll();
  EXPECT_EQ(here, 1u);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace trainscope::watch
