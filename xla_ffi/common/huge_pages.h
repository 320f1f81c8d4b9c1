// Fresh result buffers in huge pages: XLA allocates a call's result afresh at every launch
// where it cannot alias the operand (a kept argument of the program, a reduce-scatter's or
// all-gather's result), and a buffer that large comes straight from mmap, so the call's
// first writes fault it in 4 KiB pages (64 MiB: 16384 faults, 30-60 ms on this project's
// VM, more than the all-reduce). Advised as huge pages before anything writes it, it faults
// in 2 MiB pages (the same 64 MiB: 6-10 ms).
#pragma once

#include <cstddef>

namespace accl {

// Buffers smaller than this are left alone (their 2 MiB-aligned interior would be small).
constexpr size_t kHugePageAdviceBytes = size_t{4} << 20;

// Advises the kernel to back the 2 MiB-aligned interior of [data, data + bytes) with huge
// pages (madvise MADV_HUGEPAGE) where it is at least kHugePageAdviceBytes; a hint: pages
// already present stay as they are, and where the kernel refuses nothing changes.
void advise_huge_pages(void* data, size_t bytes);

}  // namespace accl
