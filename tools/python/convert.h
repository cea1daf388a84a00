// The Python module's plumbing: JSON values to and from Python objects, the exception
// classes and how C++ errors become them, and the arguments that take a file or a dict.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

#include "sim.h"

namespace adagrouper::python {

namespace py = pybind11;

// --- JSON ----------------------------------------------------------------------------

// A JSON value as Python: objects become dicts (in the document's order), arrays lists.
py::object to_python(const nlohmann::json& value);
py::object to_python(const nlohmann::ordered_json& value);

// A Python value as JSON: dict (string keys), list, tuple, str, bool, int, float, None,
// os.PathLike (its path), and anything with __index__ or __float__ (NumPy scalars).
// `where` names the value in the TypeError raised for anything else.
nlohmann::json to_json(py::handle value, const std::string& where = "value");

// Parses JSON text into Python objects with Python's json module.
py::object parse_json_text(const std::string& text);

// --- errors --------------------------------------------------------------------------

// Creates adagrouper.Error, InputError (also a ValueError) and SimError (also a
// RuntimeError) in `m` and makes adagrouper::InputError and SimError raise them, with
// the message the command line prints after "adagrouper COMMAND: ".
void register_errors(py::module_& m);

// What a failed run in a worker thread left: enough to raise or return the same
// exception later, with the GIL held.
struct Failure {
  enum class Kind : std::uint8_t { Input, Sim, Value, Other } kind = Kind::Other;
  std::string message;
};
// The failure an exception thrown by the libraries is (call inside a catch block).
Failure capture_failure(const std::exception_ptr& error);
// The Python exception object for a failure, and raising it (throws error_already_set).
py::object failure_object(const Failure& failure);
[[noreturn]] void raise_failure(const Failure& failure);

// --- arguments -----------------------------------------------------------------------

// Whether `value` names a file: a str or an os.PathLike.
bool is_path(py::handle value);
// The path it names (os.fspath).
std::filesystem::path as_path(py::handle value);

// A pipeline from a Pipeline object, a dict (a pipeline document, `source` naming it
// in messages) or a path.
std::shared_ptr<const sim::Pipeline> pipeline_arg(py::handle value, const std::string& source = "<dict>");
// A network file's contents from a Network object, a dict or a path; relative trace
// paths in a dict are resolved against the directory of `source` (default: the
// current directory).
std::shared_ptr<const sim::NetworkSpec> network_arg(py::handle value, const std::string& source = "<dict>");

// The sha256 of a file's bytes in hex (Python's hashlib), or "" when it cannot be read.
std::string file_sha256(const std::string& path);

// An optional int or string keyword argument (None: nullopt).
std::optional<int> optional_int(py::handle value, const char* name);

}  // namespace adagrouper::python
