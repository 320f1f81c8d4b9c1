#include "runtime/call_threads.h"

#include <sys/prctl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "common/forced_unwind.h"

namespace accl {
namespace {

// Threads beyond this many leave after a while idle. No cap: a queued call could be the
// one that running calls wait for (its peers' order may differ), so every call that
// blocks gets a thread; past what the system gives, the job runs on the caller's thread.
constexpr int kKeptThreads = 8;
constexpr auto kIdleExit = std::chrono::seconds(10);

// Names the thread for profilers: "accl_call", not the XLA thread it was started from.
void prepare_call_thread() { prctl(PR_SET_NAME, "accl_call", 0, 0, 0); }

struct Pool {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::function<void()>> jobs;
  int threads = 0;
  int idle = 0;

  void loop() {
    prepare_call_thread();
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      ++idle;
      const bool got = ready.wait_for(lock, kIdleExit, [&] { return !jobs.empty(); });
      --idle;
      if (!got) {
        if (threads > kKeptThreads) {
          --threads;
          return;
        }
        continue;
      }
      std::function<void()> job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      try {
        job();  // jobs catch their own exceptions; this only keeps the thread alive
      } catch (ForcedUnwind&) {  // a cancelled thread must unwind to its end
        lock.lock();
        --threads;
        throw;
      } catch (...) {
      }
      job = nullptr;  // release what the job holds before waiting again
      lock.lock();
    }
  }
};

// Never destroyed: idle threads wait on its condition variable until the process exits.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void run_on_call_thread(std::function<void()> job) {
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.jobs.push_back(std::move(job));
    // An idle thread for every queued job: wake one. Otherwise start a thread.
    if (p.idle >= static_cast<int>(p.jobs.size())) {
      p.ready.notify_one();
      return;
    }
    ++p.threads;
  }
  try {
    std::thread([&p] { p.loop(); }).detach();
  } catch (const std::exception&) {  // no thread to be had
    std::function<void()> mine;
    {
      std::lock_guard<std::mutex> lock(p.mutex);
      --p.threads;
      if (p.threads > 0 || p.jobs.empty()) return;  // a running thread takes the job
      mine = std::move(p.jobs.back());
      p.jobs.pop_back();
    }
    mine();  // no thread at all: run it here, blocking
  }
}

}  // namespace accl
