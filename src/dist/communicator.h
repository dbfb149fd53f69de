// Communicator: the ranks of one model run split across processes (docs/ARCHITECTURE.md §Ranks).
// Rank 0, the leader, runs the scheduler, the server and sampling; every rank holds a slice of
// the weights and its own copy of the latent cache, and the forward pass meets at a few
// collectives per layer (model/model_dist.h). The transport is MPI when the build found it;
// without a launcher the process runs alone and no communicator exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "mla/status.h"

namespace mla::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool leader() const { return rank() == 0; }

  // x[n] ← Σ over ranks of every rank's x[n], elementwise, in place. Every rank ends with the
  // same bits (the sum is formed once per element and shared), so replicated decisions taken
  // from it (MoE routing) agree across ranks.
  virtual void all_reduce_sum(float* x, size_t n) = 0;
  // The leader's `bytes` bytes at data, written into data on every other rank.
  virtual void broadcast(void* data, size_t bytes) = 0;
  // As broadcast (at most 1 GiB), for a follower waiting for the leader's next step: it polls,
  // sleeping between polls once idle for a while, instead of spinning a core for as long as the
  // server is idle. Every rank must call this one for the same message (not broadcast).
  virtual void broadcast_waiting(void* data, size_t bytes) = 0;
  // Leader: all[Σ counts] ← every rank's part (counts[r] floats from rank r), in rank order.
  // Other ranks: all is not written (may be null). part has counts[rank()] floats.
  virtual void gather(const float* part, std::span<const int64_t> counts, float* all) = 0;
  // Every rank's status from one step that each ran alone (loading its slice): ok on every rank
  // when all succeeded, else on every rank the first failing rank's error, prefixed "rank R: ".
  virtual Status agree(const Status& mine) = 0;
  // Ends every rank of the job now: `why` on stderr, then exit code 1 everywhere. For a failure
  // inside a collective step, where returning would leave the other ranks waiting forever.
  [[noreturn]] virtual void abort(const std::string& why) = 0;
};

// Reads the launcher's environment (mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's Hydra PMI_SIZE):
// with more than one rank it initialises MPI and returns the world communicator; alone (no
// launcher, or one rank) it returns null and the process runs exactly as without MPI. An error
// when launched as one of several ranks by a build without MPI, naming the package to install.
Result<Communicator*> init_world(int* argc, char*** argv);
// The communicator init_world made, or null.
Communicator* world();
// MPI_Finalize where init_world initialised it; a no-op otherwise.
void finalize_world();
// Whether this build can run across ranks.
bool built_with_mpi();

// The launcher's rank count from the environment (1 when not launched by one).
int launcher_size();

}  // namespace mla::dist
