// The XLA FFI handlers of jax_accl (CPU). Only files in ffi/ include the XLA header.
#pragma once

#include "xla/ffi/api/c_api.h"

// The XLA FFI API version the handlers below carry: that of the headers they were compiled
// against (third_party/xla, the oldest the package supports). A jaxlib whose FFI is older
// refuses them, which stops its CPU backend (jax_accl/ffi_version.py checks first).
constexpr int kAcclFfiApiMajor = XLA_FFI_API_MAJOR;
constexpr int kAcclFfiApiMinor = XLA_FFI_API_MINOR;

// Every target (runtime/collective.cc's table: accl_allreduce, accl_reduce_scatter, ...)
// has the one instantiate handler, which makes the executable's call site (its state, of
// the type below) from the attributes (the `collective` attribute says which), and the
// one execute handler (N operands to N results) but accl_ragged_all_to_all's (operand,
// output and layout table in, the output updated, aliased, out).
extern "C" XLA_FFI_Error* AcclCollectiveInstantiate(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclRaggedAllToAllHandler(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* AcclCollectiveHandler(XLA_FFI_CallFrame* call_frame);
// accl_allreduce_bf16_wire: an all-reduce's site (its `collective` attribute the
// all-reduce's), float32 operands travelling as bfloat16 (narrowed and widened in place
// around the bfloat16 sum).
inline constexpr const char* kAllreduceBf16WireTarget = "accl_allreduce_bf16_wire";
extern "C" XLA_FFI_Error* AcclWireBf16Handler(XLA_FFI_CallFrame* call_frame);

// The type of that state, which must be registered with XLA before the handlers.
XLA_FFI_TypeId* AcclSiteTypeId();
XLA_FFI_TypeInfo* AcclSiteTypeInfo();
