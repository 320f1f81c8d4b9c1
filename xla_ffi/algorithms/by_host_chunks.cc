#include "algorithms/by_host_chunks.h"

#include <algorithm>

namespace accl {

std::vector<Chunk> chunks_of(const std::vector<BlockBuffers>& segments,
                             const ByHostPipeline& pipeline) {
  std::vector<Chunk> out;
  for (const BlockBuffers& buf : segments) {
    size_t count = std::min<size_t>(buf.block, std::max(1, pipeline.chunks));
    if (pipeline.min_chunk_bytes > 0) {
      count = std::min(count, buf.block_bytes() / pipeline.min_chunk_bytes);
    }
    count = std::max<size_t>(count, 1);
    for (size_t c = 0; c < count; ++c) {
      const size_t begin = buf.block * c / count, end = buf.block * (c + 1) / count;
      out.push_back(Chunk{&buf, begin, end - begin});
    }
  }
  return out;
}

ChunkStaging::ChunkStaging(const std::vector<BlockBuffers>& segments, int blocks,
                           std::vector<char>& storage)
    : segments_(segments), blocks_(blocks), storage_(storage) {
  size_t offset = 0;
  for (const BlockBuffers& buf : segments) {
    offsets_.push_back(offset);
    offset += buf.block_bytes();
  }
  storage_.resize(offset * blocks);
}

char* ChunkStaging::at(const Chunk& c) const {
  const size_t s = c.segment - segments_.data();
  return storage_.data() + (offsets_[s] + c.begin * c.segment->elem_size) * blocks_;
}

}  // namespace accl
