// The world communicator over MPI (compiled only when CMake found MPI: MLA_WITH_MPI).
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace mla::dist {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* x, size_t n) override {
    // Open MPI's reductions combine each element once and share the result (ring, recursive
    // doubling and Rabenseifner alike), and float addition is commutative: the bits agree.
    for (size_t at = 0; at < n;) {
      const int k = int(std::min<size_t>(n - at, kMaxCount));
      MPI_Allreduce(MPI_IN_PLACE, x + at, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      at += size_t(k);
    }
  }

  void broadcast(void* data, size_t bytes) override {
    auto* p = static_cast<char*>(data);
    for (size_t at = 0; at < bytes;) {
      const int k = int(std::min<size_t>(bytes - at, kMaxCount));
      MPI_Bcast(p + at, k, MPI_BYTE, 0, MPI_COMM_WORLD);
      at += size_t(k);
    }
  }

  void broadcast_waiting(void* data, size_t bytes) override {
    // A nonblocking broadcast on every rank (one never matches a blocking one); the leader
    // waits for its send at once. Followers spin for the first millisecond (decode steps follow
    // each other closely), then poll every 200 µs, then every 2 ms once idle for a second: an idle
    // server's followers sleep.
    MPI_Request req;
    MPI_Ibcast(data, int(bytes), MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    if (leader()) {
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int done = 0;;) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) return;
      const auto idle = std::chrono::steady_clock::now() - t0;
      if (idle > std::chrono::seconds(1))
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      else if (idle > std::chrono::milliseconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void gather(const float* part, std::span<const int64_t> counts, float* all) override {
    std::vector<int> n(static_cast<size_t>(size_)), at(static_cast<size_t>(size_));
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      n[size_t(r)] = int(counts[size_t(r)]);
      at[size_t(r)] = int(total);
      total += counts[size_t(r)];
    }
    MPI_Gatherv(part, n[size_t(rank_)], MPI_FLOAT, all, n.data(), at.data(), MPI_FLOAT, 0,
                MPI_COMM_WORLD);
  }

  Status agree(const Status& mine) override {
    // The lowest failing rank (size_ when none), then its code and message from it.
    int failed = mine.ok() ? size_ : rank_;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (failed == size_) return Status();
    int code = int(mine.code());
    std::string msg = mine.message();
    int len = int(msg.size());
    MPI_Bcast(&code, 1, MPI_INT, failed, MPI_COMM_WORLD);
    MPI_Bcast(&len, 1, MPI_INT, failed, MPI_COMM_WORLD);
    msg.resize(size_t(len));
    MPI_Bcast(msg.data(), len, MPI_CHAR, failed, MPI_COMM_WORLD);
    return Status(StatusCode(code), fmt::format("rank {}: {}", failed, msg));
  }

  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "error: rank %d: %s\n", rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

 private:
  static constexpr size_t kMaxCount = size_t(1) << 30;  // MPI counts are int
  int rank_ = 0, size_ = 1;
};

std::unique_ptr<MpiCommunicator>& the_world() {
  static std::unique_ptr<MpiCommunicator> w;
  return w;
}

}  // namespace

bool built_with_mpi() {
  return true;
}

Result<Communicator*> init_world(int* argc, char*** argv) {
  if (the_world()) return static_cast<Communicator*>(the_world().get());
  if (launcher_size() <= 1) return static_cast<Communicator*>(nullptr);
  // Open MPI's shared-memory transport sends messages up to 4 KiB eagerly and larger ones by a
  // rendezvous; a decode step's all-reduce of one V3 hidden state is 28 KiB. Eager up to 64 KiB
  // took it from 10 to 3.7 µs on 2 ranks (docs/BENCHMARKS.md "Ranks"). A value the user set wins.
  setenv("OMPI_MCA_btl_vader_eager_limit", "65536", 0);
  setenv("OMPI_MCA_btl_vader_max_send_size", "65536", 0);
  // The serving engine's thread runs the collectives, not main: one thread at a time.
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return unimplemented("MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return unimplemented(
        fmt::format("this MPI library offers thread level {}; running across ranks needs "
                    "MPI_THREAD_SERIALIZED",
                    provided));
  }
  the_world() = std::make_unique<MpiCommunicator>();
  return static_cast<Communicator*>(the_world().get());
}

Communicator* world() {
  return the_world().get();
}

void finalize_world() {
  if (!the_world()) return;
  the_world().reset();
  MPI_Finalize();
}

}  // namespace mla::dist
