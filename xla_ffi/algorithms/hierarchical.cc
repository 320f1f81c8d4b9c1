#include "algorithms/hierarchical.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "algorithms/in_order_thread.h"
#include "algorithms/step_times.h"
#include "reduce/reduce.h"

namespace accl {
namespace {

uint64_t bytes_of(const std::vector<Buffers>& segments) {
  uint64_t bytes = 0;
  for (const Buffers& b : segments) bytes += b.count * b.elem_size;
  return bytes;
}

// Chunk c of `chunks` of every segment.
std::vector<Buffers> chunk_of(const std::vector<Buffers>& segments, int c, int chunks) {
  std::vector<Buffers> out;
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, chunks};
    out.push_back(Buffers{seg.in_at(blocks.begin(c)), seg.out_at(blocks.begin(c)), blocks.length(c),
                          seg.elem_size, seg.segment, seg.offset + blocks.begin(c)});
  }
  return out;
}

// Step 1 over peer memory: owner `me` folds its slice of every rank's input into
// scratch[slot + s] (the inputs stay readable in place for the other owners until the
// barrier before step 3).
void scatter_in_memory(PeerMemory& peers, int me, int size, int owners,
                       const std::vector<Buffers>& segments, const Reduction& reduction,
                       std::vector<std::vector<char>>& scratch, size_t slot,
                       std::vector<Buffers>* mine) {
  const size_t elem = reduction.elem_size;
  std::vector<const void*> sources(size);
  for (size_t s = 0; s < segments.size(); ++s) {
    const Buffers& seg = segments[s];
    const Blocks blocks{seg.count, owners};
    const size_t begin = blocks.begin(me), len = blocks.length(me);
    const void* reduced = seg.in_at(begin);
    if (len > 0) {
      std::vector<char>& buffer = scratch[slot + s];
      if (buffer.size() < len * elem) buffer.resize(len * elem);
      for (int r = 0; r < size; ++r) {
        sources[r] =
            static_cast<const char*>(peers.input(r, seg.segment)) + (seg.offset + begin) * elem;
      }
      reduction.fold(buffer.data(), sources.data(), size, len);
      reduced = buffer.data();
    }
    mine->push_back(
        Buffers{reduced, seg.out_at(begin), len, elem, seg.segment, seg.offset + begin});
  }
}

// Step 1 over messages: every rank sends slice j of a segment to owner j; an owner
// reduces the host's copies of its slice into its output, one message at a time.
Status scatter_by_messages(Link& link, int owners, const std::vector<Buffers>& segments,
                           const Reduction& reduction, std::vector<Buffers>* mine) {
  const int me = link.rank(), size = link.size();
  const size_t elem = reduction.elem_size;
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, owners};
    for (int j = 0; j < owners; ++j) {
      if (j != me && blocks.length(j) > 0) {
        ACCL_RETURN_IF_ERROR(
            link.post_send(j, seg.in_at(blocks.begin(j)), blocks.length(j) * elem));
      }
    }
    if (me >= owners) continue;
    const size_t begin = blocks.begin(me), bytes = blocks.length(me) * elem;
    if (bytes > 0) {
      for (int step = 1; step < size; ++step) {
        const int peer = (me + step) % size;
        const void* local =
            step == 1 ? static_cast<const void*>(seg.in_at(begin)) : seg.out_at(begin);
        ACCL_RETURN_IF_ERROR(link.recv_reduce(peer, local, seg.out_at(begin), bytes, reduction));
      }
    }
    mine->push_back(Buffers{seg.out_at(begin), seg.out_at(begin), blocks.length(me), elem,
                            seg.segment, seg.offset + begin});
  }
  return link.wait_sends();
}

// Step 3 over peer memory: copy every other owner's slice from its output.
Status gather_in_memory(PeerMemory& peers, int me, int owners,
                        const std::vector<Buffers>& segments) {
  ACCL_RETURN_IF_ERROR(peers.barrier());  // every slice is final
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, owners};
    for (int j = 0; j < owners; ++j) {
      if (j == me || blocks.length(j) == 0) continue;
      const char* src = static_cast<const char*>(peers.output(j, seg.segment));
      stream_copy(seg.out_at(blocks.begin(j)), src + (seg.offset + blocks.begin(j)) * seg.elem_size,
                  blocks.length(j) * seg.elem_size);
    }
  }
  stream_fence();
  return peers.barrier();  // nobody reads our output any more
}

// Step 3 over messages: an owner sends its slice to every other rank of the tier;
// every rank receives the other owners' slices.
Status gather_by_messages(Link& link, int owners, const std::vector<Buffers>& segments) {
  const int me = link.rank(), size = link.size();
  for (const Buffers& seg : segments) {
    const Blocks blocks{seg.count, owners};
    const size_t elem = seg.elem_size;
    if (me < owners && blocks.length(me) > 0) {
      for (int step = 1; step < size; ++step) {
        ACCL_RETURN_IF_ERROR(link.post_send((me + step) % size, seg.out_at(blocks.begin(me)),
                                            blocks.length(me) * elem));
      }
    }
    for (int j = 0; j < owners; ++j) {
      if (j == me || blocks.length(j) == 0) continue;
      ACCL_RETURN_IF_ERROR(link.recv(j, seg.out_at(blocks.begin(j)), blocks.length(j) * elem));
    }
  }
  return link.wait_sends();
}

