#include "json_util.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace adagrouper {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path.string()));
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // Turn the byte offset into a line and column.
    std::size_t line = 1, col = 1;
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    auto colon = what.find(": ", what.find("parse error"));
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    throw InputError(fmt::format("{}: line {}, column {}: invalid JSON: {}", path.string(), line,
                                 col, detail));
  } catch (const nlohmann::json::exception& e) {
    // e.g. out_of_range for a number too large for a double (1e999).
    throw InputError(fmt::format("{}: invalid JSON: {}", path.string(), e.what()));
  }
}

std::string describe_json(const nlohmann::json& value) {
  std::string s = value.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

Field::Field(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

void Field::fail(std::string_view what) const {
  if (path_.empty()) throw InputError(fmt::format("{}: {}", file_, what));
  throw InputError(fmt::format("{}: {}: {}", file_, path_, what));
}

bool Field::has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

Field Field::at(std::string_view key) const {
  require_object();
  std::string sub = path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  auto it = value_->find(key);
  if (it == value_->end()) throw InputError(fmt::format("{}: {}: missing field", file_, sub));
  return Field(*it, file_, std::move(sub));
}

Field Field::at(std::size_t index) const {
  require_array();
  return Field((*value_)[index], file_, fmt::format("{}[{}]", path_, index));
}

std::size_t Field::size() const {
  require_array();
  return value_->size();
}

void Field::require_object() const {
  if (!value_->is_object()) fail(fmt::format("must be an object, got {}", describe_json(*value_)));
}

void Field::require_array() const {
  if (!value_->is_array()) fail(fmt::format("must be an array, got {}", describe_json(*value_)));
}

double Field::number() const {
  if (!value_->is_number()) fail(fmt::format("must be a number, got {}", describe_json(*value_)));
  double v = value_->get<double>();
  if (!std::isfinite(v)) fail("must be a finite number");
  return v;
}

double Field::non_negative() const {
  double v = number();
  if (!(v >= 0)) fail(fmt::format("must be >= 0, got {}", v));
  return v;
}

double Field::positive() const {
  double v = number();
  if (!(v > 0)) fail(fmt::format("must be > 0, got {}", v));
  return v;
}

std::int64_t Field::integer() const {
  if (value_->is_number_integer()) return value_->get<std::int64_t>();
  if (value_->is_number_float()) {
    double v = value_->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15)
      return static_cast<std::int64_t>(v);
  }
  fail(fmt::format("must be an integer, got {}", describe_json(*value_)));
}

std::int64_t Field::integer_at_least(std::int64_t min) const {
  std::int64_t v = integer();
  if (v < min) fail(fmt::format("must be >= {}, got {}", min, v));
  return v;
}

std::string Field::string() const {
  if (!value_->is_string()) fail(fmt::format("must be a string, got {}", describe_json(*value_)));
  return value_->get<std::string>();
}

bool Field::boolean() const {
  if (!value_->is_boolean()) fail(fmt::format("must be true or false, got {}", describe_json(*value_)));
  return value_->get<bool>();
}

double Field::non_negative_or(std::string_view key, double fallback) const {
  return has(key) ? at(key).non_negative() : fallback;
}

}  // namespace adagrouper
