#include "algorithms/hierarchical.h"

#include <cstring>

#include "reduce/reduce.h"

namespace accl {
namespace {

// Step 1 over peer memory: owner `me` folds its slice of every rank's input into
// scratch (the inputs stay readable in place for the other owners until the barrier
// before step 3). Kept by the calling thread from call to call: a fresh buffer would
// cost its page faults every time (~1 ms per 4 MiB).
void scatter_in_memory(PeerMemory& peers, int me, int size, int owners,
                       const std::vector<Buffers>& segments, const Reduction& reduction,
                       std::vector<Buffers>* mine) {
  thread_local std::vector<std::vector<char>> scratch;
  if (scratch.size() < segments.size()) scratch.resize(segments.size());
  const size_t elem = reduction.elem_size;
  std::vector<const void*> sources(size);
  for (size_t s = 0; s < segments.size(); ++s) {
    const Buffers& seg = segments[s];
    const Blocks blocks{seg.count, owners};
    const size_t begin = blocks.begin(me), len = blocks.length(me);
    const void* reduced = seg.in_at(begin);
    if (len > 0) {
      if (scratch[s].size() < len * elem) scratch[s].resize(len * elem);
      for (int r = 0; r < size; ++r) {
        sources[r] = static_cast<const char*>(peers.input(r, seg.segment)) + begin * elem;
      }
      reduction.fold(scratch[s].data(), sources.data(), size, len);
      reduced = scratch[s].data();
    }
    mine->push_back(Buffers{reduced, seg.out_at(begin), len, elem, seg.segment});
  }
}

// Step 1 over messages: every rank sends slice j of a segment to owner j; an owner
// reduces the host's copies of its slice into its output, one message at a time.
Status scatter_by_messages(Link& host, int owners, const std::vector<Buffers>& segments,
                           const Reduction& reduction, std::vector<Buffers>* mine) {
  const int me = host.rank(), size = host.size();
  const size_t elem = reduction.elem_size;
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, owners};
    for (int j = 0; j < owners; ++j) {
      if (j != me && blocks.length(j) > 0) {
        ACCL_RETURN_IF_ERROR(host.post_send(j, seg.in_at(blocks.begin(j)), blocks.length(j) * elem));
      }
    }
    if (me >= owners) continue;
    const size_t begin = blocks.begin(me), bytes = blocks.length(me) * elem;
    if (bytes > 0) {
      for (int step = 1; step < size; ++step) {
        const int peer = (me + step) % size;
        const void* local = step == 1 ? static_cast<const void*>(seg.in_at(begin)) : seg.out_at(begin);
        ACCL_RETURN_IF_ERROR(host.recv_reduce(peer, local, seg.out_at(begin), bytes, reduction));
      }
    }
    mine->push_back(Buffers{seg.out_at(begin), seg.out_at(begin), blocks.length(me), elem,
                            seg.segment});
  }
  return host.wait_sends();
}

// Step 3 over peer memory: copy every other owner's slice from its output.
Status gather_in_memory(PeerMemory& peers, int me, int owners, const std::vector<Buffers>& segments) {
  ACCL_RETURN_IF_ERROR(peers.barrier());  // every slice is final
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, owners};
    for (int j = 0; j < owners; ++j) {
      if (j == me || blocks.length(j) == 0) continue;
      const char* src = static_cast<const char*>(peers.output(j, seg.segment));
      stream_copy(seg.out_at(blocks.begin(j)), src + blocks.begin(j) * seg.elem_size,
                  blocks.length(j) * seg.elem_size);
    }
  }
  stream_fence();
  return peers.barrier();  // nobody reads our output any more
}

