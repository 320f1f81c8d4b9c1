// Reduce-broadcast between processes of one host by cross-memory attach, for large
// messages: the cross-process counterpart of reduce_broadcast.
//   1. Every rank sends every other rank its process handle (ProcessMemory, a pid) and
//      the addresses of its buffers (and, when asked to probe, whether it could read
//      each peer's token through the peer's handle: all ranks then agree to go on, or
//      all report CMA unusable before any data moves).
//   2. Each segment is cut into n blocks; rank r owns block r. Tile by tile it reads
//      block r of every peer's input straight from the peer's memory into a local tile,
//      folds the n tiles in rank order and writes the result into block r of every
//      peer's output (and its own): one kernel copy per byte each way, where a
//      shared-memory ring makes two.
//   3. A closing exchange of one-byte messages: afterwards every output is complete and
//      nobody reads anybody's input any more.
//   Only rank r ever reads or writes block r, so in == out (in place) is safe. Step 2 is
//   a peer-access phase of the link (Link::begin_peer_access): a rank looks for a failed
//   peer before every tile, and a peer that fails waits until every rank has left the
//   phase before it returns, so nobody writes into buffers that XLA may have freed.
//   Every rank holds this process's ptrace permission (transport/cma.h) from before it
//   publishes its buffers to its end, so that no other lane's call, ending or finding
//   cross-memory attach unusable, takes it away from this one meanwhile.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "algorithms/algorithm.h"
#include "transport/cma.h"

namespace accl {
namespace {

constexpr size_t kTileBytes = 64 << 10;

// All-to-all of one equal-length message per rank: mine to every peer, theirs into out[r].
Status exchange(Link& link, const void* mine, size_t bytes, std::vector<std::vector<char>>* out) {
  const int n = link.size(), me = link.rank();
  out->assign(n, std::vector<char>(bytes));
  for (int r = 0; r < n; ++r) {
    if (r != me) ACCL_RETURN_IF_ERROR(link.post_send(r, mine, bytes));
  }
  for (int r = 0; r < n; ++r) {
    if (r != me) ACCL_RETURN_IF_ERROR(link.recv(r, (*out)[r].data(), bytes));
  }
  return link.wait_sends();
}

}  // namespace

Status allreduce_cma(Link& link, ProcessMemory& memory, const std::vector<Buffers>& segments,
                     const Reduction& reduction, bool probe, bool* usable) {
  const int n = link.size(), me = link.rank();
  const CrossMemoryPermission permission;  // peers may read and write us until we return
  // 1. Addresses: a random token, where it lives, the pid, then (in, out) per segment.
  //    The probe reads each peer's token through its handle (a pid): one that names
  //    another process (another pid namespace, a host id shared by mistake) cannot pass.
  static thread_local std::mt19937_64 random{std::random_device{}()};
  std::vector<uint64_t> mine{random(), 0, memory.handle()};
  for (const Buffers& b : segments) {
    mine.push_back(reinterpret_cast<uint64_t>(b.in));
    mine.push_back(reinterpret_cast<uint64_t>(b.out));
  }
  mine[1] = reinterpret_cast<uint64_t>(mine.data());  // final: no push_back after this
  std::vector<std::vector<char>> raw;
  ACCL_RETURN_IF_ERROR(exchange(link, mine.data(), mine.size() * 8, &raw));
  std::vector<std::vector<uint64_t>> peer(n, std::vector<uint64_t>(mine.size()));
  for (int r = 0; r < n; ++r) {
    if (r == me) {
      peer[r] = mine;
    } else {
      std::memcpy(peer[r].data(), raw[r].data(), mine.size() * 8);
    }
  }
  auto process_of = [&](int r) { return peer[r][2]; };
  auto in_of = [&](int r, size_t s) { return peer[r][3 + 2 * s]; };
  auto out_of = [&](int r, size_t s) { return peer[r][4 + 2 * s]; };

  *usable = true;
  if (probe) {  // can this rank read every peer? Everybody learns everybody's answer.
    char can = 1;
    for (int r = 0; r < n; ++r) {
      uint64_t token = 0;
      if (r != me &&
          (!memory.probe(process_of(r), peer[r][1], &token, 8).ok() || token != peer[r][0])) {
        can = 0;
      }
    }
    ACCL_RETURN_IF_ERROR(exchange(link, &can, 1, &raw));
    for (int r = 0; r < n; ++r) *usable &= (r == me ? can : raw[r][0]) != 0;
    if (!*usable) return Status::Ok();
  }

  // 2. My block of every segment, tile by tile.
  struct Access {
    Link& link;
    ~Access() { link.end_peer_access(); }
  } access{link};
  ACCL_RETURN_IF_ERROR(link.begin_peer_access());
  thread_local std::vector<char> tiles;
  tiles.resize(static_cast<size_t>(n + 1) * kTileBytes);
  std::vector<const void*> sources(n);
  for (size_t s = 0; s < segments.size(); ++s) {
    const Buffers& seg = segments[s];
    const size_t elem = seg.elem_size, tile = std::max<size_t>(1, kTileBytes / elem);
    const Blocks blocks{seg.count, n};
    const size_t first = blocks.begin(me), length = blocks.length(me);
    char* result = tiles.data() + static_cast<size_t>(n) * kTileBytes;
    for (size_t done = 0; done < length; done += tile) {
      ACCL_RETURN_IF_ERROR(link.check_peer_access());
      const size_t m = std::min(tile, length - done), offset = (first + done) * elem;
      for (int r = 0; r < n; ++r) {
        if (r == me) {
          sources[r] = seg.in_at(first + done);
          continue;
        }
        char* local = tiles.data() + static_cast<size_t>(r) * kTileBytes;
        Status got = memory.read(process_of(r), in_of(r, s) + offset, local, m * elem);
        if (!got.ok()) return error(got.code(), link.where(), ": ", got.message());
        sources[r] = local;
      }
      reduction.fold(result, sources.data(), n, m);
      for (int k = 1; k <= n; ++k) {  // the next ranks' outputs first, our own last
        const int r = (me + k) % n;
        if (r == me) {
          std::memcpy(seg.out_at(first + done), result, m * elem);
          continue;
        }
        Status put = memory.write(process_of(r), out_of(r, s) + offset, result, m * elem);
        if (!put.ok()) return error(put.code(), link.where(), ": ", put.message());
      }
    }
  }
  link.end_peer_access();
  // 3. Closing exchange.
  const char done = 1;
  return exchange(link, &done, 1, &raw);
}

}  // namespace accl
