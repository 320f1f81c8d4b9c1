// All-to-all, pairwise direct: block b of rank r's input becomes block r of rank b's
// output.
//   With peer memory (device threads of one process): rank me copies block me of every
//   rank's input, read in place, into block q of its output (q the reading rank): no
//   staging and no message; the closing barrier keeps every input alive until all have
//   read it.
//   Over messages: rank me posts block (me + s) mod n to rank (me + s) mod n for s = 1..n-1,
//   all at once (the link sends them as its peers drain them), copies its own block,
//   then receives from (me - s) mod n for s = 1..n-1 into that rank's block: each pair
//   exchanges one message each way, and no rank waits on a third.
//   In place (in == out), the result is built aside and copied over once no peer reads
//   the input any more.
#include "algorithms/all_to_all.h"

#include <cstring>
#include <vector>

namespace accl {
namespace {

Status exchange_blocks(Link& link, const Buffers& buf, char* out) {
  const int n = link.size(), me = link.rank();
  const size_t block = buf.count / n * buf.elem_size;
  if (PeerMemory* memory = link.peer_memory()) {
    for (int q = 0; q < n; ++q) {
      const char* from = static_cast<const char*>(memory->input(q, buf.segment));
      std::memcpy(out + q * block, from + me * block, block);
    }
    return Status::Ok();
  }
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n;
    ACCL_RETURN_IF_ERROR(link.post_send(to, buf.in_at(0) + to * block, block));
  }
  std::memcpy(out + me * block, buf.in_at(0) + me * block, block);
  for (int s = 1; s < n; ++s) {
    const int from = (me - s + n) % n;
    ACCL_RETURN_IF_ERROR(link.recv(from, out + from * block, block));
  }
  return link.wait_sends();
}

}  // namespace

Status run_all_to_all(Link& link, const std::vector<Buffers>& segments) {
  const int n = link.size();
  for (const Buffers& b : segments) {
    if (b.count % n != 0) {
      return error(Code::kInvalidArgument, link.where(), ": segment ", b.segment, " has ", b.count,
                   " elements, not a whole number of blocks for ", n, " ranks");
    }
  }
  std::vector<const Buffers*> in_place;
  for (const Buffers& b : segments) {
    if (b.count == 0) continue;
    if (b.in == b.out) {
      in_place.push_back(&b);
      continue;
    }
    ACCL_RETURN_IF_ERROR(exchange_blocks(link, b, static_cast<char*>(b.out)));
  }
  if (in_place.empty()) return close_in_place_reads(link);
  // Kept by the thread from call to call (a fresh buffer costs its page faults).
  thread_local std::vector<char> aside;
  for (const Buffers* b : in_place) {
    const size_t bytes = b->count * b->elem_size;
    if (aside.size() < bytes) aside.resize(bytes);
    ACCL_RETURN_IF_ERROR(exchange_blocks(link, *b, aside.data()));
    // Nobody reads this input any more: its peers' reads (memory) or its sends ended.
    ACCL_RETURN_IF_ERROR(close_in_place_reads(link, /*always=*/true));
    std::memcpy(b->out, aside.data(), bytes);
  }
  release_if_large(aside);
  return Status::Ok();
}

}  // namespace accl
