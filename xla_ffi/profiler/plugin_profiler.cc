#include "profiler/plugin_profiler.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "common/status.h"
#include "profiler/xspace_writer.h"

namespace accl {
namespace {

using xla_abi::CollectDataArgs;
using xla_abi::CreateArgs;
using xla_abi::PluginError;
using xla_abi::SessionArgs;

struct Session {
  bool running = false;
  std::string collected;  // the serialized XSpace, once stopped
};

// Sessions that are running; recording is on while there is one.
std::mutex sessions_mutex;
int running_sessions = 0;

std::string word_after(const std::string& text, const std::string& marker) {
  size_t at = text.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  return text.substr(at, text.find(' ', at) - at);
}

// No call fails: errors exist only so that XLA can destroy them.
void error_destroy(xla_abi::ErrorDestroyArgs*) {}
void error_message(xla_abi::ErrorMessageArgs* args) {
  args->message = "jax_accl profiler";
  args->message_size = std::strlen(args->message);
}
PluginError* error_get_code(xla_abi::ErrorGetCodeArgs* args) {
  args->code = 13;  // INTERNAL
  return nullptr;
}

PluginError* create(CreateArgs* args) {
  args->profiler = reinterpret_cast<xla_abi::PluginProfiler*>(new Session());
  return nullptr;
}

Session* session_of(xla_abi::PluginProfiler* profiler) {
  return reinterpret_cast<Session*>(profiler);
}

// Ends recording for session `s` (if it runs) and serializes what it recorded.
void stop_session(Session* s) {
  if (s == nullptr || !s->running) return;
  s->running = false;
  std::vector<TraceEvent> events;
  uint64_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    if (--running_sessions == 0) trace_enable(false);
    events = trace_take(&dropped);
  }
  if (dropped > 0 && !events.empty()) {  // say so where the events stop
    const TraceEvent& last = events.back();
    events.push_back(TraceEvent{str_cat("jax_accl: ", dropped, " later events dropped (more than ",
                                        kMaxTraceEvents, " in one session)"),
                                last.device, last.end_ns, last.end_ns, 0, ""});
  }
  s->collected = events_to_xspace(events, profiler_clock_offset_ns());
}

PluginError* stop(SessionArgs* args) {
  stop_session(session_of(args->profiler));
  return nullptr;
}

PluginError* destroy(SessionArgs* args) {
  stop_session(session_of(args->profiler));
  delete session_of(args->profiler);
  return nullptr;
}

PluginError* start(SessionArgs* args) {
  Session* s = session_of(args->profiler);
  if (s == nullptr || s->running) return nullptr;
  std::lock_guard<std::mutex> lock(sessions_mutex);
  if (running_sessions++ == 0) {
    trace_take();  // nothing from before the session
    trace_enable(true);
  }
  s->running = true;
  s->collected.clear();
  return nullptr;
}

PluginError* collect_data(CollectDataArgs* args) {
  Session* s = session_of(args->profiler);
  if (s == nullptr) return nullptr;
  stop_session(s);  // XLA stops first; this only covers a caller that did not
  if (args->buffer == nullptr) {
    args->buffer = reinterpret_cast<uint8_t*>(s->collected.data());
  } else {
    std::memcpy(args->buffer, s->collected.data(), s->collected.size());
  }
  args->buffer_size_in_bytes = s->collected.size();
  return nullptr;
}

const xla_abi::ProfilerApi kApi = {sizeof(xla_abi::ProfilerApi),
                                   nullptr,
                                   error_destroy,
                                   error_message,
                                   error_get_code,
                                   create,
                                   destroy,
                                   start,
                                   stop,
                                   collect_data};

struct PluginApi {
  xla_abi::ProfilerExtension extension{
      {sizeof(xla_abi::ProfilerExtension), xla_abi::kExtensionTypeProfiler, nullptr}, &kApi, 0};
  union {
    xla_abi::PjrtApiHead head;
    char zeros[4096];  // where a PJRT_Api's functions would be: all null
  };
  PluginApi() : zeros{} {
    head.struct_size = sizeof(zeros);
    head.extension_start = &extension.base;
    head.version_struct_size = 3 * sizeof(size_t);
  }
};

}  // namespace

const xla_abi::PjrtApiHead* profiler_plugin_api() {
  static PluginApi* api = new PluginApi();
  return &api->head;
}

int64_t profiler_clock_offset_ns() {
  // The smallest gap of a few paired readings bounds the error of the offset.
  int64_t best = 0, best_gap = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    int64_t before = trace_now_ns();
    int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    int64_t after = trace_now_ns();
    if (after - before < best_gap) {
      best_gap = after - before;
      best = wall - (before + after) / 2;
    }
  }
  return best;
}

std::string events_to_xspace(const std::vector<TraceEvent>& events, int64_t clock_offset_ns) {
  std::map<int64_t, XLineSpec> lines;
  for (const TraceEvent& e : events) {
    XLineSpec& line = lines[e.device];
    line.id = e.device;
    line.name = "device " + std::to_string(e.device);
    XEventSpec spec{e.name, e.start_ns + clock_offset_ns, e.end_ns + clock_offset_ns, {}};
    spec.stats.push_back(XStatValue{"bytes", false, e.bytes, ""});
    spec.stats.push_back(XStatValue{"call", true, 0, e.detail});
    std::string algorithm = word_after(e.name, "accl_allreduce ");
    if (!algorithm.empty()) spec.stats.push_back(XStatValue{"algorithm", true, 0, algorithm});
    std::string rail = word_after(e.name, " rail ");
    if (!rail.empty()) spec.stats.push_back(XStatValue{"rail", true, 0, rail});
    line.events.push_back(std::move(spec));
  }
  std::vector<XLineSpec> ordered;
  for (auto& [device, line] : lines) ordered.push_back(std::move(line));
  return serialize_xspace(kProfilerPlaneId, kProfilerPlaneName, ordered);
}

}  // namespace accl
