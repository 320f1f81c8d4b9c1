#include "transport/transport.h"

#include <sys/mman.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "transport/ring_channel.h"
#include "transport/shm.h"

namespace accl {
namespace {

class MemoryTransport final : public Transport {
 public:
  const char* name() const override { return "memory"; }
  bool can_connect(const DevicePair& pair) const override {
    return pair.mine->index == pair.theirs->index;
  }
  Status connect(const DevicePair&, const Deadline&, std::vector<std::unique_ptr<Channel>>* out,
                 std::vector<std::unique_ptr<Channel>>* reverse) override {
    std::unique_ptr<Channel> a, b;
    make_memory_channels(&a, &b);
    out->push_back(std::move(a));
    reverse->push_back(std::move(b));
    return Status::Ok();
  }
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(std::string secret) : secret_(std::move(secret)) {}
  const char* name() const override { return "shm"; }
  bool can_connect(const DevicePair& pair) const override {
    return pair.mine->index != pair.theirs->index && pair.mine->host == pair.theirs->host;
  }
  Status connect(const DevicePair& pair, const Deadline& deadline,
                 std::vector<std::unique_ptr<Channel>>* out,
                 std::vector<std::unique_ptr<Channel>>*) override {
    const std::string segment = shm_segment_name(secret_, std::min(pair.me, pair.peer),
                                                 std::max(pair.me, pair.peer), pair.space);
    std::unique_ptr<Channel> c;
    const int side = pair.me < pair.peer ? 0 : 1;
    ACCL_RETURN_IF_ERROR(open_shm_channel(
        segment, shm_space_failed_name(secret_, pair.space), side,
        str_cat("shm to process ", pair.theirs->index, ", device ", pair.peer), deadline, &c));
    if (side == 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      created_[pair.space].push_back(segment);
    }
    c->rail = "shm";
    out->push_back(std::move(c));
    return Status::Ok();
  }
  // A segment whose peer never attached is still named; unlinking one it did is a no-op.
  void forget(uint64_t space) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& name : created_[space]) shm_unlink(name.c_str());
    created_.erase(space);
    shm_forget_failed(shm_space_failed_name(secret_, space));
  }

 private:
  std::string secret_;
  std::mutex mutex_;
  std::map<uint64_t, std::vector<std::string>> created_;  // by this side, per space
};

}  // namespace

std::unique_ptr<Transport> memory_transport() { return std::make_unique<MemoryTransport>(); }
std::unique_ptr<Transport> shm_transport(std::string secret) {
  return std::make_unique<ShmTransport>(std::move(secret));
}

}  // namespace accl
