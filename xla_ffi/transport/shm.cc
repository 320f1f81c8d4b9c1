#include "transport/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "transport/ring_channel.h"

namespace accl {
namespace {

constexpr uint32_t kShmMagic = 0x4143434c;  // "ACCL": sized and ready

std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& pending_names() {
  static std::set<std::string> names;
  return names;
}

std::string mib(uint64_t bytes) { return str_cat(bytes >> 20, " MiB"); }

// What to tell the user when /dev/shm cannot hold a segment.
Status no_space(const std::string& name, size_t bytes, int e, const std::string& label) {
  struct statvfs fs;
  std::string room = "its size unknown";
  if (statvfs("/dev/shm", &fs) == 0) {
    room = str_cat(mib(uint64_t{fs.f_blocks} * fs.f_frsize), ", ",
                   mib(uint64_t{fs.f_bavail} * fs.f_frsize), " free");
  }
  return error(Code::kInternal, label, ": cannot allocate ", mib(bytes), " of shared memory for ",
               name, " in /dev/shm (", room, "): ", std::strerror(e),
               ". Each pair of devices in different processes of a host needs one; give "
               "/dev/shm more room (docker run --shm-size=1g, or a larger tmpfs) or run fewer "
               "processes per host");
}

void sleep_a_little() { std::this_thread::sleep_for(std::chrono::microseconds(500)); }

// Marks a channel space failed: an empty file of this user's alone (no page is written).
void mark_failed(const std::string& failed_marker) {
  int fd = shm_open(failed_marker.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return;
  close(fd);
  std::lock_guard<std::mutex> lock(names_mutex());
  pending_names().insert(failed_marker);  // unlinked at exit if the space outlives us
}

bool marked_failed(const std::string& failed_marker) {
  int fd = shm_open(failed_marker.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  struct stat st;
  const bool ours = fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 077) == 0;
  close(fd);
  return ours;
}

// Side 0: creates the segment (refusing one that exists), allocates every page of it
// (so that a full /dev/shm is an error now, not SIGBUS at first touch) and marks it
// ready. When the allocation fails it marks the space failed, for side 1.
Status create_segment(const std::string& name, const std::string& failed_marker, size_t bytes,
                      const std::string& label, void** region) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {
      return error(Code::kInternal, label, ": shared-memory segment ", name,
                   " exists already, and only this job could have made its name: refusing it");
    }
    return error(Code::kInternal, label, ": shm_open(", name, "): ", std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> lock(names_mutex());
    pending_names().insert(name);
  }
  int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (e != 0) {
    close(fd);
    mark_failed(failed_marker);
    return no_space(name, bytes, e, label);
  }
  *region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  e = errno;
  close(fd);
  if (*region == MAP_FAILED) {
    return error(Code::kInternal, label, ": mmap(", name, "): ", std::strerror(e));
  }
  // Allocated pages read as zeros: the initial state of the rings.
  static_cast<RingPairHeader*>(*region)->magic.store(kShmMagic, std::memory_order_release);
  return Status::Ok();
}

// Side 1: waits for side 0's segment, checks that it is this user's alone and fully
// sized, maps it and waits until it is marked ready.
Status open_segment(const std::string& name, const std::string& failed_marker, size_t bytes,
                    const std::string& label, const Deadline& deadline, void** region) {
  auto timed_out = [&](const char* what) {
    return deadline.ended(
        label, str_cat("waiting for the peer to ", what, " shared-memory segment ", name));
  };
  auto peer_failed = [&] {
    return error(Code::kInternal, label, ": the peer process could not allocate the shared ",
                 "memory of this call in /dev/shm (its error says how much room there is)");
  };
  int fd;
  while ((fd = shm_open(name.c_str(), O_RDWR, 0)) < 0) {
    if (errno != ENOENT) {
      return error(Code::kInternal, label, ": shm_open(", name, "): ", std::strerror(errno));
    }
    if (marked_failed(failed_marker)) return peer_failed();
    if (deadline.expired()) return timed_out("create");
    sleep_a_little();
  }
  struct stat st;
  for (;;) {
    if (fstat(fd, &st) != 0) {
      int e = errno;
      close(fd);
      return error(Code::kInternal, label, ": fstat(", name, "): ", std::strerror(e));
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
      close(fd);
      return error(Code::kInternal, label, ": shared-memory segment ", name, " is owned by uid ",
                   st.st_uid, " with mode 0", std::oct, st.st_mode & 0777,
                   ", not this user's alone: refusing it");
    }
    if (static_cast<size_t>(st.st_size) == bytes) break;
    if (marked_failed(failed_marker)) {
      close(fd);
      return peer_failed();
    }
    if (deadline.expired()) {
      close(fd);
      return timed_out("size");
    }
    sleep_a_little();
  }
  *region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (*region == MAP_FAILED) {
    return error(Code::kInternal, label, ": mmap(", name, "): ", std::strerror(e));
  }
  auto* header = static_cast<RingPairHeader*>(*region);
  while (header->magic.load(std::memory_order_acquire) != kShmMagic) {
    if (deadline.expired()) {
      munmap(*region, bytes);
      return timed_out("initialise");
    }
    sleep_a_little();
  }
  return Status::Ok();
}

}  // namespace

std::string shm_segment_name(const std::string& secret, int64_t a, int64_t b, uint64_t space) {
  return "/jax_accl_" + hex(hmac_sha256(secret, str_cat("shm ", a, " ", b, " ", space)), 16);
}

std::string shm_space_failed_name(const std::string& secret, uint64_t space) {
  return "/jax_accl_" + hex(hmac_sha256(secret, str_cat("shm failed ", space)), 16);
}

void shm_forget_failed(const std::string& failed_marker) { shm_unlink(failed_marker.c_str()); }

Status open_shm_channel(const std::string& name, const std::string& failed_marker, int side,
                        const std::string& label, const Deadline& deadline,
                        std::unique_ptr<Channel>* out) {
  const size_t bytes = ring_pair_region_bytes();
  void* region = nullptr;
  ACCL_RETURN_IF_ERROR(side == 0
                           ? create_segment(name, failed_marker, bytes, label, &region)
                           : open_segment(name, failed_marker, bytes, label, deadline, &region));
  auto* header = static_cast<RingPairHeader*>(region);
  header->pid[side].store(getpid(), std::memory_order_release);
  if (header->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == 2) {
    shm_unlink(name.c_str());
  }
  std::shared_ptr<void> mapping(region, [bytes](void* p) { munmap(p, bytes); });
  *out = std::make_unique<RingChannel>(region, side, std::move(mapping), label, true);
  return Status::Ok();
}

std::vector<std::string> shm_names_left() {
  std::lock_guard<std::mutex> lock(names_mutex());
  std::vector<std::string> left;
  for (const std::string& name : pending_names()) {
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    close(fd);
    left.push_back(name);
  }
  return left;
}

void shm_cleanup() {
  std::lock_guard<std::mutex> lock(names_mutex());
  for (const std::string& name : pending_names()) shm_unlink(name.c_str());
  pending_names().clear();
}

}  // namespace accl
