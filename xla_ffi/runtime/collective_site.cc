#include "runtime/collective_site.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "common/faults.h"
#include "common/health.h"
#include "runtime/collective.h"
#include "runtime/stall.h"
#include "runtime/stats.h"

namespace accl {

CollectiveSite::CollectiveSite() { call_site_made(); }
CollectiveSite::~CollectiveSite() { call_site_freed(); }

namespace {

// Rank r's peers in a permutation of the group `partitions` (partition ids in rank
// order), from the partition each partition sends to: a destination outside the group,
// or two sources for one destination, is an error.
Status permute_peers(const SiteAttributes& a, const std::vector<int64_t>& partitions, size_t r,
                     CollectiveArgs* peers) {
  const std::vector<int64_t>& send_to = a.args;  // by partition
  if (send_to.size() != a.devices.size()) {
    return error(Code::kInvalidArgument, a.name, ": the permutation names ", send_to.size(),
                 " partitions, the program runs ", a.devices.size());
  }
  auto rank_of = [&](int64_t partition) {
    auto it = std::find(partitions.begin(), partitions.end(), partition);
    return it == partitions.end() ? -1 : static_cast<int>(it - partitions.begin());
  };
  *peers = CollectiveArgs{};
  if (send_to[partitions[r]] >= 0) {
    peers->send_to = rank_of(send_to[partitions[r]]);
    if (peers->send_to < 0) {
      return error(Code::kInvalidArgument, a.name, ": partition ", partitions[r], " sends to ",
                   send_to[partitions[r]], ", outside its group");
    }
  }
  for (size_t q = 0; q < partitions.size(); ++q) {
    if (send_to[partitions[q]] != partitions[r]) continue;
    if (peers->recv_from >= 0) {
      return error(Code::kInvalidArgument, a.name, ": two partitions send to partition ",
                   partitions[r]);
    }
    peers->recv_from = static_cast<int>(q);
  }
  return Status::Ok();
}

// A rooted collective's root (its one argument), a rank of a group of `size`.
Status root_of(const SiteAttributes& a, size_t size, CollectiveArgs* args) {
  if (a.args.size() != 1) {
    return error(Code::kInvalidArgument, a.name, ": a rooted collective takes one argument, ",
                 "its root; it has ", a.args.size());
  }
  if (a.args[0] < 0 || a.args[0] >= static_cast<int64_t>(size)) {
    return error(Code::kInvalidArgument, a.name, ": root ", a.args[0], " is outside a group of ",
                 size);
  }
  args->root = static_cast<int>(a.args[0]);
  return Status::Ok();
}

// The settings every call of the site has, as lowered.
CallSettings settings_of(const SiteAttributes& a) {
  CallSettings settings;
  settings.signature.op = static_cast<ReduceOp>(a.op);
  settings.signature.algorithm = static_cast<Algorithm>(a.algorithm);
  settings.signature.collective = a.collective;
  settings.timeout_s = a.timeout_ms / 1000.0;
  settings.pipeline_chunks = static_cast<int>(a.pipeline_chunks);
  return settings;
}

// Group `group`'s partition ids (its row of `a.groups`, the -1 padding skipped), each
// checked: inside the device list, and in no group before it (`seen`).
Status group_partitions(const SiteAttributes& a, int64_t group, std::set<int64_t>* seen,
                        std::vector<int64_t>* partitions) {
  const auto n = static_cast<int64_t>(a.devices.size());
  for (int64_t j = group * a.group_size; j < (group + 1) * a.group_size; ++j) {
    if (a.groups[j] < 0) continue;
    if (a.groups[j] >= n) {
      return error(Code::kInvalidArgument, "partition id ", a.groups[j], " of ", a.name,
                   " is outside the device list (", n, " partitions)");
    }
    if (!seen->insert(a.groups[j]).second) {
      return error(Code::kInvalidArgument, "partition ", a.groups[j], " is in two groups of ",
                   a.name);
    }
    partitions->push_back(a.groups[j]);
  }
  return Status::Ok();
}

}  // namespace

Status CollectiveSite::make(SiteAttributes a, std::unique_ptr<CollectiveSite>* out) {
  if (a.op < 0 || a.op >= kNumReduceOps || a.algorithm < 0 || a.algorithm >= kNumAlgorithms ||
      a.group_size <= 0 || a.groups.size() % a.group_size != 0 || a.pipeline_chunks < 0 ||
      a.pipeline_chunks > std::numeric_limits<int>::max()) {
    return error(Code::kInvalidArgument, "bad attributes in ", a.name);
  }
  auto site = std::unique_ptr<CollectiveSite>(new CollectiveSite());
  site->name_ = a.name;
  site->settings_ = settings_of(a);
  // The op id and the lane: identical equations (an unrolled scan, a remat) share an op
  // id, but each emitted call has a lane of its own.
  site->op_key_ = a.op_id ^ a.lane;
  std::set<int64_t> seen;
  std::map<int64_t, Member> members;  // by global device id
  const auto n = static_cast<int64_t>(a.devices.size());
  for (int64_t group = 0; group * a.group_size < static_cast<int64_t>(a.groups.size()); ++group) {
    std::vector<int64_t> partitions;
    ACCL_RETURN_IF_ERROR(group_partitions(a, group, &seen, &partitions));
    Member member;
    member.group = group;
    CallGroup& g = member.call_group;
    std::string ids;
    for (int64_t p : partitions) {
      g.devices.push_back(a.devices[p]);
      ids += str_cat(ids.empty() ? "" : " ", p);
    }
    g.label = str_cat(a.name, " group [", ids, "]");
    g.lane = static_cast<uint64_t>(a.lane);
    g.group = std::make_shared<Group>();  // calls hold it to their end
    g.across_processes = a.processes > 1;
    for (size_t r = 0; r < partitions.size(); ++r) {
      g.rank = static_cast<int>(r);
      if (collective_row(a.collective).permutes) {
        ACCL_RETURN_IF_ERROR(permute_peers(a, partitions, r, &g.args));
      }
      if (collective_row(a.collective).rooted) {
        ACCL_RETURN_IF_ERROR(root_of(a, partitions.size(), &g.args));
      }
      members[a.devices[partitions[r]]] = member;
    }
  }
  // A device that runs a partition outside every group learns it when it calls.
  for (int64_t p = 0; p < n; ++p) {
    if (!seen.count(p)) members.erase(a.devices[p]);
  }
  for (auto& [id, member] : members) {
    site->member_ids_.push_back(id);
    site->members_.push_back(std::move(member));
  }
  site->devices_ = std::move(a.devices);
  *out = std::move(site);
  return Status::Ok();
}

Status CollectiveSite::check_counts(const Member& member, const CallBuffers& buffers) const {
  const uint64_t n = member.call_group.devices.size();
  const Collective collective = settings_.signature.collective;
  const CollectiveRow& row = collective_row(collective);
  if (row.output_count == nullptr) return Status::Ok();  // the FFI handler checked them
  for (size_t k = 0; k < buffers.counts.size(); ++k) {
    const uint64_t in = buffers.counts[k], out = buffers.out_counts[k];
    // (A reduce-scatter's input is a whole number of blocks.)
    if (row.output_count(in, n) != out || row.block_count(in, n) * n < in) {
      return error(Code::kInvalidArgument, member.call_group.label, ": operand ", k, " has ", in,
                   " elements and result ", out, ", which a ", collective_name(collective),
                   " over ", n, " devices cannot have");
    }
  }
  return Status::Ok();
}

// One call's answer: `done` exactly once, after undoing what the call's start noted
// (stall.h's count of the device's calls, its watch), whatever ends it: its completion,
// an error found before it starts, or an exception while starting it.
struct CollectiveSite::Reply {
  std::function<void(const Status&)> done;
  std::atomic<bool> answered{false};
  int64_t counted_device = -1;    // note_launch_begun counted the call
  std::optional<uint64_t> watch;  // watch_call watches it
  void operator()(const Status& s) {
    if (answered.exchange(true)) return;
    if (watch) unwatch_call(*watch);
    if (counted_device >= 0) note_call_ended(counted_device);
    done(s);
  }
};

void CollectiveSite::run(int64_t device, int64_t run_id, CallBuffers buffers,
                         Clock::time_point issued, std::function<void(const Status&)> done) {
  std::shared_ptr<Reply> reply;
  try {
    reply = std::make_shared<Reply>();
  } catch (const std::exception& e) {
    return done(error(Code::kInternal, name_, " on device ", device, ": ", e.what()));
  }
  reply->done = std::move(done);
  // Nothing escapes into XLA's handler: an exception (an allocation that failed while
  // numbering, making or queueing the call) is the call's error.
  try {
    start(device, run_id, std::move(buffers), issued, reply);
  } catch (const std::exception& e) {
    (*reply)(error(Code::kInternal, name_, " on device ", device, ": ", e.what()));
  }
}

void CollectiveSite::start(int64_t device, int64_t run_id, CallBuffers buffers,
                           Clock::time_point issued, const std::shared_ptr<Reply>& reply) {
  if (Status usable = process_usable(); !usable.ok()) return (*reply)(usable);
  const auto it = std::lower_bound(member_ids_.begin(), member_ids_.end(), device);
  if (it == member_ids_.end() || *it != device) {
    const bool runs_one = std::find(devices_.begin(), devices_.end(), device) != devices_.end();
    return (*reply)(
        runs_one
            ? error(Code::kInvalidArgument, "device ", device, " is in no replica group of ", name_)
            : error(Code::kInvalidArgument, "device ", device, " runs no partition of ", name_));
  }
  note_launch_begun(device, run_id);
  reply->counted_device = device;
  const Member& member = members_[it - member_ids_.begin()];
  if (Status fits = check_counts(member, buffers); !fits.ok()) return (*reply)(fits);
  const CallKey key{run_id, op_key_, member.group,
                    member.call_group.group->sequences().next(device, run_id, settings_.timeout_s)};
  if (member.call_group.across_processes) {  // watched for XLA:CPU's stall (stall.h)
    reply->watch = watch_call(run_id, member.call_group.devices);
  }
  fault_point();  // an allocation or thread start of the call, injected by tests
  start_call(make_call(member.call_group, key, settings_, buffers.dtype, issued),
             std::move(buffers), [reply](const Status& s) { (*reply)(s); });
}

}  // namespace accl
