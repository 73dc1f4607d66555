// The one error line a failing job prints (the format is in experiments/main.cc's opening
// comment): its wording, its printing, and the gathering of every failed rank's message to
// rank 0 when all ranks reach the end together.
#pragma once
#include <mpi.h>

#include <exception>
#include <string>

namespace starring {

// 2 for bad input (a ConfigError), 1 for any other failure.
int exit_code_of(const std::exception& e);

// "starring: error: rank R: <what>"; `rank` < 0 leaves the rank out, and so does a `what` that
// already starts with this rank ("rank R", "server rank R").
std::string error_line(const std::string& what, int rank);

// Prints `line` on stderr, ending first a progress line the error cut short.
void print_line(const std::string& line);

// Some rank failed and every rank of `comm` is here: rank 0 gathers the messages and prints each
// distinct one once (without the rank when all ranks say the same); a message that wraps one
// already printed, or is wrapped by it ("... failed on worker 0: <worker 0's message>"), is left
// out. `what` is empty on ranks that did not fail.
void print_all(MPI_Comm comm, const std::string& what, int rank, int size);

}  // namespace starring
