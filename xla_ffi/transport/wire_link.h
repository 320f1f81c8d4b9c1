// bfloat16 on the wire, inside the algorithms' own passes: the algorithm runs on the call's
// float32 buffers as for any float32 sum, with a Reduction whose kernels keep every value
// they store rounded to bfloat16 (wire_sum_reduction), and a WireLink between it and the
// transport that makes every message bfloat16:
//   - a send narrows the float32 it is given into a staging buffer of the link's (rounding
//     the operand where it is first sent; a value rounded before stays as it is) and
//     sends that: half the bytes;
//   - a receive widens the message into the float32 destination as its bytes arrive (the
//     transport's receive-and-reduce with a widening kernel), and a reducing receive adds
//     the rounded local value and the message in float32 and rounds the sum, in the same
//     pass.
// So no pass over the whole buffer happens before or after the call, every rank rounds
// the same values the same way (reduce/reduce.h's WireKernels, AVX2 where the reduce
// kernels are), and the bytes between hosts are bfloat16 ones. Within a host (threads of
// a process, shared memory and cross-memory attach between its processes) the runtime
// uses no WireLink: the messages and peer reads carry the float32 of rounded values
// (the kernels round every input, so the sum is the same bits), since there a memory
// copy of twice the bytes costs less than narrowing and widening them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/forwarding_link.h"

namespace accl {

// The bfloat16 sum over float32 buffers; a group of one rounds its input.
Reduction wire_sum_reduction();

class WireLink : public ForwardingLink {
 public:
  explicit WireLink(Link& inner);
  ~WireLink() override;
  Status post_send(int peer, const void* data, size_t bytes) override;
  Status wait_sends() override;
  Status recv(int peer, void* dst, size_t bytes) override;
  // Always the bfloat16 sum (the only reduction that travels as bfloat16).
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override;
  size_t wire_bytes(size_t bytes) const override { return inner_.wire_bytes(bytes / 2); }

 private:
  // Room for `count` bfloat16 values, valid until the next wait_sends that succeeds.
  uint16_t* stage(size_t count);
  Status check_size(size_t bytes, const char* what) const;

  struct Block {
    std::unique_ptr<uint16_t[]> data;
    size_t capacity = 0;  // values
  };
  std::vector<Block> blocks_;
  size_t block_ = 0, used_ = 0;  // the block being filled, values taken from it
  // The last send's source and staged copy: the same buffer posted to several peers
  // (direct) is narrowed once. A send's memory stays untouched until wait_sends (the
  // Link's rule) but for a receive into it, which forgets the copy.
  const void* last_from_ = nullptr;
  size_t last_bytes_ = 0;
  const uint16_t* last_staged_ = nullptr;
  Reduction widen_, sum_;
};

// `link`, or for a call sent as bfloat16 a WireLink around it, kept in *holder.
Link* wire_view(Link* link, bool wire_bf16, std::unique_ptr<WireLink>* holder);

}  // namespace accl
