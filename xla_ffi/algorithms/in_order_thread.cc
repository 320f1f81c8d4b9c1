#include "algorithms/in_order_thread.h"

#include <exception>
#include <utility>

namespace accl {

InOrderThread::InOrderThread(int chunks, std::function<Status(int)> step, const Deadline& deadline)
    : chunks_(chunks), step_(std::move(step)), deadline_(deadline) {
  if (chunks_ < 2) return;  // one chunk: nothing to overlap, run it inline
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception&) {
    // No thread: ready() runs each step inline.
  }
}

Status InOrderThread::ready(int c) {
  if (!thread_.joinable()) {
    for (int k = static_cast<int>(done_.load()); k <= c && k < chunks_; ++k) {
      if (!status_.ok()) return status_;
      status_ = step_(k);
      done_.store_and_wake(static_cast<uint32_t>(k + 1));
    }
    return status_;
  }
  ready_.store_and_wake(static_cast<uint32_t>(c + 1));
  return Status::Ok();
}

Status InOrderThread::wait(int c) {
  if (!thread_.joinable()) return done_.load() > static_cast<uint32_t>(c) ? status_ : ready(c);
  Status s =
      done_.wait([c](uint32_t v) { return v > static_cast<uint32_t>(c); }, deadline_, &failed_);
  if (failed_.load(std::memory_order_acquire)) return status_;
  return s;
}

void InOrderThread::finish() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  ready_.wake_all();
  thread_.join();
}

void InOrderThread::run() {
  for (int c = 0; c < chunks_; ++c) {
    if (stop_.load(std::memory_order_acquire)) return;  // the caller failed and stopped us
    Status s =
        ready_.wait([c](uint32_t v) { return v > static_cast<uint32_t>(c); }, deadline_, &stop_);
    if (s.ok()) {
      try {
        s = step_(c);
      } catch (const std::exception& e) {  // nothing may escape a thread
        s = Status(Code::kInternal, e.what());
      }
    } else if (stop_.load(std::memory_order_acquire)) {
      return;  // the caller failed and stopped us
    }
    if (!s.ok()) {
      status_ = s;
      failed_.store(true, std::memory_order_release);
      done_.wake_all();
      return;
    }
    done_.store_and_wake(static_cast<uint32_t>(c + 1));
  }
}

}  // namespace accl
