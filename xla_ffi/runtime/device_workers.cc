#include "runtime/device_workers.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace accl {
namespace {

struct Worker {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::function<void()>> jobs;

  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        ready.wait(lock, [&] { return !jobs.empty(); });
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      try {
        job();  // jobs catch their own exceptions; this only keeps the thread alive
      } catch (...) {
      }
    }
  }
};

Worker& worker_for(int64_t device) {
  // Never destroyed: the workers wait on their condition variables until the process
  // exits, and destroying a condition variable with waiters would hang the exit.
  static auto* mutex = new std::mutex;
  static auto* workers = new std::map<int64_t, std::unique_ptr<Worker>>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*workers)[device];
  if (!slot) {
    auto worker = std::make_unique<Worker>();
    Worker* w = worker.get();
    std::thread([w] { w->loop(); }).detach();  // may throw: then no worker is kept
    slot = std::move(worker);
  }
  return *slot;
}

}  // namespace

void run_on_device_worker(int64_t device, std::function<void()> job) {
  Worker* found = nullptr;
  try {
    found = &worker_for(device);
  } catch (const std::exception&) {  // no thread to be had: run the job here, blocking
    job();
    return;
  }
  Worker& w = *found;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    w.jobs.push_back(std::move(job));
  }
  w.ready.notify_one();
}

}  // namespace accl
