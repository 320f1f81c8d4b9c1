// Thin FFI handlers of every jax_accl collective (each target of runtime/collective.cc's
// table: accl_allreduce, accl_ppermute, ...; and accl_allreduce_bf16_wire, the
// all-reduce's float32 sums carried as bfloat16; bindings/module.cc registers them all
// with these handlers). Instantiate (once
// per call in an executable): decode the attributes fixed at lowering into the call site
// (runtime/collective_site.h), the executable's state. Execute (each device's call): decode the
// buffers, hand them to the site, return a future that the call completes. Errors become
// ffi::Error.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/ragged_all_to_all.h"
#include "common/huge_pages.h"
#include "ffi/handlers.h"
#include "runtime/collective.h"
#include "runtime/collective_site.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace accl {
namespace {

bool to_dtype(ffi::DataType type, DType* out) {
  switch (type) {
    case ffi::DataType::PRED: *out = DType::kBool; return true;
    case ffi::DataType::S8: *out = DType::kI8; return true;
    case ffi::DataType::S16: *out = DType::kI16; return true;
    case ffi::DataType::S32: *out = DType::kI32; return true;
    case ffi::DataType::S64: *out = DType::kI64; return true;
    case ffi::DataType::U8: *out = DType::kU8; return true;
    case ffi::DataType::U16: *out = DType::kU16; return true;
    case ffi::DataType::U32: *out = DType::kU32; return true;
    case ffi::DataType::U64: *out = DType::kU64; return true;
    case ffi::DataType::F16: *out = DType::kF16; return true;
    case ffi::DataType::BF16: *out = DType::kBF16; return true;
    case ffi::DataType::F32: *out = DType::kF32; return true;
    case ffi::DataType::F64: *out = DType::kF64; return true;
    case ffi::DataType::C64: *out = DType::kC64; return true;
    case ffi::DataType::C128: *out = DType::kC128; return true;
    default: return false;
  }
}

ffi::Error to_ffi(const Status& s) {
  if (s.ok()) return ffi::Error::Success();
  ffi::ErrorCode code = (s.code() == Code::kInvalidArgument || s.code() == Code::kMismatch)
                            ? ffi::ErrorCode::kInvalidArgument
                        : s.code() == Code::kTimeout ? ffi::ErrorCode::kDeadlineExceeded
                        : s.code() == Code::kAborted ? ffi::ErrorCode::kAborted
                                                     : ffi::ErrorCode::kInternal;
  return ffi::Error(code, "jax_accl: " + s.message());
}

ffi::Future failed(ffi::Error error) {
  ffi::Promise promise;
  ffi::Future future(promise);
  promise.SetError(std::move(error));
  return future;
}

std::vector<int64_t> to_vector(ffi::Span<const int64_t> span) {
  return std::vector<int64_t>(span.begin(), span.end());
}

}  // namespace

// The executable's state: its call site (the FFI's per-executable state needs a type id).
struct SiteState {
  static ffi::TypeId id;
  std::unique_ptr<CollectiveSite> site;
};
ffi::TypeId SiteState::id = {};

namespace {

// groups: the replica groups of partition ids, flattened row by row, each padded with -1
// to group_size. devices: the global device id of every partition id. lane: names the
// op within its program, the same in every process (see lowering.py).
ffi::ErrorOr<std::unique_ptr<SiteState>> site_state(SiteAttributes attributes) {
  auto state = std::make_unique<SiteState>();
  if (Status s = CollectiveSite::make(std::move(attributes), &state->site); !s.ok()) {
    return ffi::Unexpected(to_ffi(s));
  }
  return state;
}

// Every target's site: `collective` (enum Collective: which collective the target is)
// and `args`, its arguments as its row reads them (a permutation's partition each
// partition sends to; a rooted collective's root; empty for the others).
ffi::ErrorOr<std::unique_ptr<SiteState>> instantiate(
    ffi::Span<const int64_t> groups, int64_t group_size, int64_t op, int64_t algorithm,
    int64_t op_id, int64_t lane, int64_t timeout_ms, int64_t pipeline_chunks, std::string_view name,
    ffi::Span<const int64_t> devices, int64_t processes, int64_t collective,
    ffi::Span<const int64_t> args) {
  if (collective < 0 || collective >= kNumCollectives) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        "jax_accl: " + std::string(name) + " names no collective: " + std::to_string(collective)));
  }
  SiteAttributes attributes{static_cast<Collective>(collective),
                            to_vector(groups),
                            group_size,
                            op,
                            algorithm,
                            op_id,
                            lane,
                            timeout_ms,
                            std::string(name),
                            to_vector(devices),
                            processes,
                            to_vector(args)};
  attributes.pipeline_chunks = pipeline_chunks;
  return site_state(std::move(attributes));
}