// Step 3 over messages: an owner sends its slice to every other rank of the host;
// every rank receives the other owners' slices.
Status gather_by_messages(Link& host, int owners, const std::vector<Buffers>& segments) {
  const int me = host.rank(), size = host.size();
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, owners};
    const size_t elem = seg.elem_size;
    if (me < owners && blocks.length(me) > 0) {
      for (int step = 1; step < size; ++step) {
        ACCL_RETURN_IF_ERROR(host.post_send((me + step) % size, seg.out_at(blocks.begin(me)),
                                            blocks.length(me) * elem));
      }
    }
    for (int j = 0; j < owners; ++j) {
      if (j == me || blocks.length(j) == 0) continue;
      ACCL_RETURN_IF_ERROR(
          host.recv(j, seg.out_at(blocks.begin(j)), blocks.length(j) * elem));
    }
  }
  return host.wait_sends();
}

}  // namespace

uint64_t owned_bytes(const std::vector<Buffers>& segments, const std::vector<int>& owners,
                     const std::vector<int>& positions) {
  uint64_t bytes = 0;
  for (const Buffers& seg : segments) {
    size_t count = seg.count;
    for (size_t l = 0; l < owners.size(); ++l) count = Blocks{count, owners[l]}.length(positions[l]);
    bytes += count * seg.elem_size;
  }
  return bytes;
}

namespace {
uint64_t bytes_of(const std::vector<Buffers>& segments) {
  uint64_t bytes = 0;
  for (const Buffers& b : segments) bytes += b.count * b.elem_size;
  return bytes;
}
}  // namespace

Status allreduce_hierarchical(const std::vector<Tier>& tiers, Link* between,
                              Algorithm between_algorithm, const std::vector<Buffers>& segments,
                              const Reduction& reduction, HierarchicalTimes* times) {
  // at[l]: this rank's segments entering tier l; at[l + 1] its slice of them.
  std::vector<std::vector<Buffers>> at{segments};
  bool owner = true;
  for (size_t l = 0; l < tiers.size() && owner; ++l) {
    const Tier& tier = tiers[l];
    const auto start = Clock::now();
    std::vector<Buffers> mine;
    if (tier.link == nullptr) {
      mine = at[l];
    } else if (PeerMemory* peers = tier.link->peer_memory()) {
      if (l != 0) return error(Code::kInternal, tier.link->where(), ": peer memory above tier 0");
      const int me = tier.link->rank();
      owner = me < tier.owners;
      if (owner) scatter_in_memory(*peers, me, tier.link->size(), tier.owners, at[l], reduction, &mine);
    } else {
      owner = tier.link->rank() < tier.owners;
      ACCL_RETURN_IF_ERROR(scatter_by_messages(*tier.link, tier.owners, at[l], reduction, &mine));
    }
    if (tier.link != nullptr) {
      times->push_back(PhaseRecord{PhaseRecord::kReduceScatter, static_cast<int>(l), start,
                                   Clock::now(), bytes_of(at[l])});
    }
    at.push_back(std::move(mine));
  }
  if (!owner && between != nullptr) {
    return error(Code::kInternal, between->where(), ": a rank that owns no slice between hosts");
  }

  // 2. Between hosts, or where there is no other host, the slice as it is.
  if (between != nullptr) {
    const auto start = Clock::now();
    ACCL_RETURN_IF_ERROR(run_allreduce(between_algorithm, *between, at.back(), reduction));
    times->push_back(PhaseRecord{PhaseRecord::kBetweenHosts, -1, start, Clock::now(),
                                 bytes_of(at.back())});
  } else if (owner) {
    for (const Buffers& b : at.back()) {
      if (b.count > 0 && b.in != b.out) std::memcpy(b.out, b.in, b.count * b.elem_size);
    }
  }

  // 3. All-gather down the tiers this rank climbed.
  for (size_t l = at.size() - 1; l-- > 0;) {
    const Tier& tier = tiers[l];
    if (tier.link == nullptr) continue;
    const auto start = Clock::now();
    PeerMemory* peers = tier.link->peer_memory();
    ACCL_RETURN_IF_ERROR(peers != nullptr
                             ? gather_in_memory(*peers, tier.link->rank(), tier.owners, at[l])
                             : gather_by_messages(*tier.link, tier.owners, at[l]));
    times->push_back(PhaseRecord{PhaseRecord::kAllGather, static_cast<int>(l), start,
                                 Clock::now(), bytes_of(at[l])});
  }
  return Status::Ok();
}

}  // namespace accl
