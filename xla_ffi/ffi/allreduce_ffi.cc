// Thin FFI handler: decode operands, attributes and context, find this device's group
// and rank from its device ordinal, the device assignment and the replica groups
// computed at lowering, then run the native all-reduce. Errors become ffi::Error.
#include <cxxabi.h>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "common/health.h"
#include "ffi/handlers.h"
#include "runtime/allreduce.h"
#include "runtime/call_plan.h"
#include "runtime/call_threads.h"
#include "runtime/one_shot.h"
#include "runtime/stats.h"
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

// Operands: N buffers of one dtype (the fused leaves); results: N buffers shaped like the
// operands (each aliasing its operand). groups: the replica groups of partition ids,
// flattened row by row, each padded with -1 to group_size. devices: the global device id
// of every partition id, where the handler finds its own from the device ordinal.
// lane: names the op within its program, the same in every process (see lowering.py).
ffi::Future failed(ffi::Error error) {
  ffi::Promise promise;
  ffi::Future future(promise);
  promise.SetError(std::move(error));
  return future;
}

// Returns a future: the one-shot path completes it when the last rank arrives (so the
// early ranks' threads go on instead of sleeping); the other paths run on a call thread
// of their own (runtime/call_threads.h), which completes it.
ffi::Future allreduce(ffi::RunId run_id, int32_t ordinal, ffi::RemainingArgs args,
                      ffi::RemainingRets rets, ffi::Span<const int64_t> groups, int64_t group_size,
                      int64_t op, int64_t algorithm, int64_t op_id, int64_t lane,
                      int64_t timeout_ms, std::string_view name, ffi::Span<const int64_t> devices,
                      int64_t processes) {
  CallSpec spec;
  spec.issued = Clock::now();
  std::vector<const void*> ins;
  std::vector<void*> outs;
  std::vector<uint64_t> counts;
  if (Status usable = process_usable(); !usable.ok()) return failed(to_ffi(usable));
  if (args.size() != rets.size() || args.size() == 0) {
    return failed(ffi::Error::InvalidArgument("jax_accl: operands and results differ in " +
                                              std::string(name)));
  }
  for (size_t k = 0; k < args.size(); ++k) {
    auto x = args.get<ffi::AnyBuffer>(k);
    auto y = rets.get<ffi::AnyBuffer>(k);
    if (!x.has_value() || !y.has_value())
      return failed(ffi::Error::InvalidArgument("jax_accl: bad buffer"));
    DType dtype;
    if (!to_dtype(x->element_type(), &dtype) || (*y)->element_type() != x->element_type() ||
        (*y)->size_bytes() != x->size_bytes() || (k > 0 && dtype != spec.signature.dtype)) {
      return failed(ffi::Error::InvalidArgument(
          "jax_accl: unsupported or mismatched buffer types in " + std::string(name)));
    }
    spec.signature.dtype = dtype;
    ins.push_back(x->untyped_data());
    outs.push_back((*y)->untyped_data());
    counts.push_back(x->element_count());
  }
  if (op < 0 || op >= kNumReduceOps || algorithm < 0 || algorithm >= kNumAlgorithms ||
      group_size <= 0 || groups.size() % group_size != 0) {
    return failed(ffi::Error::InvalidArgument("jax_accl: bad attributes in " + std::string(name)));
  }
  // This device's partition: where its ordinal (the global device id) is in the program's
  // device assignment.
  int64_t logical = -1;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == ordinal) logical = static_cast<int64_t>(i);
  }
  if (logical < 0) {
    return failed(ffi::Error::InvalidArgument(
        str_cat("jax_accl: device ", ordinal, " runs no partition of ", name)));
  }
  int64_t group = -1;
  std::string members;
  std::vector<int64_t> member_devices;  // global device ids, in rank order
  for (size_t i = 0; i < groups.size() && group < 0; ++i) {
    if (groups[i] != logical) continue;
    group = static_cast<int64_t>(i) / group_size;
    int rank = 0, size = 0;
    for (int64_t j = group * group_size; j < (group + 1) * group_size; ++j) {
      if (groups[j] < 0) continue;
      if (groups[j] == logical) rank = size;
      members += str_cat(size == 0 ? "" : " ", groups[j]);
      if (groups[j] >= static_cast<int64_t>(devices.size())) {
        return failed(
            ffi::Error::InvalidArgument("jax_accl: partition id outside the device list"));
      }
      member_devices.push_back(devices[groups[j]]);
      ++size;
    }
    spec.rank = rank;
    spec.size = size;
  }
  if (group < 0) {
    return failed(ffi::Error::InvalidArgument(
        str_cat("jax_accl: device ", logical, " is in no replica group of ", name)));
  }
  spec.signature.op = static_cast<ReduceOp>(op);
  spec.signature.algorithm = static_cast<Algorithm>(algorithm);
  // The op id and the lane: identical equations (an unrolled scan, a remat) share an op
  // id, but each emitted call has a lane of its own.
  const int64_t op_key = op_id ^ lane;
  spec.key = CallKey{run_id.run_id, op_key, group,
                     next_sequence(logical, run_id.run_id, op_key, timeout_ms / 1000.0)};
  spec.label = str_cat(name, " group [", members, "] call ", spec.key.seq);
  spec.timeout_s = timeout_ms / 1000.0;
  spec.device = member_devices[spec.rank];
  spec.lane = static_cast<uint64_t>(lane);
  ffi::Promise promise;
  ffi::Future future(promise);
  call_began();
  auto complete = [promise](const Status& s) mutable {
    call_ended();
    if (s.ok()) {
      promise.SetAvailable();
    } else {
      promise.SetError(to_ffi(s));
    }
  };
  size_t bytes = 0;
  for (size_t k = 0; k < ins.size(); ++k) bytes += counts[k] * dtype_size(spec.signature.dtype);
  const bool in_process = processes <= 1;
  if (in_process && plan_one_shot(bytes, spec.signature.algorithm)) {
    allreduce_one_shot(spec, ins, outs, counts, std::move(complete));
  } else {
    // The buffers stay valid until the future completes (XLA's contract for async calls).
    // Each call gets a thread of its own, so that calls of one device that XLA runs
    // concurrently never queue behind each other (their order may differ by device).
    run_on_call_thread([spec, in_process, member_devices, ins, outs, counts, complete]() mutable {
      // Nothing may escape a call thread (std::terminate), and the future must complete
      // either way: an exception (an allocation that failed) becomes the call's error.
      Status s;
      try {
        s = in_process ? allreduce_local(spec, ins, outs, counts)
                       : allreduce_across_processes(spec, member_devices, ins, outs, counts);
      } catch (const std::exception& e) {
        s = error(Code::kInternal, spec.label, ": ", e.what());
      } catch (abi::__forced_unwind&) {  // the thread was cancelled: end the call, unwind
        complete(error(Code::kAborted, spec.label, ": the call's thread was cancelled"));
        throw;
      } catch (...) {
        s = error(Code::kInternal, spec.label, ": an unknown exception");
      }
      complete(s);
    });
  }
  return future;
}

}  // namespace
}  // namespace accl

XLA_FFI_DEFINE_HANDLER_SYMBOL(AcclAllreduceHandler, accl::allreduce,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::RunId>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("op")
                                  .Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("op_id")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("timeout_ms")
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const int64_t>>("devices")
                                  .Attr<int64_t>("processes"));
