// The CPU backend's kernels: a cache-blocked, register-tiled GEMM (operands converted to
// f32 while they are packed) and the elementwise kernels, for f32 and f16 (_Float16)
// activations. One object per stream: it owns the GEMM's packing buffers.
#pragma once

#include <memory>

#include "backend.h"

namespace adagrouper::calib {

std::unique_ptr<Kernels> make_cpu_kernels();

// Denormal floats make CPU arithmetic tens of times slower and would make timings
// depend on the values: every CPU worker thread flushes them to zero (x86 SSE).
void cpu_flush_denormals();

}  // namespace adagrouper::calib
