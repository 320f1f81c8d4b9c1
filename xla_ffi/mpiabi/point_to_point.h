// MPI_Isend / MPI_Irecv / MPI_Wait as XLA:CPU's collective-permute uses them: a rank
// posts its receive and its send, then waits for each. The first wait runs the posted
// pair as one step of jax_accl's permutation on the communicator (the rank sends to
// one rank and receives from one, over every rail between hosts); the other waits
// find their requests done.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "mpiabi/abi.h"

namespace accl::mpiabi {

// Posts a send (`out` null) or a receive (`in` null) of `bytes` to or from `peer`.
Status post(MPIABI_Comm comm, bool send, const void* in, void* out, uint64_t bytes, int peer,
            MPIABI_Request* request);
// Completes *request (running its step if no wait did yet) and sets it to
// MPI_REQUEST_NULL; `status` (unless MPI_STATUS_IGNORE) gets the peer, tag 0 and the
// error.
Status wait(MPIABI_Request* request, MPIABI_Status* status);

// After a post that failed (XLA then returns without waiting for what the op posted):
// drops what this thread posted and no wait claimed, so that no later wait runs it
// into buffers that are gone.
void drop_unclaimed() noexcept;
// After a wait that failed (XLA then returns without waiting for the op's other
// requests): releases *request, the other requests of its step and what its step would
// have run, and sets *request to MPI_REQUEST_NULL. None is left posted.
void release_step(MPIABI_Request* request) noexcept;

}  // namespace accl::mpiabi
