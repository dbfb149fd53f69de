# How the tests start mla across ranks: Open MPI's mpirun on this machine's loopback, one thread
# per rank, ranks allowed to share cores (--oversubscribe: CI machines have 2), and the variables
# Open MPI requires to run as root in a container. None when mpirun is not installed.
import os
import shutil


def mpirun(ranks):
    """(argv prefix, env) for `ranks` ranks, or None without mpirun."""
    exe = shutil.which("mpirun")
    if exe is None:
        return None
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MLA_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    return [exe, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"], env


def built_without_mpi(stderr):
    return "built without MPI" in stderr
