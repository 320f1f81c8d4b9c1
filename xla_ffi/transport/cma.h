// Cross-memory attach: copying straight between this process's memory and another
// process's (process_vm_readv / process_vm_writev), one copy by the kernel instead of
// the two of a shared-memory ring (into the ring, out of it). Needs the right to ptrace
// the peer: same user, and under Yama ptrace_scope 1 the peer's consent, which a
// CrossMemoryPermission gives for this process while it lives.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "transport/link.h"

namespace accl {

// Lets any process of this user ptrace, and so read and write the memory of, this
// process (PR_SET_PTRACER_ANY: Yama's ptrace_scope 1 takes one tracer pid, and a group
// may have several peers; a no-op without Yama) for as long as any holder lives: every
// rank in a cross-memory-attach call holds it (allreduce_cma, from before it publishes
// its buffers to its end) and the World once a group found it usable (until the World
// stops). The first holder allows, the last one to go revokes: a lane that ends, or
// finds it unusable, never takes it from another lane still probing or copying.
class CrossMemoryPermission {
 public:
  CrossMemoryPermission();
  ~CrossMemoryPermission();
  CrossMemoryPermission(const CrossMemoryPermission&) = delete;
  CrossMemoryPermission& operator=(const CrossMemoryPermission&) = delete;
};
// Whether some holder lives (so PR_SET_PTRACER_ANY is in force).
bool cross_memory_attach_allowed();

// Copies `bytes` from address `remote` of process `pid` into `local`, or from `local` to
// `remote`; loops over partial transfers (a plain memcpy when `pid` is this process).
// Errors name the peer and the errno.
Status read_remote(pid_t pid, uint64_t remote, void* local, size_t bytes);
Status write_remote(pid_t pid, uint64_t remote, const void* local, size_t bytes);
// read_remote always through the kernel, even for this pid: a peer's pid from another
// pid namespace may equal ours, and its address must then fail cleanly (EFAULT) or
// yield the wrong token, never be dereferenced here.
Status probe_remote(pid_t pid, uint64_t remote, void* local, size_t bytes);

// The above as algorithms see it (transport/link.h): handles are pids.
ProcessMemory& cross_memory();

}  // namespace accl