// Completes a call's future with its status.
void complete(ffi::Promise& promise, const Status& s) {
  if (s.ok()) {
    promise.SetAvailable();
  } else {
    promise.SetError(to_ffi(s));
  }
}

// Hands a device's call to the site; the future completes with it.
ffi::Future run_on_site(CollectiveSite& site, ffi::RunId run_id, int32_t ordinal,
                        CallBuffers buffers, Clock::time_point issued) {
  ffi::Promise promise;
  ffi::Future future(promise);
  site.run(ordinal, run_id.run_id, std::move(buffers), issued,
           [promise](const Status& s) mutable { complete(promise, s); });
  return future;
}

// Operands: N buffers of one dtype (the fused leaves); results: N buffers, shaped like
// the operands for an all-reduce (each aliasing its operand but where the operand is an
// argument of the program XLA keeps: jax_accl/primitives/operand_origin.py), 1/n or n
// times as large for a reduce-scatter or all-gather over n devices. An error names the site.
std::optional<ffi::Error> decode_buffers(const CollectiveSite& site, const ffi::RemainingArgs& args,
                                         const ffi::RemainingRets& rets, CallBuffers* buffers) {
  if (args.size() != rets.size() || args.size() == 0) {
    return ffi::Error::InvalidArgument("jax_accl: operands and results differ in " + site.name());
  }
  for (size_t k = 0; k < args.size(); ++k) {
    auto x = args.get<ffi::AnyBuffer>(k);
    auto y = rets.get<ffi::AnyBuffer>(k);
    if (!x.has_value() || !y.has_value())
      return ffi::Error::InvalidArgument("jax_accl: bad buffer in " + site.name());
    DType dtype;
    if (!to_dtype(x->element_type(), &dtype) || (*y)->element_type() != x->element_type() ||
        (k > 0 && dtype != buffers->dtype)) {
      return ffi::Error::InvalidArgument("jax_accl: unsupported or mismatched buffer types in " +
                                         site.name());
    }
    buffers->dtype = dtype;
    // A result apart from its operand is XLA's fresh buffer: advised before any write.
    if ((*y)->untyped_data() != x->untyped_data()) {
      advise_huge_pages((*y)->untyped_data(), (*y)->size_bytes());
    }
    buffers->in.push_back(x->untyped_data());
    buffers->out.push_back((*y)->untyped_data());
    buffers->counts.push_back(x->element_count());
    buffers->out_counts.push_back((*y)->element_count());
  }
  return std::nullopt;
}

// Whether the site's collective (its `collective` attribute) takes this execute handler's
// operands: the ragged all-to-all's (its row's layout_table) or N buffers.
std::optional<ffi::Error> handler_fits(const CollectiveSite& site, bool layout_table) {
  if (collective_row(site.collective()).layout_table == layout_table) return std::nullopt;
  return ffi::Error::InvalidArgument(str_cat("jax_accl: ", site.name(), " is a ",
                                             collective_name(site.collective()),
                                             ", which this target's operands do not fit"));
}

ffi::Future execute(SiteState* state, ffi::RunId run_id, int32_t ordinal, ffi::RemainingArgs args,
                    ffi::RemainingRets rets) {
  const auto issued = Clock::now();
  if (auto error = handler_fits(*state->site, /*layout_table=*/false)) {
    return failed(std::move(*error));
  }
  CallBuffers buffers;
  if (auto error = decode_buffers(*state->site, args, rets, &buffers)) {
    return failed(std::move(*error));
  }
  return run_on_site(*state->site, run_id, ordinal, std::move(buffers), issued);
}

// accl_allreduce_bf16_wire: float32 sums whose bytes travel as bfloat16
// (jax_accl/wire_dtype.py). The call runs on the float32 operands and results as they
// are; the algorithms' own passes round each operand to bfloat16 where they first read
// it, send bfloat16 messages, add in float32 and round every sum, and widen what they
// receive as they write it (transport/wire_link.h), so every rank holds the same float32
// bits, each a bfloat16 value.
ffi::Future execute_wire_bf16(SiteState* state, ffi::RunId run_id, int32_t ordinal,
                              ffi::RemainingArgs args, ffi::RemainingRets rets) {
  const auto issued = Clock::now();
  CallBuffers buffers;
  if (auto error = decode_buffers(*state->site, args, rets, &buffers)) {
    return failed(std::move(*error));
  }
  const Collective collective = state->site->collective();
  if (collective != Collective::kAllReduce || state->site->op() != ReduceOp::kSum) {
    return failed(ffi::Error::InvalidArgument(
        str_cat("jax_accl: bfloat16 on the wire carries a sum all-reduce, not a ",
                collective_name(collective), " (", reduce_op_name(state->site->op()), "), in ",
                state->site->name())));
  }
  if (buffers.dtype != DType::kF32 || buffers.counts != buffers.out_counts) {
    return failed(ffi::Error::InvalidArgument(
        "jax_accl: bfloat16 on the wire takes float32 operands and results alike, in " +
        state->site->name()));
  }
  buffers.wire_bf16 = true;
  return run_on_site(*state->site, run_id, ordinal, std::move(buffers), issued);
}

