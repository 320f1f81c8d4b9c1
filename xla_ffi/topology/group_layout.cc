#include "topology/group_layout.h"

#include <algorithm>
#include <map>

namespace accl {

Status GroupLayout::make(const std::vector<RankPlace>& places, GroupLayout* out) {
  if (places.empty()) return error(Code::kInvalidArgument, "a group needs at least one rank");
  GroupLayout layout;
  std::map<std::string, int> host_index;
  std::map<int, std::pair<int, int>> process_index;  // process -> (host, position)
  for (size_t r = 0; r < places.size(); ++r) {
    auto [h, new_host] = host_index.emplace(places[r].host, static_cast<int>(layout.at_.size()));
    if (new_host) layout.at_.emplace_back();
    auto& host = layout.at_[h->second];
    auto [p, new_process] = process_index.emplace(
        places[r].process, std::make_pair(h->second, static_cast<int>(host.size())));
    if (!new_process && p->second.first != h->second) {
      return error(Code::kInvalidArgument, "process ", places[r].process, " is placed on hosts ",
                   places[r].host, " and another");
    }
    if (new_process) host.emplace_back();
    auto& process = host[p->second.second];
    layout.where_.push_back(Where{h->second, p->second.second, static_cast<int>(process.size())});
    process.push_back(static_cast<int>(r));
  }
  layout.process_count_ = static_cast<int>(process_index.size());
  layout.thread_owners_ = layout.process_owners_ = static_cast<int>(places.size());
  for (const auto& host : layout.at_) {
    layout.process_owners_ = std::min(layout.process_owners_, static_cast<int>(host.size()));
    for (const auto& process : host) {
      layout.thread_owners_ = std::min(layout.thread_owners_, static_cast<int>(process.size()));
    }
  }
  *out = std::move(layout);
  return Status::Ok();
}

std::vector<int> GroupLayout::host_ranks(int host) const {
  std::vector<int> ranks;
  for (const auto& process : at_[host]) ranks.insert(ranks.end(), process.begin(), process.end());
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

const std::vector<int>& GroupLayout::process_ranks(int rank) const {
  const Where& w = where_[rank];
  return at_[w.host][w.process];
}

std::vector<int> GroupLayout::process_peers(int rank) const {
  const Where& w = where_[rank];
  std::vector<int> ranks;
  for (const auto& process : at_[w.host]) ranks.push_back(process[w.device]);
  return ranks;
}

std::vector<int> GroupLayout::host_peers(int rank) const {
  const Where& w = where_[rank];
  std::vector<int> ranks;
  for (const auto& host : at_) ranks.push_back(host[w.process][w.device]);
  return ranks;
}

bool GroupLayout::owns_slice(int rank) const {
  const Where& w = where_[rank];
  return w.device < thread_owners_ && w.process < process_owners_;
}

std::string GroupLayout::describe() const {
  std::string out = str_cat(at_.size(), at_.size() == 1 ? " host [" : " hosts [");
  for (size_t h = 0; h < at_.size(); ++h) {
    if (h > 0) out += " |";
    for (const auto& process : at_[h]) {
      out += " (";
      for (size_t t = 0; t < process.size(); ++t) out += str_cat(t ? " " : "", process[t]);
      out += ")";
    }
  }
  return str_cat(out, " ], ", thread_owners_, " owners per process, ", process_owners_,
                 " per host");
}

}  // namespace accl