// The step between hosts of every chunk, in chunk order, on the second stage of an
// InOrderThread while the caller's thread runs the local tiers: chunk c's transfer
// overlaps the local reduce-scatter of c + 1.. and the all-gather of c - 1... (Without a
// thread, each chunk's step runs inline, in the same order on the wire.) Direct between
// hosts is streamed: every chunk's slice is posted to the peers as soon as it is ready,
// without waiting for the previous chunk's to arrive, so the rails never idle between
// chunks (each chunk otherwise ends with a wait for the slowest of the flows that share
// the rails); the receives follow in chunk order, folded in rank order as direct does
// everywhere, and the last chunk's step waits until the peers have every slice.
class BetweenHosts {
 public:
  // `staged`: where in-place slices are copied while they stream, kept by the caller's
  // thread from call to call (fresh copies would cost their page faults every call).
  BetweenHosts(Link* link, Algorithm algorithm, const Reduction& reduction,
               const std::vector<std::vector<Buffers>>* slices, int chunks,
               const Deadline& deadline, HierarchicalTimes* times,
               std::vector<std::vector<char>>* staged)
      : link_(link),
        algorithm_(algorithm),
        reduction_(reduction),
        slices_(slices),
        chunks_(chunks),
        times_(times),
        staged_(*staged) {
    if (link_ == nullptr) return;
    stage_.emplace(
        chunks_, /*threaded=*/true, [this](int c) { return step(c); }, deadline,
        str_cat(link_->where(), ": between hosts"));
  }
  ~BetweenHosts() { finish(); }

  // Chunk c's slice is reduced up the local tiers.
  Status ready(int c) { return stage_ ? stage_->ready(c) : Status::Ok(); }
  // Waits until chunk c's step between hosts is done (or failed).
  Status wait(int c) { return stage_ ? stage_->wait(c) : Status::Ok(); }
  // Stops the stage (the caller failed) and waits for it; its phases join `times`.
  void finish() {
    if (!stage_) return;
    stage_->finish();
    times_->insert(times_->end(), own_times_.begin(), own_times_.end());
    own_times_.clear();
  }

 private:
  Status step(int c) {
    const auto start = Clock::now();
    Status s = streams_between_hosts(algorithm_, chunks_) ? streamed_step(c) : whole_step(c);
    own_times_.push_back(PhaseRecord{PhaseRecord::kBetweenHosts, -1, c, start, Clock::now(),
                                     bytes_of((*slices_)[c])});
    return s;
  }
  // Chunk c's slice by the schedule between hosts, each of its steps timed where asked
  // (algorithms/step_times.h).
  Status whole_step(int c) {
    StepTimesLink timed(*link_, c, &own_times_);
    Link& link = step_times_enabled().load(std::memory_order_relaxed) ? timed : *link_;
    return run_allreduce(algorithm_, link, (*slices_)[c], reduction_);
  }
  Status streamed_step(int c) {
    ACCL_RETURN_IF_ERROR(post_ready(stage_->ready_count()));
    for (const Buffers& b : streamed_[c])
      ACCL_RETURN_IF_ERROR(direct_receive(*link_, b, reduction_));
    // The slices stay in place until the peers have them all.
    return c + 1 == chunks_ ? link_->wait_sends() : Status::Ok();
  }
  // Posts the slices of the chunks before `ready` not yet posted (a chunk whose slice is
  // computed in place is sent from a copy, since its result lands there while the send
  // may still be on its way).
  Status post_ready(int ready) {
    ready = std::min(chunks_, ready);
    if (streamed_.size() < static_cast<size_t>(chunks_)) streamed_.resize(chunks_);
    for (; posted_ < ready; ++posted_) {
      std::vector<Buffers>& slice = streamed_[posted_];
      slice = (*slices_)[posted_];
      for (size_t s = 0; s < slice.size(); ++s) {
        Buffers& b = slice[s];
        if (b.in == b.out && b.count > 0) {
          const size_t index = posted_ * slice.size() + s;
          if (staged_.size() <= index) staged_.resize(index + 1);
          std::vector<char>& copy = staged_[index];
          copy.assign(static_cast<const char*>(b.in),
                      static_cast<const char*>(b.in) + b.count * b.elem_size);
          b.in = copy.data();
        }
        ACCL_RETURN_IF_ERROR(direct_post(*link_, b));
      }
    }
    return Status::Ok();
  }

