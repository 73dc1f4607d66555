# Decides STARRING_HAVE_SMPI from STARRING_SMPI (AUTO|ON|OFF) and, when on, builds
# smpi_bench.so: the ring all-reduce, the MPI_Allreduce baseline and the parameter server's
# message pattern (its roles and chunk plan from ps/) compiled with SimGrid's
# smpicxx, to run under `smpirun` on simulated platforms (experiments/smpi/smpi_bench.cc,
# scripts/smpi_bench.sh).
# smpicxx is its own compiler driver (it swaps mpi.h for SMPI's and links a shared object that
# smpirun loads), so the same sources are compiled a second time by a custom command rather than
# linked from the project's libraries. AUTO builds it when smpicxx and smpirun are found
# (Debian: libsimgrid-dev); ON fails without them; OFF never builds it. Nothing else depends on it.
set(STARRING_HAVE_SMPI OFF)
if(NOT STARRING_SMPI STREQUAL "OFF")
  find_program(STARRING_SMPICXX smpicxx)
  find_program(STARRING_SMPIRUN smpirun)
  if(STARRING_SMPICXX AND STARRING_SMPIRUN)
    set(STARRING_HAVE_SMPI ON)
  elseif(STARRING_SMPI STREQUAL "ON")
    message(FATAL_ERROR
      "STARRING_SMPI=ON but smpicxx/smpirun (SimGrid, libsimgrid-dev) were not found")
  endif()
endif()
message(STATUS "StarRing: SMPI=${STARRING_HAVE_SMPI}")

if(STARRING_HAVE_SMPI)
  # The real sources of the ring-p2p and mpi engines, and what they need (no ShmRing at run time:
  # the bench sets RingOptions::shared_memory = false; shm_ring.cc is linked because
  # allreducer.cc, the engines' factory, refers to it).
  set(STARRING_SMPI_SOURCES
    ${PROJECT_SOURCE_DIR}/experiments/smpi/smpi_bench.cc
    ${PROJECT_SOURCE_DIR}/experiments/smpi/ps_pattern.cc
    ${PROJECT_SOURCE_DIR}/common/comm.cc
    ${PROJECT_SOURCE_DIR}/common/mpi_comm.cc
    ${PROJECT_SOURCE_DIR}/common/census.cc
    ${PROJECT_SOURCE_DIR}/common/config.cc
    ${PROJECT_SOURCE_DIR}/common/config_check.cc
    ${PROJECT_SOURCE_DIR}/allreduce/allreducer.cc
    ${PROJECT_SOURCE_DIR}/allreduce/ring_allreduce.cc
    ${PROJECT_SOURCE_DIR}/allreduce/wire_codec.cc
    ${PROJECT_SOURCE_DIR}/allreduce/mpi_allreduce.cc
    ${PROJECT_SOURCE_DIR}/allreduce/shm_ring.cc
    ${PROJECT_SOURCE_DIR}/common/bucketing.cc
    ${PROJECT_SOURCE_DIR}/common/param_layout.cc
    ${PROJECT_SOURCE_DIR}/ps/partition.cc
    ${PROJECT_SOURCE_DIR}/ps/ps_group.cc)
  set(STARRING_SMPI_BENCH ${PROJECT_BINARY_DIR}/smpi/smpi_bench.so)
  file(GLOB _smpi_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/common/*.h
    ${PROJECT_SOURCE_DIR}/allreduce/*.h ${PROJECT_SOURCE_DIR}/experiments/bench_harness.h
    ${PROJECT_SOURCE_DIR}/ps/partition.h ${PROJECT_SOURCE_DIR}/ps/ps_group.h
    ${PROJECT_SOURCE_DIR}/experiments/smpi/ps_pattern.h)
  add_custom_command(OUTPUT ${STARRING_SMPI_BENCH}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/smpi
    COMMAND ${STARRING_SMPICXX} -std=c++20 -O3 -march=native -DNDEBUG -Wall -Wextra
      -I${PROJECT_SOURCE_DIR} ${STARRING_SMPI_SOURCES} -lboost_program_options
      -o ${STARRING_SMPI_BENCH}
    DEPENDS ${STARRING_SMPI_SOURCES} ${_smpi_headers}
    COMMENT "smpicxx: building smpi/smpi_bench.so (SimGrid SMPI)"
    VERBATIM)
  add_custom_target(starring_smpi_bench ALL DEPENDS ${STARRING_SMPI_BENCH})
endif()