// A ragged all-to-all: the operand, the output (the result aliases it) and the layout
// table (int32: a header [row elements, operand rows, output rows, K, vmap instances, 0,
// 0, 0] and K input offsets, send sizes, output offsets and receive sizes;
// algorithms/ragged_all_to_all.h).
// The call's segments: the data, then the table counted in data elements.
ffi::Future execute_ragged(SiteState* state, ffi::RunId run_id, int32_t ordinal,
                           ffi::AnyBuffer operand, ffi::AnyBuffer output, ffi::AnyBuffer table,
                           ffi::Result<ffi::AnyBuffer> result) {
  const auto issued = Clock::now();
  CollectiveSite& site = *state->site;
  if (auto error = handler_fits(site, /*layout_table=*/true)) return failed(std::move(*error));
  DType dtype;
  if (!to_dtype(operand.element_type(), &dtype) ||
      output.element_type() != operand.element_type() ||
      result->element_type() != operand.element_type() ||
      table.element_type() != ffi::DataType::S32) {
    return failed(ffi::Error::InvalidArgument(
        "jax_accl: unsupported or mismatched buffer types in " + site.name()));
  }
  const size_t elem = dtype_size(dtype), table_bytes = table.size_bytes();
  const auto* header = static_cast<const int32_t*>(table.untyped_data());
  if (table_bytes < kRaggedHeader * sizeof(int32_t) || table_bytes % elem != 0 ||
      static_cast<uint64_t>(header[0]) * header[1] != operand.element_count() ||
      static_cast<uint64_t>(header[0]) * header[2] != result->element_count()) {
    return failed(ffi::Error::InvalidArgument(
        "jax_accl: the layout table does not describe the buffers of " + site.name()));
  }
  // The result is the output's buffer (XLA's must-alias); were it ever another, it starts
  // as the output.
  if (result->untyped_data() != output.untyped_data()) {
    std::memcpy(result->untyped_data(), output.untyped_data(), output.size_bytes());
  }
  CallBuffers buffers;
  buffers.dtype = dtype;
  buffers.in = {operand.untyped_data(), table.untyped_data()};
  buffers.out = {result->untyped_data(), nullptr};
  buffers.counts = {operand.element_count(), table_bytes / elem};
  buffers.out_counts = {result->element_count(), 0};
  return run_on_site(site, run_id, ordinal, std::move(buffers), issued);
}

}  // namespace
}  // namespace accl

// The attributes of every target (jax_accl/primitives/lowering.py).
XLA_FFI_DEFINE_HANDLER_SYMBOL(AcclCollectiveInstantiate, accl::instantiate,
                              ffi::Ffi::BindInstantiate()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("op")
                                  .Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("op_id")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("timeout_ms")
                                  .Attr<int64_t>("pipeline_chunks")
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const int64_t>>("devices")
                                  .Attr<int64_t>("processes")
                                  .Attr<int64_t>("collective")
                                  .Attr<ffi::Span<const int64_t>>("args"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(AcclRaggedAllToAllHandler, accl::execute_ragged,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::State<accl::SiteState>>()
                                  .Ctx<ffi::RunId>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
// The execute handlers of the fused-bucket collectives: the site, the launch, the device,
// N operands and N results.
#define ACCL_BUCKET_CALL                  \
  ffi::Ffi::Bind()                        \
      .Ctx<ffi::State<accl::SiteState>>() \
      .Ctx<ffi::RunId>()                  \
      .Ctx<ffi::DeviceOrdinal>()          \
      .RemainingArgs()                    \
      .RemainingRets()
XLA_FFI_DEFINE_HANDLER_SYMBOL(AcclWireBf16Handler, accl::execute_wire_bf16, ACCL_BUCKET_CALL);
XLA_FFI_DEFINE_HANDLER_SYMBOL(AcclCollectiveHandler, accl::execute, ACCL_BUCKET_CALL);

static XLA_FFI_TypeInfo site_type_info = xla::ffi::MakeTypeInfo<accl::SiteState>();
XLA_FFI_TypeId* AcclSiteTypeId() { return &accl::SiteState::id; }
XLA_FFI_TypeInfo* AcclSiteTypeInfo() { return &site_type_info; }
