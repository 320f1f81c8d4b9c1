#include "runtime/stall.h"

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <array>
#include <chrono>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/forced_unwind.h"

namespace accl {

std::atomic<double>& stall_seconds() {
  static std::atomic<double> seconds{10.0};
  return seconds;
}

namespace {

// XLA:CPU's pool (set_xla_pool): its threads (0: unknown) and the process's devices.
std::atomic<int> g_pool_threads{0};
std::atomic<int> g_pool_devices{0};

// The last launches each device began: enough to cover every launch in flight (XLA:CPU
// admits 32 per device).
constexpr size_t kLaunchesKept = 64;
constexpr int64_t kNoLaunch = std::numeric_limits<int64_t>::min();

// One device's launches and calls, noted by every call of the device without a lock
// (a small call is a few microseconds: one lock shared by every device, taken twice by
// each call, made 8 device threads on 2 cores wait for each other), read by the checks.
struct alignas(64) DeviceLaunches {
  explicit DeviceLaunches(int64_t id) : device(id) {
    for (auto& run : runs) run.store(kNoLaunch, std::memory_order_relaxed);
  }
  const int64_t device;
  // The jax_accl calls the device is in now (begun, not done): a device in one holds a
  // thread, so one that has not begun a launch is late (a call of an earlier launch
  // waiting on a late process), not a device XLA:CPU gave no thread.
  std::atomic<int> calls_in{0};
  std::atomic<int64_t> last{kNoLaunch};  // the launch noted last
  std::atomic<uint64_t> noted{0};        // launches noted: the next slot of `runs`
  std::array<std::atomic<int64_t>, kLaunchesKept> runs;

  bool holds(int64_t run_id) const {
    for (const auto& run : runs) {
      if (run.load(std::memory_order_acquire) == run_id) return true;
    }
    return false;
  }
};

// Devices by id in an open-addressed table whose slots are only ever filled (never
// emptied): a process's devices are few and live as long as it. Beyond kDeviceSlots
// devices a device goes untracked, and once one has, no device is taken for stalled.
constexpr size_t kDeviceSlots = 4096;
std::atomic<bool> g_devices_untracked{false};
std::array<std::atomic<DeviceLaunches*>, kDeviceSlots>& device_slots() {
  static auto* slots = new std::array<std::atomic<DeviceLaunches*>, kDeviceSlots>{};
  return *slots;
}

// Device `device`'s entry, made where `make` and it has none (nullptr: none, or no slot).
DeviceLaunches* launches_of(int64_t device, bool make) {
  auto& slots = device_slots();
  // Fibonacci hashing: the product's top 12 bits, which every bit of the id moves.
  static_assert(kDeviceSlots == 4096);
  const size_t start = (static_cast<uint64_t>(device) * 0x9E3779B97F4A7C15ull) >> 52;
  for (size_t i = 0; i < kDeviceSlots; ++i) {
    std::atomic<DeviceLaunches*>& slot = slots[(start + i) % kDeviceSlots];
    DeviceLaunches* entry = slot.load(std::memory_order_acquire);
    if (entry == nullptr) {
      if (!make) return nullptr;
      auto fresh = std::make_unique<DeviceLaunches>(device);
      if (slot.compare_exchange_strong(entry, fresh.get(), std::memory_order_acq_rel)) {
        return fresh.release();  // never destroyed: call threads may outlive exit
      }
      // Another device took the slot first: `entry` is now that one.
    }
    if (entry->device == device) return entry;
  }
  if (make) g_devices_untracked.store(true, std::memory_order_release);
  return nullptr;
}

bool begun(int64_t device, int64_t run_id) {
  const DeviceLaunches* d = launches_of(device, false);
  if (d == nullptr) return g_devices_untracked.load(std::memory_order_acquire);
  return d->calls_in.load(std::memory_order_acquire) > 0 || d->holds(run_id);
}

// CPU time of the process's threads but jax_accl's call threads ("accl_call": those wait,
// polling their links), so that waiting calls do not hide an idle process: the whole
// process's, less what the living call threads used (one that exited stays counted,
// which can only make the process look busier).
double cpu_seconds_outside_call_threads() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  double seconds = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  static const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return seconds;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%s/stat", entry->d_name);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) continue;
    char line[512];
    const size_t n = std::fread(line, 1, sizeof line - 1, f);
    std::fclose(f);
    line[n] = 0;
    // "tid (comm) state ...": utime and stime are the 12th and 13th fields after comm.
    const char* open = std::strchr(line, '(');
    const char* close = std::strrchr(line, ')');
    if (open == nullptr || close == nullptr || std::string(open + 1, close) != "accl_call") {
      continue;
    }
    unsigned long long utime = 0, stime = 0;
    if (std::sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                    &stime) == 2) {
      seconds -= tick * static_cast<double>(utime + stime);
    }
  }
  closedir(tasks);
  return seconds;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The process's CPU time, sampled at most every 250 ms by whoever asks; old samples go.
