#include "runtime/collective_site.h"

#include <cxxabi.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <set>

#include "common/health.h"
#include "runtime/call_plan.h"
#include "runtime/call_threads.h"
#include "runtime/collective.h"
#include "runtime/one_shot.h"
#include "runtime/stats.h"

namespace accl {

CollectiveSite::CollectiveSite() { call_site_made(); }
CollectiveSite::~CollectiveSite() { call_site_freed(); }

namespace {

// Rank r's peers in a permutation of the group `partitions` (partition ids in rank
// order), from the partition each partition sends to: a destination outside the group,
// or two sources for one destination, is an error.
Status permute_peers(const SiteAttributes& a, const std::vector<int64_t>& partitions, size_t r,
                     PermutePeers* peers) {
  if (a.send_to.size() != a.devices.size()) {
    return error(Code::kInvalidArgument, a.name, ": the permutation names ", a.send_to.size(),
                 " partitions, the program runs ", a.devices.size());
  }
  auto rank_of = [&](int64_t partition) {
    auto it = std::find(partitions.begin(), partitions.end(), partition);
    return it == partitions.end() ? -1 : static_cast<int>(it - partitions.begin());
  };
  *peers = PermutePeers{};
  if (a.send_to[partitions[r]] >= 0) {
    peers->send_to = rank_of(a.send_to[partitions[r]]);
    if (peers->send_to < 0) {
      return error(Code::kInvalidArgument, a.name, ": partition ", partitions[r], " sends to ",
                   a.send_to[partitions[r]], ", outside its group");
    }
  }
  for (size_t q = 0; q < partitions.size(); ++q) {
    if (a.send_to[partitions[q]] != partitions[r]) continue;
    if (peers->recv_from >= 0) {
      return error(Code::kInvalidArgument, a.name, ": two partitions send to partition ",
                   partitions[r]);
    }
    peers->recv_from = static_cast<int>(q);
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
  site->signature_.op = static_cast<ReduceOp>(a.op);
  site->signature_.algorithm = static_cast<Algorithm>(a.algorithm);
  site->signature_.collective = a.collective;
  // The op id and the lane: identical equations (an unrolled scan, a remat) share an op
  // id, but each emitted call has a lane of its own.
  site->op_key_ = a.op_id ^ a.lane;
  site->lane_ = static_cast<uint64_t>(a.lane);
  site->timeout_s_ = a.timeout_ms / 1000.0;
  site->pipeline_chunks_ = static_cast<int>(a.pipeline_chunks);
  site->in_process_ = a.processes <= 1;
  std::set<int64_t> seen;
  const auto n = static_cast<int64_t>(a.devices.size());
  for (int64_t group = 0; group * a.group_size < static_cast<int64_t>(a.groups.size()); ++group) {
    std::vector<int64_t> partitions;
    for (int64_t j = group * a.group_size; j < (group + 1) * a.group_size; ++j) {
      if (a.groups[j] < 0) continue;
      if (a.groups[j] >= n) {
        return error(Code::kInvalidArgument, "partition id ", a.groups[j], " of ", a.name,
                     " is outside the device list (", n, " partitions)");
      }
      if (!seen.insert(a.groups[j]).second) {
        return error(Code::kInvalidArgument, "partition ", a.groups[j], " is in two groups of ",
                     a.name);
      }
      partitions.push_back(a.groups[j]);
    }
    Member member;
    member.group = group;
    std::string ids;
    for (int64_t p : partitions) {
      member.devices.push_back(a.devices[p]);
      ids += str_cat(ids.empty() ? "" : " ", p);
    }
    member.label = str_cat(a.name, " group [", ids, "]");
    for (size_t r = 0; r < partitions.size(); ++r) {
      member.rank = static_cast<int>(r);
      if (collective_row(a.collective).permutes) {
        ACCL_RETURN_IF_ERROR(permute_peers(a, partitions, r, &member.peers));
      }
      site->members_[a.devices[partitions[r]]] = member;
    }
  }
  // A device that runs a partition outside every group learns it when it calls.
  for (int64_t p = 0; p < n; ++p) {
    if (!seen.count(p)) site->members_.erase(a.devices[p]);
  }
  site->devices_ = std::move(a.devices);
  site->rendezvous_ = std::make_shared<Rendezvous>();
  *out = std::move(site);
  return Status::Ok();
}

Status CollectiveSite::check_counts(const Member& member, const CallBuffers& buffers) const {
  const uint64_t n = member.devices.size();
  const CollectiveRow& row = collective_row(signature_.collective);
  for (size_t k = 0; k < buffers.counts.size(); ++k) {
    const uint64_t in = buffers.counts[k], out = buffers.out_counts[k];
    // (A reduce-scatter's input is a whole number of blocks.)
    if (row.output_count(in, n) != out || row.block_count(in, n) * n < in) {
      return error(Code::kInvalidArgument, member.label, ": operand ", k, " has ", in,
                   " elements and result ", out, ", which a ",
                   collective_name(signature_.collective), " over ", n, " devices cannot have");
    }
  }
  return Status::Ok();
}

CallSpec CollectiveSite::spec_of(const Member& member, int64_t device, int64_t run_id, DType dtype,
                                 Clock::time_point issued) {
  CallSpec spec;
  spec.issued = issued;
  spec.signature = signature_;
  spec.signature.dtype = dtype;
  spec.rank = member.rank;
  spec.size = static_cast<int>(member.devices.size());
  spec.key = CallKey{run_id, op_key_, member.group, sequences_.next(device, run_id, timeout_s_)};
  spec.label = str_cat(member.label, " call ", spec.key.seq);
  spec.timeout_s = timeout_s_;
  spec.pipeline_chunks = pipeline_chunks_;
  spec.device = device;
  spec.lane = lane_;
  spec.rendezvous = rendezvous_;
  spec.peers = member.peers;
  return spec;
}

void CollectiveSite::run(int64_t device, int64_t run_id, CallBuffers buffers,
                         Clock::time_point issued, std::function<void(const Status&)> done) {
  if (Status usable = process_usable(); !usable.ok()) return done(usable);
  auto it = members_.find(device);
  if (it == members_.end()) {
    const bool runs_one = std::find(devices_.begin(), devices_.end(), device) != devices_.end();
    return done(
        runs_one
            ? error(Code::kInvalidArgument, "device ", device, " is in no replica group of ", name_)
            : error(Code::kInvalidArgument, "device ", device, " runs no partition of ", name_));
  }
  const Member& member = it->second;
  if (Status fits = check_counts(member, buffers); !fits.ok()) return done(fits);
  const CallSpec spec = spec_of(member, device, run_id, buffers.dtype, issued);
  call_began();
  auto complete = [done = std::move(done)](const Status& s) {
    call_ended();
    done(s);
  };
  // What a rank stages or receives, whichever is more (an all-gather's output is n inputs).
  size_t bytes_in = 0, bytes_out = 0;
  for (uint64_t count : buffers.counts) bytes_in += count * dtype_size(buffers.dtype);
  for (uint64_t count : buffers.out_counts) bytes_out += count * dtype_size(buffers.dtype);
  if (in_process_ && plan_one_shot(std::max(bytes_in, bytes_out), spec.signature.algorithm)) {
    return one_shot(spec, buffers.in, buffers.out, buffers.counts, std::move(complete));
  }
  // The buffers stay valid until `done` runs (XLA's contract for async calls). Each call
  // gets a thread of its own, so that calls of one device that XLA runs concurrently
  // never queue behind each other (their order may differ by device).
  run_on_call_thread([spec, in_process = in_process_, devices = member.devices,
                      buffers = std::move(buffers), complete = std::move(complete)]() {
    // Nothing may escape a call thread (std::terminate), and `done` must run either way:
    // an exception (an allocation that failed) becomes the call's error.
    Status s;
    try {
      s = in_process ? run_in_process(spec, buffers.in, buffers.out, buffers.counts)
                     : run_across_processes(spec, devices, buffers.in, buffers.out, buffers.counts);
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

}  // namespace accl
