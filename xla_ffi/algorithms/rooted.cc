// Broadcast and reduce, one direct step between the root and every other rank.
//   Broadcast: a non-root's output is the root's input, copied in place from the root's
//   buffer (peer memory) or received from the root, which posts its buffer to each peer.
//   Reduce: the root's output is in_0 op in_1 op ... op in_{n-1} (rank order), folded
//   from the peers' buffers in place (peer memory) or received and reduced message by
//   message; a non-root zeros its output once nobody reads its input any more.
//   In place (in == out) the root of a reduce folds aside and copies the result over.
#include "algorithms/rooted.h"

#include <cstring>
#include <vector>

namespace accl {
namespace {

Status check_root(const Link& link, int root) {
  if (root < 0 || root >= link.size()) {
    return error(Code::kInternal, link.where(), ": root ", root, " outside the group of ",
                 link.size());
  }
  return Status::Ok();
}

Status broadcast_segment(Link& link, const Buffers& b, int root) {
  const size_t bytes = b.count * b.elem_size;
  if (link.rank() == root) {
    if (b.out != b.in) std::memcpy(b.out, b.in, bytes);
    if (link.peer_memory() != nullptr) return Status::Ok();
    for (int q = 0; q < link.size(); ++q) {
      if (q != root) ACCL_RETURN_IF_ERROR(link.post_send(q, b.in, bytes));
    }
    return link.wait_sends();
  }
  if (PeerMemory* memory = link.peer_memory()) {
    std::memcpy(b.out, memory->input(root, b.segment), bytes);
    return Status::Ok();
  }
  return link.recv(root, b.out, bytes);
}

// The root's fold, in rank order, into `acc` (not this rank's input) from the peers'
// inputs read in place.
void fold_in_place(PeerMemory& memory, const Buffers& b, int n, char* acc,
                   const Reduction& reduction) {
  std::vector<const void*> inputs(n);
  for (int q = 0; q < n; ++q) inputs[q] = memory.input(q, b.segment);
  reduction.fold(acc, inputs.data(), n, b.count);
}

// The root's fold, in rank order, into `acc` (not this rank's input) from the peers'
// messages.
Status fold_received(Link& link, const Buffers& b, char* acc, const Reduction& reduction) {
  const int me = link.rank();
  const size_t bytes = b.count * b.elem_size;
  if (me == 0) {
    std::memcpy(acc, b.in, bytes);
  } else {
    ACCL_RETURN_IF_ERROR(link.recv(0, acc, bytes));
  }
  for (int q = 1; q < link.size(); ++q) {
    if (q == me) {
      reduction.fn(acc, acc, b.in, b.count);
    } else {
      ACCL_RETURN_IF_ERROR(link.recv_reduce(q, acc, acc, bytes, reduction));
    }
  }
  return Status::Ok();
}

Status reduce_at_root(Link& link, const Buffers& b, const Reduction& reduction) {
  const size_t bytes = b.count * b.elem_size;
  if (link.size() == 1) {
    if (b.out != b.in) std::memcpy(b.out, b.in, bytes);
    return Status::Ok();
  }
  // Kept by the thread from call to call (a fresh buffer costs its page faults).
  thread_local std::vector<char> aside;
  char* acc = static_cast<char*>(b.out);
  if (b.out == b.in) {
    if (aside.size() < bytes) aside.resize(bytes);
    acc = aside.data();
  }
  if (PeerMemory* memory = link.peer_memory()) {
    fold_in_place(*memory, b, link.size(), acc, reduction);
  } else {
    ACCL_RETURN_IF_ERROR(fold_received(link, b, acc, reduction));
  }
  if (acc != b.out) std::memcpy(b.out, acc, bytes);
  release_if_large(aside);
  return Status::Ok();
}

}  // namespace

Status run_broadcast(Link& link, const std::vector<Buffers>& segments, int root) {
  ACCL_RETURN_IF_ERROR(check_root(link, root));
  for (const Buffers& b : segments) {
    if (b.count > 0) ACCL_RETURN_IF_ERROR(broadcast_segment(link, b, root));
  }
  return close_in_place_reads(link);
}

Status run_reduce(Link& link, const std::vector<Buffers>& segments, const Reduction& reduction,
                  int root) {
  ACCL_RETURN_IF_ERROR(check_root(link, root));
  const bool is_root = link.rank() == root;
  for (const Buffers& b : segments) {
    if (b.count == 0) continue;
    if (is_root) {
      ACCL_RETURN_IF_ERROR(reduce_at_root(link, b, reduction));
    } else if (link.peer_memory() == nullptr) {
      ACCL_RETURN_IF_ERROR(link.post_send(root, b.in, b.count * b.elem_size));
    }
  }
  if (!is_root) ACCL_RETURN_IF_ERROR(link.wait_sends());
  // No rank reads a non-root's input any more: its sends ended, or the root's reads.
  ACCL_RETURN_IF_ERROR(close_in_place_reads(link));
  if (is_root) return Status::Ok();
  for (const Buffers& b : segments) std::memset(b.out, 0, b.count * b.elem_size);
  return Status::Ok();
}

}  // namespace accl
