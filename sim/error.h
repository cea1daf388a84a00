// Error types shared by every adagrouper library.
//
// InputError: the user's input is wrong (a file, a field, an option). The message is
// complete and names the file and the field: "net.json: channels[1].rate: ...".
// The command line prints it as one line and exits with status 2.
//
// SimError: the input is well formed but the run cannot finish (a rate that stays 0
// forever, a deadlocking order). Also exit status 2: it is the input's fault.
#pragma once

#include <stdexcept>
#include <string>

namespace adagrouper {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SimError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace adagrouper
