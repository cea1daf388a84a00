// JSON to and from Python, the exception classes, and file-or-dict arguments.
#include "convert.h"

#include <climits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "traces.h"

namespace adagrouper::python {

namespace {

template <class Json>
py::object json_to_python(const Json& j) {
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::null:
      return py::none();
    case T::boolean:
      return py::bool_(j.template get<bool>());
    case T::number_integer:
      return py::int_(j.template get<std::int64_t>());
    case T::number_unsigned:
      return py::int_(j.template get<std::uint64_t>());
    case T::number_float:
      return py::float_(j.template get<double>());
    case T::string:
      return py::str(j.template get_ref<const std::string&>());
    case T::array: {
      py::list list(j.size());
      std::size_t i = 0;
      for (const auto& e : j) list[i++] = json_to_python(e);
      return list;
    }
    case T::object: {
      py::dict dict;
      for (const auto& [key, value] : j.items()) dict[py::str(key)] = json_to_python(value);
      return dict;
    }
    default:
      throw std::logic_error("adagrouper: a JSON value of a type Python cannot hold (binary)");
  }
}

nlohmann::json int_to_json(py::handle value, const std::string& where) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow == 0) {
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return static_cast<std::int64_t>(v);
  }
  const unsigned long long u = PyLong_AsUnsignedLongLong(value.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(fmt::format("{}: the integer {} does not fit in 64 bits", where,
                                      py::str(value).cast<std::string>()));
  }
  return static_cast<std::uint64_t>(u);
}

// Exception classes, created once per interpreter and kept for its life.
PyObject* g_error = nullptr;
PyObject* g_input_error = nullptr;
PyObject* g_sim_error = nullptr;

PyObject* new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("adagrouper.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // takes a new reference; ours stays for the module's life
  return type;
}

}  // namespace

py::object to_python(const nlohmann::json& value) { return json_to_python(value); }
py::object to_python(const nlohmann::ordered_json& value) { return json_to_python(value); }

nlohmann::json to_json(py::handle value, const std::string& where) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return int_to_json(value, where);
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [key, item] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key))
        throw py::type_error(fmt::format("{}: keys must be strings, got {}", where, py::repr(key).cast<std::string>()));
      const std::string name = key.cast<std::string>();
      object[name] = to_json(item, where + "." + name);
    }
    return object;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::json array = nlohmann::json::array();
    std::size_t i = 0;
    for (const auto& item : value) array.push_back(to_json(item, fmt::format("{}[{}]", where, i++)));
    return array;
  }
  if (is_path(value)) return as_path(value).string();
  if (py::hasattr(value, "__index__")) return int_to_json(py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())), where);
  if (py::hasattr(value, "__float__")) return py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
  throw py::type_error(fmt::format("{}: cannot be written as JSON: {}", where, py::repr(value).cast<std::string>()));
}

py::object parse_json_text(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

void register_errors(py::module_& m) {
  g_error = new_exception(m, "Error", py::make_tuple(py::handle(PyExc_Exception)),
                          "Base class of the errors adagrouper raises.");
  g_input_error = new_exception(m, "InputError", py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError)),
                                "Bad input: a file, a field or an argument. The message names it, as the "
                                "command line's does.");
  g_sim_error = new_exception(m, "SimError", py::make_tuple(py::handle(g_error), py::handle(PyExc_RuntimeError)),
                              "A well-formed run that cannot finish: a deadlock, or a rate that stays 0.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const adagrouper::InputError& e) {
      PyErr_SetString(g_input_error, e.what());
    } catch (const adagrouper::SimError& e) {
      PyErr_SetString(g_sim_error, e.what());
    }
  });
}

Failure capture_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const adagrouper::InputError& e) {
    return {Failure::Kind::Input, e.what()};
  } catch (const adagrouper::SimError& e) {
    return {Failure::Kind::Sim, e.what()};
  } catch (const std::invalid_argument& e) {
    return {Failure::Kind::Value, e.what()};
  } catch (const std::exception& e) {
    return {Failure::Kind::Other, e.what()};
  }
}

py::object failure_object(const Failure& failure) {
  PyObject* type = PyExc_RuntimeError;
  switch (failure.kind) {
    case Failure::Kind::Input: type = g_input_error; break;
    case Failure::Kind::Sim: type = g_sim_error; break;
    case Failure::Kind::Value: type = PyExc_ValueError; break;
    case Failure::Kind::Other: break;
  }
  return py::reinterpret_borrow<py::object>(type)(failure.message);
}

void raise_failure(const Failure& failure) {
  const py::object error = failure_object(failure);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

bool is_path(py::handle value) {
  if (py::isinstance<py::str>(value)) return true;
  static PyObject* path_like = nullptr;  // os.PathLike, kept for the interpreter's life
  if (path_like == nullptr) {
    py::object type = py::module_::import("os").attr("PathLike");
    path_like = type.release().ptr();
  }
  return PyObject_IsInstance(value.ptr(), path_like) == 1;
}

std::filesystem::path as_path(py::handle value) {
  return py::module_::import("os").attr("fspath")(value).cast<std::string>();
}

std::shared_ptr<const sim::Pipeline> pipeline_arg(py::handle value, const std::string& source) {
  if (py::isinstance<sim::Pipeline>(value)) return value.cast<std::shared_ptr<sim::Pipeline>>();
  if (py::isinstance<py::dict>(value))
    return std::make_shared<const sim::Pipeline>(sim::parse_pipeline(to_json(value, "pipeline"), source));
  if (is_path(value)) {
    const std::filesystem::path path = as_path(value);
    py::gil_scoped_release release;
    return std::make_shared<const sim::Pipeline>(sim::load_pipeline(path));
  }
  throw py::type_error(fmt::format("pipeline: a Pipeline, a dict or a path, got {}",
                                   py::repr(value).cast<std::string>()));
}

std::shared_ptr<const sim::NetworkSpec> network_arg(py::handle value, const std::string& source) {
  if (py::isinstance<sim::NetworkSpec>(value)) return value.cast<std::shared_ptr<sim::NetworkSpec>>();
  if (py::isinstance<py::dict>(value)) {
    const nlohmann::json doc = to_json(value, "network");
    py::gil_scoped_release release;
    return std::make_shared<const sim::NetworkSpec>(sim::parse_network_spec(doc, source, traces::TraceRates()));
  }
  if (is_path(value)) {
    const std::filesystem::path path = as_path(value);
    py::gil_scoped_release release;
    return std::make_shared<const sim::NetworkSpec>(sim::load_network_spec(path, traces::TraceRates()));
  }
  throw py::type_error(fmt::format("network: a Network, a dict or a path, got {}",
                                   py::repr(value).cast<std::string>()));
}

std::string file_sha256(const std::string& path) {
  const py::object open = py::module_::import("builtins").attr("open");
  py::bytes data;
  try {
    const py::object f = open(path, "rb");
    data = f.attr("read")();
    f.attr("close")();
  } catch (const py::error_already_set&) {
    return "";
  }
  return py::module_::import("hashlib").attr("sha256")(data).attr("hexdigest")().cast<std::string>();
}

std::optional<int> optional_int(py::handle value, const char* name) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(value) || !py::hasattr(value, "__index__"))
    throw py::type_error(fmt::format("{}: an integer or None, got {}", name, py::repr(value).cast<std::string>()));
  const long long v = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())).cast<long long>();
  if (v < INT_MIN || v > INT_MAX) throw py::value_error(fmt::format("{}: {} is out of range", name, v));
  return static_cast<int>(v);
}

}  // namespace adagrouper::python
