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
  # The real sources of the ring-p2p and mpi engines and of the PS roles and chunk plan, and what
  # they need (no ShmRing at run time:
  # the bench sets RingOptions::shared_memory = false; shm_ring.cc is linked because
  # allreducer.cc, the engines' factory, refers to it).
  set(STARRING_SMPI_SOURCES
    experiments/smpi/smpi_bench.cc
    experiments/smpi/ps_pattern.cc
    common/comm.cc
    common/mpi_comm.cc
    common/kept_memory.cc
    common/stall_watch.cc
    common/test_hosts.cc
    common/census.cc
    common/config.cc
    common/config_ini.cc
    common/config_check.cc
    common/fault.cc
    allreduce/allreducer.cc
    allreduce/ring_allreduce.cc
    allreduce/wire_codec.cc
    allreduce/mpi_allreduce.cc
    allreduce/shm_ring.cc
    common/bucketing.cc
    common/param_layout.cc
    ps/partition.cc
    ps/ps_group.cc)
  list(TRANSFORM STARRING_SMPI_SOURCES PREPEND ${PROJECT_SOURCE_DIR}/)
  set(STARRING_SMPI_BENCH ${PROJECT_BINARY_DIR}/smpi/smpi_bench.so)
  file(GLOB _smpi_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/common/*.h
    ${PROJECT_SOURCE_DIR}/allreduce/*.h ${PROJECT_SOURCE_DIR}/experiments/bench_harness.h
    ${PROJECT_SOURCE_DIR}/ps/partition.h ${PROJECT_SOURCE_DIR}/ps/ps_group.h
    ${PROJECT_SOURCE_DIR}/experiments/smpi/ps_pattern.h)
  # With STARRING_UNITY (the libraries' unity batches), one translation unit that includes all
  # the sources: the headers they share are compiled once instead of once per source (smpicxx's
  # CPU time 30 s instead of 54 s, docs/TESTING.md).
  set(_smpi_compile ${STARRING_SMPI_SOURCES})
  if(STARRING_UNITY)
    set(_smpi_compile ${PROJECT_BINARY_DIR}/smpi/smpi_bench_unity.cc)
    list(TRANSFORM STARRING_SMPI_SOURCES REPLACE "^(.+)$" "#include \"\\1\"" OUTPUT_VARIABLE _smpi_lines)
    list(JOIN _smpi_lines "\n" _smpi_lines)
    file(GENERATE OUTPUT ${_smpi_compile} CONTENT "${_smpi_lines}\n")
  endif()
  add_custom_command(OUTPUT ${STARRING_SMPI_BENCH}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/smpi
    COMMAND ${STARRING_SMPICXX} -std=c++20 -O3 -march=native -DNDEBUG -Wall -Wextra
      -I${PROJECT_SOURCE_DIR} ${_smpi_compile} -lboost_program_options
      -o ${STARRING_SMPI_BENCH}
    DEPENDS ${STARRING_SMPI_SOURCES} ${_smpi_compile} ${_smpi_headers}
    COMMENT "smpicxx: building smpi/smpi_bench.so (SimGrid SMPI)"
    VERBATIM)
  add_custom_target(starring_smpi_bench ALL DEPENDS ${STARRING_SMPI_BENCH})
endif()
