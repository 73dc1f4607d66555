# Writes OUT (a header defining STARRING_GIT_COMMIT) from the source tree's git state, run at
# every build (experiments/CMakeLists.txt), so an incremental build records the commit it was
# built from, not the one CMake configured at. The file is rewritten only when the text changes,
# so an unchanged commit recompiles nothing. The format is the sweep driver's
# (scripts/sweep_jobs.py git_commit): 12 hex digits, "+dirty" when tracked files differ from HEAD.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT head)
  set(commit unknown)
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
    OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(commit ${head})
  if(dirty)
    string(APPEND commit "+dirty")
  endif()
endif()
set(text "#pragma once\n#define STARRING_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