// A gap of more than kGapSeconds between two samples (the process stopped, SIGSTOP, or
// not run) starts the window anew: what nobody watched is not idleness.
constexpr double kGapSeconds = 3.0;
struct CpuSamples {
  std::mutex mutex;
  std::deque<std::pair<Clock::time_point, double>> samples;

  // Cores this process used over the last `window` seconds, or -1 if the samples do not
  // reach back that far yet.
  double cores_over(double window) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto now = Clock::now();
    if (samples.empty() || seconds_between(samples.back().first, now) >= 0.25) {
      if (!samples.empty() && seconds_between(samples.back().first, now) > kGapSeconds) {
        samples.clear();
      }
      samples.emplace_back(now, cpu_seconds_outside_call_threads());
    }
    while (samples.size() > 2 && seconds_between(samples[1].first, now) >= window) {
      samples.pop_front();
    }
    // From the oldest sample in the window to the newest (no fresh scan of /proc here).
    const auto& [then, cpu] = samples.front();
    const double wall = seconds_between(then, samples.back().first);
    if (wall < window) return -1;
    return (samples.back().second - cpu) / wall;
  }
};

CpuSamples& cpu_samples() {
  static CpuSamples* s = new CpuSamples;
  return *s;
}

std::string list(const std::vector<int64_t>& devices, const std::vector<uint8_t>& present,
                 bool ranks) {
  std::string out;
  for (size_t r = 0; r < present.size(); ++r) {
    if (present[r]) continue;
    out += str_cat(out.empty() ? "" : ", ",
                   ranks ? static_cast<int64_t>(r) : (r < devices.size() ? devices[r] : -1));
  }
  return out;
}

// What the message says of XLA:CPU's pool.
std::string pool_words() {
  const auto [threads, devices] = xla_pool();
  if (threads <= 0) {
    return "XLA:CPU's thread pool is of a size jax_accl did not set (JAX made its CPU client "
           "before jax_accl was imported)";
  }
  return str_cat("XLA:CPU's thread pool has ", threads, " threads for the ", devices,
                 " devices of this process (PJRT_NPROC), fewer than two per device");
}

// Calls across processes in flight (watch_call), by token.
struct Watched {
  int64_t run_id = 0;
  std::vector<int64_t> devices;
  Clock::time_point since;
};
struct Watch {
  std::mutex mutex;
  std::unordered_map<uint64_t, Watched> calls;
  uint64_t next = 1;
  std::set<int64_t> reported;  // launches already reported: once each
};
Watch& watch() {
  static Watch* w = new Watch;  // never destroyed: the watchdog runs until exit
  return *w;
}

// The watchdog's last report, until a call across processes succeeds (stall_report).
struct Report {
  std::atomic<bool> held{false};
  std::mutex mutex;
  std::string why;
  uint64_t after = 0;  // the first abort generation of the calls begun after the stall
};
Report& report() {
  static Report* r = new Report;  // never destroyed: call threads may outlive exit
  return *r;
}

