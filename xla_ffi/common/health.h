// Whether this process can still trust jax_accl: it cannot once a failed call had to
// return while a peer might still have been writing into its buffers (a fence that did
// not end in time, see ChannelLink::fail and LocalLink's destructor). From then on
// every call fails at once, naming what happened; the job must be restarted.
#pragma once

#include <string>

#include "common/status.h"

namespace accl {

void mark_process_unusable(const std::string& why);
// Ok, or the error every call of an unusable process returns.
Status process_usable();

// How long a failing rank waits for its peers to stop touching its buffers.
constexpr double kDrainSeconds = 10.0;

}  // namespace accl
