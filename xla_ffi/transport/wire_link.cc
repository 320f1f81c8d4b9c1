#include "transport/wire_link.h"

#include <algorithm>
#include <mutex>

#include "reduce/reduce.h"

namespace accl {
namespace {

constexpr size_t kMinBlockValues = size_t{1} << 20;  // 2 MiB of bfloat16
constexpr size_t kPoolValues = size_t{64} << 20;     // 128 MiB kept between calls at most

// Staging blocks kept between calls (and links), so that a call's sends write memory
// already mapped instead of faulting fresh pages in.
struct Pool {
  std::mutex mutex;
  std::vector<std::unique_ptr<uint16_t[]>> data;
  std::vector<size_t> capacity;
  size_t values = 0;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: links may end during exit
  return *p;
}

}  // namespace

Reduction wire_sum_reduction() {
  const WireKernels& k = wire_kernels();
  Reduction r;
  r.fn = k.sum;
  r.many = k.sum_many;
  r.elem_size = sizeof(float);
  r.copy = k.round;
  return r;
}

WireLink::WireLink(Link& inner) : ForwardingLink(inner) {
  const WireKernels& k = wire_kernels();
  widen_.fn = k.widen_message;
  widen_.elem_size = sizeof(uint16_t);
  widen_.out_elem_size = sizeof(float);
  sum_ = widen_;
  sum_.fn = k.sum_message;
}

WireLink::~WireLink() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (Block& b : blocks_) {
    if (p.values + b.capacity > kPoolValues) continue;  // freed with the link
    p.values += b.capacity;
    p.data.push_back(std::move(b.data));
    p.capacity.push_back(b.capacity);
  }
}

uint16_t* WireLink::stage(size_t count) {
  count = (count + 31) & ~size_t{31};  // pieces of whole 64 bytes (16-byte aligned blocks)
  while (block_ < blocks_.size() && used_ + count > blocks_[block_].capacity) {
    ++block_;
    used_ = 0;
  }
  if (block_ == blocks_.size()) {
    Block b;
    {
      Pool& p = pool();
      std::lock_guard<std::mutex> lock(p.mutex);
      for (size_t i = 0; i < p.data.size(); ++i) {
        if (p.capacity[i] < count) continue;
        b.data = std::move(p.data[i]);
        b.capacity = p.capacity[i];
        p.values -= b.capacity;
        p.data.erase(p.data.begin() + static_cast<std::ptrdiff_t>(i));
        p.capacity.erase(p.capacity.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    if (!b.data) {
      b.capacity = std::max(count, kMinBlockValues);
      b.data.reset(new uint16_t[b.capacity]);
    }
    blocks_.push_back(std::move(b));
    used_ = 0;
  }
  uint16_t* at = blocks_[block_].data.get() + used_;
  used_ += count;
  return at;
}

Status WireLink::check_size(size_t bytes, const char* what) const {
  if (bytes % sizeof(float) == 0) return Status::Ok();
  return error(Code::kInternal, where(), ": bfloat16 on the wire ", what, " ", bytes,
               " bytes, not whole float32 values");
}

Status WireLink::post_send(int peer, const void* data, size_t bytes) {
  ACCL_RETURN_IF_ERROR(check_size(bytes, "sends"));
  const size_t count = bytes / sizeof(float);
  if (data != last_from_ || bytes != last_bytes_ || last_staged_ == nullptr) {
    uint16_t* staged = stage(count);
    wire_kernels().narrow(staged, static_cast<const float*>(data), count);
    last_from_ = data, last_bytes_ = bytes, last_staged_ = staged;
  }
  return inner_.post_send(peer, last_staged_, count * sizeof(uint16_t));
}

Status WireLink::wait_sends() {
  Status s = inner_.wait_sends();
  if (s.ok()) {  // every staged message is consumed: the blocks are free again
    block_ = 0, used_ = 0;
    last_from_ = nullptr, last_staged_ = nullptr;
  }
  return s;
}

Status WireLink::recv(int peer, void* dst, size_t bytes) {
  ACCL_RETURN_IF_ERROR(check_size(bytes, "receives"));
  last_from_ = nullptr;  // the memory a send came from may be received over
  return inner_.recv_reduce(peer, dst, dst, bytes / 2, widen_);
}

Status WireLink::recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                             const Reduction&) {
  ACCL_RETURN_IF_ERROR(check_size(bytes, "receives"));
  last_from_ = nullptr;
  return inner_.recv_reduce(peer, local, dst, bytes / 2, sum_);
}

Link* wire_view(Link* link, bool wire_bf16, std::unique_ptr<WireLink>* holder) {
  if (!wire_bf16 || link == nullptr) return link;
  *holder = std::make_unique<WireLink>(*link);
  return holder->get();
}

}  // namespace accl
