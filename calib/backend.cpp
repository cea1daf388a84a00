// What every backend shares (calib/backend.h): names, element sizes and make_backend.
#include "backend.h"

#include <fmt/format.h>

#include "runtime.h"

namespace adagrouper::calib {

std::string_view backend_name(BackendKind k) { return k == BackendKind::cpu ? "cpu" : "cuda"; }

bool cuda_backend_built() {
#ifdef ADAGROUPER_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::size_t elem_bytes(Elem e) {
  switch (e) {
    case Elem::f16: return 2;
    case Elem::f32: return 4;
    case Elem::i32: return 4;
  }
  return 4;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const Mpi& mpi, Watchdog& watchdog) {
  if (kind == BackendKind::cpu) return make_cpu_backend(mpi, watchdog);
#ifdef ADAGROUPER_HAVE_CUDA
  return make_cuda_backend(mpi, watchdog);
#else
  fail_call(mpi.id(), "--backend cuda",
            "this adagrouper-calib was built without the CUDA backend (Meson did not find CUDA, cuBLAS and NCCL; "
            "see docs/calibration.md)");
#endif
}

}  // namespace adagrouper::calib
