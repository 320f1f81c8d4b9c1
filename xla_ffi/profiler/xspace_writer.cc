#include "profiler/xspace_writer.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace accl {
namespace {

// Field numbers of xplane.proto, per message.
enum SpaceField : int { kSpacePlanes = 1 };
enum PlaneField : int {
  kPlaneId = 1,
  kPlaneName,
  kPlaneLines,
  kPlaneEventMetadata,
  kPlaneStatMetadata
};
enum LineField : int {
  kLineId = 1,
  kLineName,
  kLineTimestampNs,
  kLineEvents,
  kLineDurationPs = 9,
  kLineDisplayId
};
enum EventField : int { kEventMetadataId = 1, kEventOffsetPs, kEventDurationPs, kEventStats };
enum StatField : int { kStatMetadataId = 1, kStatUint64 = 3, kStatString = 5 };
enum MetadataField : int { kMetadataId = 1, kMetadataName };  // XEventMetadata, XStatMetadata
enum MapEntryField : int { kMapKey = 1, kMapValue };

class Message {
 public:
  void integer(int field, uint64_t value) {
    varint(static_cast<uint64_t>(field) << 3);
    varint(value);
  }
  void text(int field, const std::string& value) {
    varint(static_cast<uint64_t>(field) << 3 | 2);
    varint(value.size());
    bytes_ += value;
  }
  void message(int field, const Message& value) { text(field, value.bytes_); }
  const std::string& bytes() const { return bytes_; }

 private:
  void varint(uint64_t value) {
    while (value >= 0x80) {
      bytes_.push_back(static_cast<char>(value | 0x80));
      value >>= 7;
    }
    bytes_.push_back(static_cast<char>(value));
  }
  std::string bytes_;
};

// Ids for names, in order of first use (0 is reserved: an unset metadata_id).
class Names {
 public:
  int64_t id(const std::string& name) {
    auto [it, added] = ids_.emplace(name, static_cast<int64_t>(ids_.size()) + 1);
    if (added) order_.push_back(name);
    return it->second;
  }
  // The map<int64, X*Metadata> entries of the plane.
  void write(int field, Message* plane) const {
    for (size_t i = 0; i < order_.size(); ++i) {
      Message metadata, entry;
      metadata.integer(kMetadataId, i + 1);
      metadata.text(kMetadataName, order_[i]);
      entry.integer(kMapKey, i + 1);
      entry.message(kMapValue, metadata);
      plane->message(field, entry);
    }
  }

 private:
  std::map<std::string, int64_t> ids_;
  std::vector<std::string> order_;
};

}  // namespace

std::string serialize_xspace(int64_t plane_id, const std::string& plane_name,
                             const std::vector<XLineSpec>& lines) {
  Names events, stats;
  Message plane;
  plane.integer(kPlaneId, plane_id);
  plane.text(kPlaneName, plane_name);
  for (const XLineSpec& spec : lines) {
    if (spec.events.empty()) continue;
    int64_t first = spec.events[0].start_ns, last = spec.events[0].end_ns;
    for (const XEventSpec& e : spec.events) {
      first = std::min(first, e.start_ns);
      last = std::max(last, e.end_ns);
    }
    Message line;
    line.integer(kLineId, spec.id);
    line.integer(kLineDisplayId, spec.id);
    line.text(kLineName, spec.name);
    line.integer(kLineTimestampNs, first);
    line.integer(kLineDurationPs, (last - first) * 1000);
    for (const XEventSpec& e : spec.events) {
      Message event;
      event.integer(kEventMetadataId, events.id(e.name));
      event.integer(kEventOffsetPs, (e.start_ns - first) * 1000);
      event.integer(kEventDurationPs, std::max<int64_t>(e.end_ns - e.start_ns, 0) * 1000);
      for (const XStatValue& s : e.stats) {
        Message stat;
        stat.integer(kStatMetadataId, stats.id(s.name));
        if (s.is_text) {
          stat.text(kStatString, s.text);
        } else {
          stat.integer(kStatUint64, s.number);
        }
        event.message(kEventStats, stat);
      }
      line.message(kLineEvents, event);
    }
    plane.message(kPlaneLines, line);
  }
  events.write(kPlaneEventMetadata, &plane);
  stats.write(kPlaneStatMetadata, &plane);
  Message space;
  space.message(kSpacePlanes, plane);
  return space.bytes();
}

}  // namespace accl
