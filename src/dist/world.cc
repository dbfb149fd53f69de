// The launcher environment, and the world communicator when the build has no MPI.
#include <fmt/format.h>

#include <cstdlib>

#include "dist/communicator.h"

namespace mla::dist {

int launcher_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1) return int(n);
    }
  return 1;
}

#ifndef MLA_WITH_MPI
bool built_with_mpi() {
  return false;
}
Result<Communicator*> init_world(int*, char***) {
  const int n = launcher_size();
  if (n <= 1) return static_cast<Communicator*>(nullptr);
  return unimplemented(fmt::format(
      "started as one of {} ranks, but this mla was built without MPI: install libopenmpi-dev "
      "(Debian) and rebuild to run a model across ranks",
      n));
}
Communicator* world() {
  return nullptr;
}
void finalize_world() {}
#endif

}  // namespace mla::dist
