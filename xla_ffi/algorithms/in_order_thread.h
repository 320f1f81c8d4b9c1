// A second thread for a two-stage pipeline: it runs step(0), step(1), ... in order, each
// once the caller has handed that chunk over (ready), while the caller's thread works
// on the next chunks; the caller waits for a chunk's step where it needs its result.
// Unthreaded (asked so, or where no thread can be started), ready(c) runs the steps up
// to c inline (same order, no overlap).
//
// A step that fails ends the thread: every later ready or wait returns its error at
// once. The caller that fails stops the thread with finish() (the destructor does it
// too); a step already running ends by itself (its link's deadline and liveness checks)
// before the join returns. A wait that outlives the deadline joins the thread first, so
// that a step's own error (naming its peer) is the one returned where there is one.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "common/status.h"
#include "common/wait.h"

namespace accl {

class InOrderThread {
 public:
  // `where` names the stage in errors ("reduce-scatter by host: ...").
  InOrderThread(int chunks, bool threaded, std::function<Status(int)> step,
                const Deadline& deadline, std::string where);
  ~InOrderThread() { finish(); }
  InOrderThread(const InOrderThread&) = delete;
  InOrderThread& operator=(const InOrderThread&) = delete;

  // Chunks 0..c are ready for their steps.
  Status ready(int c);
  // Waits until step(c) has returned; its error, or the first step's that failed.
  Status wait(int c);
  // Stops the thread after the step it is running and joins it.
  void finish();
  bool threaded() const { return thread_.joinable(); }
  // How many chunks the caller has handed over so far (a step may take up those after
  // its own: the streamed step between hosts posts every ready chunk's slice).
  int ready_count() const { return static_cast<int>(ready_.load()); }

 private:
  void run();
  Status run_step(int c);  // step(c), an exception as its error

  int chunks_;
  std::function<Status(int)> step_;
  Deadline deadline_;
  std::string where_;
  Status status_;  // written by the thread before failed_ is set
  Flag ready_, done_;
  std::atomic<bool> stop_{false}, failed_{false};
  std::thread thread_;
};

}  // namespace accl
