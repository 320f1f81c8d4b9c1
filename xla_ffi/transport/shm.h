// Shared-memory channels between two processes of one host: one POSIX shared-memory
// segment per pair of devices holds a ring pair (ring_channel.h). Both ends create or
// open the segment by name (the job's secret makes the name unique); the second end to
// map it unlinks the name, so nothing is left in /dev/shm once both are attached, even
// if a process is later killed. Names never attached by the peer are unlinked by
// shm_cleanup() at exit.
#pragma once

#include <memory>
#include <string>

#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

// Opens end `side` (0 or 1) of segment `name` (starting with '/').
Status open_shm_channel(const std::string& name, int side, const std::string& label,
                        std::unique_ptr<Channel>* out);

// Unlinks every segment this process created whose peer never attached.
void shm_cleanup();

}  // namespace accl
