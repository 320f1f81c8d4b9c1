// The XLA FFI handlers of jax_accl (CPU). Only files in ffi/ include the XLA header.
#pragma once

#include "xla/ffi/api/c_api.h"

// The XLA FFI API version the handlers below carry: that of the headers they were compiled
// against (third_party/xla, the oldest the package supports). A jaxlib whose FFI is older
// refuses them, which stops its CPU backend (jax_accl/ffi_version.py checks first).
constexpr int kAcclFfiApiMajor = XLA_FFI_API_MAJOR;
constexpr int kAcclFfiApiMinor = XLA_FFI_API_MINOR;

// accl_allreduce: operands x_1..x_N, results y_k = all-reduce of x_k (aliasing x_k);
// accl_reduce_scatter: y_k = this rank's block of the reduction of x_k (n blocks);
// accl_all_gather: y_k = every rank's x_k, in rank order. Each target's instantiate
// handler makes the executable's call site (its state, of the type below); one execute
// handler runs the call on it.
extern "C" XLA_FFI_Error* AcclAllreduceInstantiate(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclReduceScatterInstantiate(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclAllGatherInstantiate(XLA_FFI_CallFrame* call_frame);
// accl_ppermute: y_k = x_k of the rank that sends to this one (zeros where none does).
extern "C" XLA_FFI_Error* AcclPermuteInstantiate(XLA_FFI_CallFrame* call_frame);
// accl_all_to_all: y_k = block r of every rank's x_k (n blocks each), in rank order.
extern "C" XLA_FFI_Error* AcclAllToAllInstantiate(XLA_FFI_CallFrame* call_frame);
// accl_broadcast: y_k = the root's x_k; accl_reduce: y_k = the reduction of every rank's
// x_k at the root, zeros elsewhere (the root: the attribute `root`, a rank of the group).
extern "C" XLA_FFI_Error* AcclBroadcastInstantiate(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclReduceInstantiate(XLA_FFI_CallFrame* call_frame);
// accl_ragged_all_to_all: operand, output and layout table in, the output updated
// (aliased) out; its own execute handler.
extern "C" XLA_FFI_Error* AcclRaggedAllToAllInstantiate(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclRaggedAllToAllHandler(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclCollectiveHandler(XLA_FFI_CallFrame* call_frame);
// accl_allreduce_bf16_wire: accl_allreduce's site, float32 operands travelling as
// bfloat16 (narrowed and widened in place around the bfloat16 sum).
extern "C" XLA_FFI_Error* AcclWireBf16Handler(XLA_FFI_CallFrame* call_frame);

// The type of that state, which must be registered with XLA before the handlers.
XLA_FFI_TypeId* AcclSiteTypeId();
XLA_FFI_TypeInfo* AcclSiteTypeInfo();
