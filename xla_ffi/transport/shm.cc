#include "transport/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "transport/ring_channel.h"

namespace accl {
namespace {

constexpr uint32_t kShmMagic = 0x4143434c;  // "ACCL"

std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& pending_names() {
  static std::set<std::string> names;
  return names;
}

}  // namespace

Status open_shm_channel(const std::string& name, int side, const std::string& label,
                        std::unique_ptr<Channel>* out) {
  const size_t bytes = ring_pair_region_bytes();
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return error(Code::kInternal, "shm_open(", name, "): ", std::strerror(errno));
  {
    std::lock_guard<std::mutex> lock(names_mutex());
    pending_names().insert(name);
  }
  // Both ends size the segment identically; a fresh segment reads as zeros, which is
  // the initial state of the rings.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    return error(Code::kInternal, "ftruncate(", name, "): ", std::strerror(e));
  }
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (region == MAP_FAILED)
    return error(Code::kInternal, "mmap(", name, "): ", std::strerror(errno));
  auto* header = static_cast<RingPairHeader*>(region);
  header->pid[side].store(getpid(), std::memory_order_release);
  uint32_t expected = 0;
  header->magic.compare_exchange_strong(expected, kShmMagic);
  if (header->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == 2) {
    shm_unlink(name.c_str());
  }
  std::shared_ptr<void> mapping(region, [bytes](void* p) { munmap(p, bytes); });
  *out = std::make_unique<RingChannel>(region, side, std::move(mapping), label, true);
  return Status::Ok();
}

void shm_cleanup() {
  std::lock_guard<std::mutex> lock(names_mutex());
  for (const std::string& name : pending_names()) shm_unlink(name.c_str());
  pending_names().clear();
}

}  // namespace accl
