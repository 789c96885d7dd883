// The MPI communicator (OpenMPI from Debian here), built when CMake finds MPI.
#include <cstdlib>

#include <fmt/format.h>

#include "api/communicator.h"

#ifdef OPTJIT_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: MPI's C++ bindings are deprecated and unlinked
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace optjit {

#ifdef OPTJIT_HAVE_MPI

namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, static_cast<size_t>(n));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c) : comm_(c) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  Status allreduce_sum(std::span<double> data) override {
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                 MPI_DOUBLE, MPI_SUM, comm_);
    if (rc != MPI_SUCCESS)
      return make_error("mpi: MPI_Allreduce of {} values failed on rank {} of {}: {}", data.size(),
                        rank_, size_, mpi_error(rc));
    return Status::Ok();
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool have_mpi() { return true; }

Expected<std::shared_ptr<Communicator>> mpi_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return make_error("mpi: MPI_Init_thread failed: {}", mpi_error(rc));
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  MPI_Comm c;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c);
  if (rc != MPI_SUCCESS) return make_error("mpi: MPI_Comm_dup failed: {}", mpi_error(rc));
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return std::shared_ptr<Communicator>(std::make_shared<MpiCommunicator>(c));
}

#else

bool have_mpi() { return false; }

Expected<std::shared_ptr<Communicator>> mpi_communicator() {
  return make_error(
      "mpi: this build of optjit has no MPI (install libopenmpi-dev and rebuild: ./dev.sh build)");
}

#endif

}  // namespace optjit
