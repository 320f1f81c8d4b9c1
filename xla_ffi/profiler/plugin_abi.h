// The C interface through which XLA's profiler collects events from a PJRT plugin, as far
// as jax_accl uses it. Written from the layout XLA documents in
// xla/backends/profiler/plugin/profiler_c_api.h (PLUGIN_PROFILER_VERSION 1) and
// xla/pjrt/c/pjrt_c_api_profiler_extension.h (PJRT_API_PROFILER_EXTENSION_VERSION 1),
// the versions in jaxlib 0.10.2 and 0.12.0: jaxlib 0.10.2 accepts exactly the 80-byte
// profiler API below, 0.12.0 accepts it too. The names are jax_accl's own.
//
// The handshake: jax._src.lib._profiler.register_plugin_profiler takes a capsule named
// "pjrt_c_api" holding a PJRT_Api, walks its extension chain (PJRT_Api's second field)
// to the profiler extension and registers a tracer factory with XLA's profiler; every
// profiling session then calls create, start, stop, collect_data and destroy, and
// merges the planes of the serialized XSpace that collect_data returns.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accl::xla_abi {

// PJRT_Extension_Base and the PJRT_Extension_Type of the profiler extension.
struct ExtensionBase {
  size_t struct_size;
  int type;
  ExtensionBase* next;
};
inline constexpr int kExtensionTypeProfiler = 1;

struct PluginProfiler;  // the plugin's session state, opaque to XLA
struct PluginError;     // the plugin's error, opaque to XLA

struct ErrorDestroyArgs {
  size_t struct_size;
  void* priv;
  PluginError* error;
};
struct ErrorMessageArgs {
  size_t struct_size;
  void* priv;
  const PluginError* error;
  const char* message;  // out, lives as long as `error`
  size_t message_size;  // out
};
struct ErrorGetCodeArgs {
  size_t struct_size;
  void* priv;
  const PluginError* error;
  int code;  // out: an absl::StatusCode
};
struct CreateArgs {
  size_t struct_size;
  const char* options;  // a serialized tensorflow.ProfileOptions
  size_t options_size;
  PluginProfiler* profiler;  // out
};
// Destroy, Start and Stop take the same arguments.
struct SessionArgs {
  size_t struct_size;
  PluginProfiler* profiler;
};
// Called with buffer == nullptr first. jaxlib 0.10.2 and 0.12 then parse the buffer the
// plugin returns (plugin-owned until the next call or destroy); the documented protocol
// is a second call with a caller-allocated buffer of buffer_size_in_bytes. Both work.
struct CollectDataArgs {
  size_t struct_size;
  PluginProfiler* profiler;
  uint8_t* buffer;              // in/out
  size_t buffer_size_in_bytes;  // out
};

struct ProfilerApi {
  size_t struct_size;
  void* priv;
  void (*error_destroy)(ErrorDestroyArgs*);
  void (*error_message)(ErrorMessageArgs*);
  PluginError* (*error_get_code)(ErrorGetCodeArgs*);
  PluginError* (*create)(CreateArgs*);
  PluginError* (*destroy)(SessionArgs*);
  PluginError* (*start)(SessionArgs*);
  PluginError* (*stop)(SessionArgs*);
  PluginError* (*collect_data)(CollectDataArgs*);
};
static_assert(sizeof(ProfilerApi) == 80, "the size jaxlib 0.10.2 checks");

// PJRT_Profiler_Extension.
struct ProfilerExtension {
  ExtensionBase base;
  const ProfilerApi* profiler_api;
  int64_t traceme_context_id;
};

// The head of a PJRT_Api: struct_size, extension_start, then PJRT_Api_Version. Of a
// PJRT_Api, register_plugin_profiler reads only the extension chain; jax_accl hands it
// this head followed by zeros (no function of the PJRT C API is provided).
struct PjrtApiHead {
  size_t struct_size;
  ExtensionBase* extension_start;
  size_t version_struct_size;
  ExtensionBase* version_extension_start;
  int major_version;
  int minor_version;
};

}  // namespace accl::xla_abi
