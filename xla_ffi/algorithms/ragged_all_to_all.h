// A ragged all-to-all over a Link (jax.lax.ragged_all_to_all): each rank sends slices of
// rows of its operand to its peers, each written at the row its sender names into the
// receiver's output (which keeps its other rows).
#pragma once

#include <cstdint>

#include "algorithms/algorithm.h"

namespace accl {

// The call's layout table, int32, as jax_accl's lowering writes it (segment 1 of the
// call, after the data): a header [row elements, operand rows, output rows, K, instances,
// 0, 0, 0], then K input offsets, K send sizes, K output offsets (rows of the receiver's
// output), K receive sizes; slice i goes to rank i / (K / n). kRaggedHeader + 4K words: a
// multiple of 16 bytes (whole elements of any dtype).
//   `instances` > 1: the call is jax.vmap's merge of that many calls (the batch rule in
// jax_accl/primitives/ragged_all_to_all.py): instance j owns rows [j·R, (j+1)·R) of the
// operand and of the output (R = rows / instances) and, in each peer's block of K/n
// slices, the j-th run of K/n/instances; each slice is checked against its own
// instance's rows, and errors name the instance and its own slice numbers.
constexpr int64_t kRaggedHeader = 8;
struct RaggedTable {
  int64_t row = 0, in_rows = 0, out_rows = 0, k = 0, instances = 1, per_peer = 0;
  const int32_t* input_offsets = nullptr;
  const int32_t* send_sizes = nullptr;
  const int32_t* output_offsets = nullptr;
  const int32_t* recv_sizes = nullptr;
};

// The table in `bytes` bytes at `data`, checked against `n` ranks; an error names what
// is wrong.
Status read_ragged_table(const void* data, size_t bytes, int n, RaggedTable* table);

// segments[0]: the data (in: the operand, out: the output, updated in place);
// segments[1]: the table (in: its bytes). Every slice is checked before a byte moves:
// a slice outside the operand or the receiver's output, or a size that differs from
// what the receiver expects, is an error naming the rank and the slice.
Status run_ragged_all_to_all(Link& link, const std::vector<Buffers>& segments);

}  // namespace accl
