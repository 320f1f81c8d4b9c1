#include "transport/cma.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace accl {
namespace {

Status transfer(bool read, pid_t pid, uint64_t remote, void* local, size_t bytes,
                bool through_kernel = false) {
  if (pid == getpid() && !through_kernel) {  // a device of this process: its memory is ours
    void* theirs = reinterpret_cast<void*>(remote);
    std::memcpy(read ? local : theirs, read ? theirs : local, bytes);
    return Status::Ok();
  }
  size_t done = 0;
  while (done < bytes) {
    iovec mine{static_cast<char*>(local) + done, bytes - done};
    iovec theirs{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t n = read ? process_vm_readv(pid, &mine, 1, &theirs, 1, 0)
                           : process_vm_writev(pid, &mine, 1, &theirs, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      return error(err == ESRCH ? Code::kAborted : Code::kInternal, read ? "reading" : "writing",
                   " the memory of process ", pid,
                   " failed: ", err == ESRCH ? "the process is gone" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

// The holders of the permission, counted under a lock so that the prctl calls happen in
// the order of the count's changes (a revoke never lands after a later allow).
namespace {
std::mutex permission_mutex;
int permission_holders = 0;

void set_ptracer_any(bool any) {
#ifdef PR_SET_PTRACER
  // Fails harmlessly without Yama.
  prctl(PR_SET_PTRACER, any ? PR_SET_PTRACER_ANY : 0UL, 0, 0, 0);
#else
  (void)any;
#endif
}
}  // namespace

CrossMemoryPermission::CrossMemoryPermission() {
  std::lock_guard<std::mutex> lock(permission_mutex);
  if (permission_holders++ == 0) set_ptracer_any(true);
}

CrossMemoryPermission::~CrossMemoryPermission() {
  std::lock_guard<std::mutex> lock(permission_mutex);
  if (--permission_holders == 0) set_ptracer_any(false);
}

bool cross_memory_attach_allowed() {
  std::lock_guard<std::mutex> lock(permission_mutex);
  return permission_holders > 0;
}

Status read_remote(pid_t pid, uint64_t remote, void* local, size_t bytes) {
  return transfer(true, pid, remote, local, bytes);
}

Status probe_remote(pid_t pid, uint64_t remote, void* local, size_t bytes) {
  return transfer(true, pid, remote, local, bytes, /*through_kernel=*/true);
}

ProcessMemory& cross_memory() {
  class Cma final : public ProcessMemory {
   public:
    uint64_t handle() const override { return static_cast<uint64_t>(getpid()); }
    Status read(uint64_t peer, uint64_t remote, void* local, size_t bytes) override {
      return read_remote(static_cast<pid_t>(peer), remote, local, bytes);
    }
    Status write(uint64_t peer, uint64_t remote, const void* local, size_t bytes) override {
      return write_remote(static_cast<pid_t>(peer), remote, local, bytes);
    }
    Status probe(uint64_t peer, uint64_t remote, void* local, size_t bytes) override {
      return probe_remote(static_cast<pid_t>(peer), remote, local, bytes);
    }
  };
  static Cma cma;
  return cma;
}

Status write_remote(pid_t pid, uint64_t remote, const void* local, size_t bytes) {
  return transfer(false, pid, remote, const_cast<void*>(local), bytes);
}

}  // namespace accl