// Forgets the report unless `generation` (a call's) began before the stall;
// kEveryGeneration: whatever.
constexpr uint64_t kEveryGeneration = std::numeric_limits<uint64_t>::max();
void forget_report_unless_before(uint64_t generation) {
  Report& r = report();
  if (!r.held.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (generation < r.after) return;  // a call of before the stall
  r.why.clear();
  r.held.store(false, std::memory_order_release);
}

// This process's devices: those that ever made a jax_accl call.
bool local_device(int64_t device) { return launches_of(device, false) != nullptr; }

// One look at the watched calls: the first stalled one ends every pending wait.
void check_watched() {
  const double stall = stall_seconds().load(std::memory_order_relaxed);
  std::vector<Watched> old;
  bool waiting = false;  // a call in flight a second already: the CPU is sampled
  {
    Watch& w = watch();
    std::lock_guard<std::mutex> lock(w.mutex);
    for (const auto& [token, call] : w.calls) {
      waiting = waiting || seconds_between(call.since, Clock::now()) >= 1.0;
      if (stall > 0 && seconds_between(call.since, Clock::now()) >= stall &&
          !w.reported.count(call.run_id)) {
        old.push_back(call);
      }
    }
  }
  if (!waiting || !xla_pool_can_stall()) return;
  const double cores = cpu_samples().cores_over(kIdleSeconds);
  if (old.empty() || cores < 0 || cores >= kIdleCores) return;
  for (const Watched& call : old) {
    // Its ranks on this process's devices that never began the launch.
    std::vector<uint8_t> present(call.devices.size(), 1);
    bool missing = false;
    for (size_t r = 0; r < call.devices.size(); ++r) {
      if (local_device(call.devices[r]) && !begun(call.devices[r], call.run_id)) {
        present[r] = 0;
        missing = true;
      }
    }
    if (!missing) continue;
    {
      Watch& w = watch();
      std::lock_guard<std::mutex> lock(w.mutex);
      if (!w.reported.insert(call.run_id).second) return;
    }
    // Every pending wait of the process ends (those of the stalled launch, whose devices
    // are out of step from now on, among them): each says why.
    const std::string why = str_cat(
        "jax_accl ended every pending call of this process because a call across processes ",
        "stalled: ", stall_message(call.devices, present, call.run_id, call.since),
        " The job's calls are out of step after this stall: restart the job.");
    abort_pending_waits_because(why);
    {
      Report& r = report();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.why = why;
      r.after = abort_generation();
      r.held.store(true, std::memory_order_release);
    }
    return;
  }
}

void watchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    try {
      check_watched();
    } catch (ForcedUnwind&) {  // a cancelled thread must unwind to its end
      throw;
    } catch (...) {  // an allocation that failed: look again next time
    }
  }
}

}  // namespace

uint64_t watch_call(int64_t run_id, const std::vector<int64_t>& devices) {
  static std::once_flag started;
  std::call_once(started, [] { std::thread(watchdog).detach(); });
  Watch& w = watch();
  std::lock_guard<std::mutex> lock(w.mutex);
  const uint64_t token = w.next++;
  w.calls[token] = Watched{run_id, devices, Clock::now()};
  return token;
}

void unwatch_call(uint64_t token) {
  Watch& w = watch();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.calls.erase(token);
}

std::string stall_report(uint64_t generation) {
  Report& r = report();
  if (!r.held.load(std::memory_order_acquire)) return std::string();
  std::lock_guard<std::mutex> lock(r.mutex);
  return generation >= r.after ? r.why : std::string();
}

void note_call_across_processes_succeeded(uint64_t generation) {
  forget_report_unless_before(generation);
}

void forget_stall_report() { forget_report_unless_before(kEveryGeneration); }

void note_call_ended(int64_t device) {
  if (DeviceLaunches* d = launches_of(device, false)) {
    d->calls_in.fetch_sub(1, std::memory_order_acq_rel);
  }
}

