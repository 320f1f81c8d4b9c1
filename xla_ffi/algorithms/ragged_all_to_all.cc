// Ragged all-to-all, pairwise direct: slice i of rank r's operand (rows input_offsets[i]
// .. + send_sizes[i]) goes to rank b = i / (K / n), written at its row output_offsets[i]
// of b's output.
//   With peer memory (device threads of one process): rank me reads every sender's
//   table and copies each slice addressed to it from the sender's operand, in place,
//   straight into its output; the closing barrier keeps every operand alive until all
//   have read it.
//   Over messages: rank me posts to each peer b one header (for each of its slices to
//   b: the output row and the size) then the slices themselves, to every peer at once;
//   it copies its own slices, then receives from (me - s) mod n for s = 1..n-1 the header,
//   checks it against its receive sizes and its output, and receives each slice straight
//   into its rows. Header and slices travel back to back: one round trip, no step waits
//   on another peer's sizes.
#include "algorithms/ragged_all_to_all.h"

#include <cstring>
#include <string>
#include <vector>

namespace accl {
namespace {

// A check's error, named by the link (the rank and the call); the link's own errors
// name themselves.
Status checked(Link& link, Status s) {
  if (s.ok()) return s;
  return error(s.code(), link.where(), ": ", s.message());
}

struct Slice {
  int64_t offset = 0, size = 0;  // rows
};

// Slice `i` of a table as its caller numbered it: its vmap instance (0 where the call
// was not batched) and its index among that instance's slices (ragged_all_to_all.h).
struct SliceName {
  int64_t instance = 0, index = 0;
};

SliceName name_of(const RaggedTable& t, int64_t i) {
  const int64_t each = t.per_peer / t.instances;  // an instance's slices per peer
  const int64_t peer = i / t.per_peer, within = i % t.per_peer;
  return SliceName{within / each, peer * each + within % each};
}

// An error's lead: which instance, where the call was batched.
std::string instance_lead(const RaggedTable& t, int64_t instance) {
  return t.instances > 1 ? "vmap instance " + std::to_string(instance) + ": " : std::string();
}

// Slice `i` of `t` as sent: within its instance's operand rows, or an error naming
// `rank` and the slice.
Status sent_slice(const RaggedTable& t, int64_t i, int rank, Slice* slice) {
  const int64_t offset = t.input_offsets[i], size = t.send_sizes[i];
  const SliceName name = name_of(t, i);
  const int64_t rows = t.in_rows / t.instances, first = name.instance * rows;
  if (offset < first || size < 0 || offset + size > first + rows) {
    return error(Code::kInvalidArgument, instance_lead(t, name.instance), "rank ", rank,
                 " sends slice ", name.index, " (rows ", offset - first, " to ",
                 offset - first + size, ") outside its operand of ", rows, " rows");
  }
  *slice = Slice{offset, size};
  return Status::Ok();
}

// Where the t-th slice `from` sends rank `me` (its slice me·K/n + t, written at
// `offset`, `size` rows) lands in me's output: it must be what me expects there (its
// recv_sizes[from·K/n + t]) and fit its instance's rows.
Status received_slice(const RaggedTable& mine, int me, int from, int64_t t, int64_t offset,
                      int64_t size) {
  const int64_t slot = from * mine.per_peer + t;
  const SliceName sent_as = name_of(mine, me * mine.per_peer + t);
  const SliceName expected_as = name_of(mine, slot);
  const std::string lead = instance_lead(mine, sent_as.instance);
  const int64_t expected = mine.recv_sizes[slot];
  if (size != expected) {
    return error(Code::kMismatch, lead, "rank ", from, " sends ", size, " rows to rank ", me,
                 " (its slice ", sent_as.index, "), which expects ", expected, " (its recv_sizes[",
                 expected_as.index, "]): send_sizes and the receivers' recv_sizes differ");
  }
  const int64_t rows = mine.out_rows / mine.instances, first = sent_as.instance * rows;
  if (offset < first || offset + size > first + rows) {
    return error(Code::kInvalidArgument, lead, "rank ", from, " writes rows ", offset - first,
                 " to ", offset - first + size, " of rank ", me, "'s output of ", rows,
                 " rows (its output_offsets[", sent_as.index, "])");
  }
  return Status::Ok();
}

Status read_through_memory(Link& link, PeerMemory& memory, const RaggedTable& mine,
                           const Buffers& data, const Buffers& table) {
  const int n = link.size(), me = link.rank();
  const int64_t per_peer = mine.k / n;
  const size_t row_bytes = mine.row * data.elem_size;
  for (int q = 0; q < n; ++q) {
    RaggedTable theirs;
    ACCL_RETURN_IF_ERROR(
        checked(link, read_ragged_table(memory.input(q, table.segment),
                                        table.count * table.elem_size, n, &theirs)));
    const char* operand = static_cast<const char*>(memory.input(q, data.segment));
    for (int64_t t = 0; t < per_peer; ++t) {
      const int64_t i = me * per_peer + t;
      Slice s;
      ACCL_RETURN_IF_ERROR(checked(link, sent_slice(theirs, i, q, &s)));
      const int64_t offset = theirs.output_offsets[i];
      ACCL_RETURN_IF_ERROR(checked(link, received_slice(mine, me, q, t, offset, s.size)));
      std::memmove(data.out_at(0) + offset * row_bytes, operand + s.offset * row_bytes,
                   s.size * row_bytes);
    }
  }
  return close_in_place_reads(link, /*always=*/true);
}

Status exchange_messages(Link& link, const RaggedTable& mine, const Buffers& data) {
  const int n = link.size(), me = link.rank();
  // Every peer gets a header and K/n slices before anything is received.
  if (!link.queues_sends()) {
    return error(Code::kInternal, link.where(), ": a ragged all-to-all needs a link that queues");
  }
  const int64_t per_peer = mine.k / n;
  const size_t row_bytes = mine.row * data.elem_size;
  // Every slice checked before anything is sent.
  std::vector<Slice> sent(mine.k);
  for (int64_t i = 0; i < mine.k; ++i) {
    ACCL_RETURN_IF_ERROR(checked(link, sent_slice(mine, i, me, &sent[i])));
  }
  std::vector<int64_t> headers(2 * mine.k);  // per slice: output row, rows
  for (int64_t i = 0; i < mine.k; ++i) {
    headers[2 * i] = mine.output_offsets[i];
    headers[2 * i + 1] = sent[i].size;
  }
  const size_t header_bytes = 2 * per_peer * sizeof(int64_t);
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n;
    ACCL_RETURN_IF_ERROR(link.post_send(to, &headers[2 * to * per_peer], header_bytes));
    for (int64_t t = 0; t < per_peer; ++t) {
      const Slice& slice = sent[to * per_peer + t];
      ACCL_RETURN_IF_ERROR(
          link.post_send(to, data.in_at(slice.offset * mine.row), slice.size * row_bytes));
    }
  }
  for (int64_t t = 0; t < per_peer; ++t) {  // this rank's own slices
    const int64_t i = me * per_peer + t;
    ACCL_RETURN_IF_ERROR(
        checked(link, received_slice(mine, me, me, t, mine.output_offsets[i], sent[i].size)));
    std::memmove(data.out_at(mine.output_offsets[i] * mine.row),
                 data.in_at(sent[i].offset * mine.row), sent[i].size * row_bytes);
  }
  std::vector<int64_t> theirs(2 * per_peer);
  for (int s = 1; s < n; ++s) {
    const int from = (me - s + n) % n;
    ACCL_RETURN_IF_ERROR(link.recv(from, theirs.data(), header_bytes));
    for (int64_t t = 0; t < per_peer; ++t) {
      const int64_t offset = theirs[2 * t], size = theirs[2 * t + 1];
      ACCL_RETURN_IF_ERROR(checked(link, received_slice(mine, me, from, t, offset, size)));
      ACCL_RETURN_IF_ERROR(link.recv(from, data.out_at(offset * mine.row), size * row_bytes));
    }
  }
  return link.wait_sends();
}

}  // namespace

