// The pipeline of the two-tier schedules by host (scatter_gather_by_host.cc,
// all_to_all_by_host.cc): a call's segments cut into chunks, each chunk the same range
// of elements of every block of its segment, and staging buffers that hold a number of
// such blocks per chunk, segment after segment, each chunk's at its place.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/scatter_gather.h"

namespace accl {

// Chunk c of a segment: elements [begin, begin + length) of every block.
struct Chunk {
  const BlockBuffers* segment;
  size_t begin, length;
  size_t bytes() const { return length * segment->elem_size; }
  // Where the chunk's range starts in block j of the segment's input and output.
  const char* in(int j) const { return segment->in_block(j) + begin * segment->elem_size; }
  char* out(int j) const { return segment->out_block(j) + begin * segment->elem_size; }
};

// Every segment cut as `pipeline` says (one chunk for an empty block: the reduce-scatter
// and all-gather run both tiers on it, the all-to-all skips it on every rank alike).
std::vector<Chunk> chunks_of(const std::vector<BlockBuffers>& segments,
                             const ByHostPipeline& pipeline);

// A staging buffer of `blocks` blocks per chunk, kept in `storage` (sized here).
class ChunkStaging {
 public:
  ChunkStaging(const std::vector<BlockBuffers>& segments, int blocks, std::vector<char>& storage);
  // The chunk's `blocks` blocks, and the i-th of them (c.length elements each).
  char* at(const Chunk& c) const;
  char* block(const Chunk& c, int i) const { return at(c) + i * c.bytes(); }

 private:
  const std::vector<BlockBuffers>& segments_;
  std::vector<size_t> offsets_;  // a segment's block offset (bytes); its staging's, times blocks_
  int blocks_;
  std::vector<char>& storage_;
};

}  // namespace accl