  Link* link_;
  Algorithm algorithm_;
  const Reduction& reduction_;
  const std::vector<std::vector<Buffers>>* slices_;
  int chunks_;
  HierarchicalTimes* times_;
  HierarchicalTimes own_times_;                 // the stage's, joined to times_ at finish()
  int posted_ = 0;                              // streamed: chunks whose slices are posted
  std::vector<std::vector<Buffers>> streamed_;  // streamed: each chunk's slices as posted
  std::vector<std::vector<char>>& staged_;      // streamed: copies of in-place slices in flight
  std::optional<InOrderThread> stage_;          // none for a rank with no link between hosts
};

}  // namespace

bool streams_between_hosts(Algorithm between, int chunks) {
  return between == Algorithm::kDirect && chunks > 1;
}

Status allreduce_hierarchical(const std::vector<Tier>& tiers, Link* between,
                              Algorithm between_algorithm, const std::vector<Buffers>& segments,
                              const Reduction& reduction, int chunks, const Deadline& deadline,
                              HierarchicalTimes* times) {
  chunks = std::max(1, chunks);
  for (size_t l = 1; l < tiers.size(); ++l) {
    if (tiers[l].link != nullptr && tiers[l].link->peer_memory() != nullptr) {
      return error(Code::kInternal, tiers[l].link->where(), ": peer memory above tier 0");
    }
  }
  // Kept by the calling thread from call to call: a fresh buffer would cost its page
  // faults every time (~1 ms per 4 MiB). One per segment and chunk, as chunk c + 1 is
  // folded while chunk c's slice travels between hosts.
  thread_local std::vector<std::vector<char>> scratch, staged;
  if (scratch.size() < segments.size() * chunks) scratch.resize(segments.size() * chunks);

  // at[c][l]: this rank's part of chunk c entering tier l; at[c][l + 1] its slice of it.
  std::vector<std::vector<std::vector<Buffers>>> at(chunks);
  std::vector<std::vector<Buffers>> slices(chunks);  // what goes between hosts, by chunk
  bool owner = true;
  BetweenHosts network(between, between_algorithm, reduction, &slices, chunks, deadline, times,
                       &staged);
  auto fail = [&](Status s) {
    network.finish();
    return s;
  };

  // 1. Reduce-scatter up the tiers, chunk by chunk; 2. each chunk's slice between hosts.
  for (int c = 0; c < chunks; ++c) {
    at[c].push_back(chunk_of(segments, c, chunks));
    owner = true;
    for (size_t l = 0; l < tiers.size() && owner; ++l) {
      const Tier& tier = tiers[l];
      const auto start = Clock::now();
      std::vector<Buffers> mine;
      if (tier.link == nullptr) {
        mine = at[c][l];
      } else if (PeerMemory* peers = tier.link->peer_memory()) {
        const int me = tier.link->rank();
        owner = me < tier.owners;
        if (owner) {
          scatter_in_memory(*peers, me, tier.link->size(), tier.owners, at[c][l], reduction,
                            scratch, c * segments.size(), &mine);
        }
      } else {
        owner = tier.link->rank() < tier.owners;
        Status s = scatter_by_messages(*tier.link, tier.owners, at[c][l], reduction, &mine);
        if (!s.ok()) return fail(s);
      }
      if (tier.link != nullptr) {
        times->push_back(PhaseRecord{PhaseRecord::kReduceScatter, static_cast<int>(l), c, start,
                                     Clock::now(), bytes_of(at[c][l])});
      }
      at[c].push_back(std::move(mine));
    }
    if (!owner && between != nullptr) {
      return fail(
          error(Code::kInternal, between->where(), ": a rank that owns no slice between hosts"));
    }
    if (between != nullptr) {
      slices[c] = at[c].back();
      Status s = network.ready(c);
      if (!s.ok()) return fail(s);
    } else if (owner) {  // one host: the slice is final as it is
      for (const Buffers& b : at[c].back()) {
        if (b.count > 0 && b.in != b.out) std::memcpy(b.out, b.in, b.count * b.elem_size);
      }
    }
  }

  // 3. All-gather down the tiers this rank climbed, chunk by chunk as each comes back.
  for (int c = 0; c < chunks; ++c) {
    Status s = network.wait(c);
    if (!s.ok()) return fail(s);
    for (size_t l = at[c].size() - 1; l-- > 0;) {
      const Tier& tier = tiers[l];
      if (tier.link == nullptr) continue;
      const auto start = Clock::now();
      PeerMemory* peers = tier.link->peer_memory();
      s = peers != nullptr ? gather_in_memory(*peers, tier.link->rank(), tier.owners, at[c][l])
                           : gather_by_messages(*tier.link, tier.owners, at[c][l]);
      if (!s.ok()) return fail(s);
      times->push_back(PhaseRecord{PhaseRecord::kAllGather, static_cast<int>(l), c, start,
                                   Clock::now(), bytes_of(at[c][l])});
    }
  }
  network.finish();
  for (std::vector<char>& kept : staged) release_if_large(kept);
  return Status::Ok();
}

}  // namespace accl