Status read_ragged_table(const void* data, size_t bytes, int n, RaggedTable* t) {
  const auto* words = static_cast<const int32_t*>(data);
  if (bytes < kRaggedHeader * sizeof(int32_t)) {
    return error(Code::kInvalidArgument, "the ragged all-to-all's table has ", bytes, " bytes");
  }
  t->row = words[0];
  t->in_rows = words[1];
  t->out_rows = words[2];
  t->k = words[3];
  t->instances = words[4];
  if (t->row < 0 || t->in_rows < 0 || t->out_rows < 0 || t->k <= 0 || t->k % n != 0 ||
      t->instances <= 0 || (t->k / n) % t->instances != 0 || t->in_rows % t->instances != 0 ||
      t->out_rows % t->instances != 0 || (kRaggedHeader + 4 * t->k) * sizeof(int32_t) > bytes) {
    return error(Code::kInvalidArgument, "the ragged all-to-all's table (", t->k, " slices, ",
                 t->instances, " instances) does not fit ", n, " ranks or its ", bytes, " bytes");
  }
  t->per_peer = t->k / n;
  t->input_offsets = words + kRaggedHeader;
  t->send_sizes = t->input_offsets + t->k;
  t->output_offsets = t->send_sizes + t->k;
  t->recv_sizes = t->output_offsets + t->k;
  return Status::Ok();
}

Status run_ragged_all_to_all(Link& link, const std::vector<Buffers>& segments) {
  if (segments.size() != 2) {
    return error(Code::kInternal, link.where(), ": a ragged all-to-all has data and a table");
  }
  const Buffers& data = segments[0];
  const Buffers& table = segments[1];
  RaggedTable mine;
  ACCL_RETURN_IF_ERROR(checked(
      link, read_ragged_table(table.in, table.count * table.elem_size, link.size(), &mine)));
  if (mine.in_rows * mine.row != static_cast<int64_t>(data.count)) {
    return error(Code::kInvalidArgument, link.where(), ": the table's operand of ", mine.in_rows,
                 " rows of ", mine.row, " elements is not the call's ", data.count, " elements");
  }
  PeerMemory* memory = link.peer_memory();
  return memory != nullptr ? read_through_memory(link, *memory, mine, data, table)
                           : exchange_messages(link, mine, data);
}

}  // namespace accl
