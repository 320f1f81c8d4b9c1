#include "common/health.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace accl {
namespace {
std::atomic<bool> g_unusable{false};
std::mutex g_mutex;
std::string& why_unusable() {
  static std::string why;
  return why;
}
}  // namespace

void mark_process_unusable(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_unusable.load()) return;
    why_unusable() = why;
    g_unusable.store(true, std::memory_order_release);
  }
  std::fprintf(stderr, "jax_accl: this process is no longer usable: %s\n", why.c_str());
}

Status process_usable() {
  if (!g_unusable.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> lock(g_mutex);
  return error(Code::kAborted,
               "jax_accl: this process is no longer usable (restart the job): ", why_unusable());
}

}  // namespace accl