int calls_in_progress(int64_t device) {
  const DeviceLaunches* d = launches_of(device, false);
  return d == nullptr ? 0 : d->calls_in.load(std::memory_order_acquire);
}

void note_launch_begun(int64_t device, int64_t run_id) {
  DeviceLaunches* d = launches_of(device, true);
  if (d == nullptr) return;  // untracked (more devices than slots)
  d->calls_in.fetch_add(1, std::memory_order_acq_rel);
  // Most calls are of the launch noted last; two calls of one device noting a launch
  // at once may both keep it, which costs a slot.
  if (d->last.load(std::memory_order_acquire) == run_id || d->holds(run_id)) return;
  const uint64_t slot = d->noted.fetch_add(1, std::memory_order_acq_rel) % kLaunchesKept;
  d->runs[slot].store(run_id, std::memory_order_release);
  d->last.store(run_id, std::memory_order_release);
}

bool xla_launch_stalled(const std::vector<int64_t>& devices, const std::vector<uint8_t>& present,
                        int64_t run_id, Clock::time_point since) {
  const double stall = stall_seconds().load(std::memory_order_relaxed);
  if (stall <= 0 || !xla_pool_can_stall()) return false;
  // Sampled (at most every 250 ms) from the first slice of every wait, so that the
  // window is full by the time the call has waited `stall`.
  const double cores = cpu_samples().cores_over(kIdleSeconds);
  if (seconds_between(since, Clock::now()) < stall) return false;
  bool missing = false;
  for (size_t r = 0; r < present.size(); ++r) {
    if (present[r]) continue;
    // A rank of unknown device, or one that began the launch, is late, not stalled.
    if (r >= devices.size() || devices[r] < 0 || begun(devices[r], run_id)) return false;
    missing = true;
  }
  return missing && cores >= 0 && cores < kIdleCores;
}

void set_xla_pool(int threads, int devices) {
  g_pool_threads.store(threads, std::memory_order_relaxed);
  g_pool_devices.store(devices, std::memory_order_relaxed);
}

std::pair<int, int> xla_pool() {
  return {g_pool_threads.load(std::memory_order_relaxed),
          g_pool_devices.load(std::memory_order_relaxed)};
}

bool xla_pool_can_stall() {
  const auto [threads, devices] = xla_pool();
  return threads <= 0 || threads < 2 * devices;
}

std::string stall_message(const std::vector<int64_t>& devices, const std::vector<uint8_t>& present,
                          int64_t run_id, Clock::time_point since) {
  const auto waited = static_cast<int64_t>(seconds_between(since, Clock::now()));
  return str_cat(
      "XLA:CPU never started this launch (run id ", run_id, ") on devices [",
      list(devices, present, false), "] of this process (ranks [", list(devices, present, true),
      "]): they made no jax_accl call of it while the call waited ", waited,
      " s for them, the process idle, and ", pool_words(),
      ". Most likely XLA:CPU's deadlock, not this collective's: ",
      "with many launches of a multi-device program in flight (a loop that dispatches steps ",
      "without reading a result), XLA:CPU's client blocks the threads that dispatch new ",
      "launches (at 32 launches in flight per device) in the thread pool that must run every ",
      "device of a launch, and the last devices of the launch never get a thread (jax.lax ",
      "collectives hang the same way, ending in XLA's \"Termination timeout\"). To avoid it: ",
      "read a result or call jax.block_until_ready every step or every few steps (fewer than 32 ",
      "launches in flight), or give XLA:CPU's thread pool two threads per device of this ",
      "process: import jax_accl before JAX makes its CPU client, which then gets them, or set ",
      "PJRT_NPROC=<2 x devices> in the environment before it does; with that pool jax_accl ",
      "never takes a device for stalled. (If those devices were only late, in a host callback ",
      "or at a debugger's prompt, the same pool, or a larger JAX_ACCL_STALL_S, lets the call ",
      "wait for them; if they did run this launch, the program does not make this call on ",
      "every device of its group.)");
}

}  // namespace accl
