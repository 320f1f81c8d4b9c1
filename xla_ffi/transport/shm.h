// Shared-memory channels between two processes of one host: one POSIX shared-memory
// segment per pair of devices holds a ring pair (ring_channel.h).
//
// The name is an HMAC of the pair under the job's secret, so nobody without the secret
// can predict it and a listing of /dev/shm reveals nothing of the secret. Side 0 creates
// the segment exclusively (O_EXCL, mode 0600: an existing one is refused) and allocates
// every page (posix_fallocate: a full /dev/shm is an error naming its size, not a SIGBUS
// later); side 1 opens it only once it is this user's alone, fully sized and marked
// ready. A process that cannot allocate a segment of a channel space marks the whole
// space failed: a second name (shm_space_failed_name), an empty file (no page of a full
// tmpfs is touched). Every side 1 of the space looks for it while it waits, so the
// peers of a failed allocation fail within a millisecond, also those waiting for a
// segment whose creator never got to it (a sibling device thread that failed first). The second end
// to map the segment unlinks the name, so nothing is left in /dev/shm once both are attached, even
// if a process is later killed; names never attached by the peer are unlinked by
// shm_cleanup() at exit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

// The segment of devices a < b in channel space `space` under the job's secret:
// "/jax_accl_" + 32 hex digits.
std::string shm_segment_name(const std::string& secret, int64_t a, int64_t b, uint64_t space);

// The name that marks channel space `space` failed (see above).
std::string shm_space_failed_name(const std::string& secret, uint64_t space);

// Opens end `side` (0 creates, 1 waits for it until `deadline`) of segment `name`;
// `failed_marker`: the space's failure mark, made by side 0 when it cannot allocate the
// segment, and watched by side 1 while it waits.
Status open_shm_channel(const std::string& name, const std::string& failed_marker, int side,
                        const std::string& label, const Deadline& deadline,
                        std::unique_ptr<Channel>* out);

// Unlinks a space's failure mark (when the space is gone).
void shm_forget_failed(const std::string& failed_marker);

// Unlinks every segment this process created whose peer never attached.
void shm_cleanup();

// The segments (and failure marks) this process created that are still named in
// /dev/shm: none once its peers attached or its jax_accl stopped (tests look for leaks).
std::vector<std::string> shm_names_left();

}  // namespace accl
