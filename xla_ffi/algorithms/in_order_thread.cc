#include "algorithms/in_order_thread.h"

#include <exception>
#include <utility>

namespace accl {

InOrderThread::InOrderThread(int chunks, bool threaded, std::function<Status(int)> step,
                             const Deadline& deadline, std::string where)
    : chunks_(chunks), step_(std::move(step)), deadline_(deadline), where_(std::move(where)) {
  if (!threaded || chunks_ < 2) return;  // nothing to overlap: run the steps inline
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception&) {
    // No thread: ready() runs each step inline.
  }
}

Status InOrderThread::ready(int c) {
  if (failed_.load(std::memory_order_acquire)) return status_;
  if (!thread_.joinable()) {
    ready_.store_and_wake(static_cast<uint32_t>(c + 1));  // what ready_count() tells the steps
    for (int k = static_cast<int>(done_.load()); k <= c && k < chunks_; ++k) {
      Status s = run_step(k);
      if (!s.ok()) {
        status_ = s;
        failed_.store(true, std::memory_order_release);
        return s;
      }
      done_.store_and_wake(static_cast<uint32_t>(k + 1));
    }
    return Status::Ok();
  }
  ready_.store_and_wake(static_cast<uint32_t>(c + 1));
  return Status::Ok();
}

Status InOrderThread::wait(int c) {
  if (!thread_.joinable()) return done_.load() > static_cast<uint32_t>(c) ? Status::Ok() : ready(c);
  const Status s =
      done_.wait([c](uint32_t v) { return v > static_cast<uint32_t>(c); }, deadline_, &failed_);
  if (failed_.load(std::memory_order_acquire)) return status_;
  if (s.ok()) return s;
  finish();  // the step running ends by its own deadline, with its own error
  if (failed_.load(std::memory_order_acquire)) return status_;
  return deadline_.ended(
      where_, str_cat("waiting for chunk ", c + 1, " of ", chunks_, " of the second stage"));
}

void InOrderThread::finish() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  ready_.wake_all();
  thread_.join();
}

Status InOrderThread::run_step(int c) {
  try {
    return step_(c);
  } catch (const std::exception& e) {  // nothing may escape a thread, nor the FFI handler
    return Status(Code::kInternal, str_cat(where_, ": chunk ", c + 1, ": ", e.what()));
  }
}

void InOrderThread::run() {
  for (int c = 0; c < chunks_; ++c) {
    // Stopped by a caller that failed: leave. Past the deadline, go on to say why.
    if (stop_.load(std::memory_order_acquire) && !deadline_.expired()) return;
    Status s =
        ready_.wait([c](uint32_t v) { return v > static_cast<uint32_t>(c); }, deadline_, &stop_);
    if (s.ok()) {
      s = run_step(c);
    } else if (stop_.load(std::memory_order_acquire) && !deadline_.expired()) {
      return;  // the caller failed and stopped us
    } else {   // the deadline passed first (the caller's wait may have stopped us since)
      s = deadline_.ended(where_, str_cat("waiting for chunk ", c + 1, " of ", chunks_,
                                          " to be handed to the second stage"));
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
