// keep_freed_memory(): the C library's allocator told to keep freed memory for reuse, once per program.
//
// A plan or a partition simulates many candidates one after another, and each builds and
// frees the same arrays (a compiled program, the evaluator's times: a few hundred KB to a
// few MB). By default glibc hands the free top of its heap back to the kernel as soon as
// it exceeds 128 KB, and maps large blocks apart until it has freed one, so every candidate pays for
// fresh pages again: page faults, zeroing, and on a virtual machine a TLB shoot-down per
// shrink. That was about 60% of `partition_bench`'s time (docs/performance.md,
// "The allocator"). Keeping up to 64 MiB at the top of the heap and taking blocks below
// 32 MiB from it costs at most that much resident memory after a peak, and nothing else.
// Called first in each main(); a no-op where the C library is not glibc.
#pragma once

#include <cstdlib>  // defines __GLIBC__ under glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace adagrouper::cli {

inline void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the ceiling glibc's own sliding threshold stops at on 64-bit systems
#endif
}

}  // namespace adagrouper::cli
