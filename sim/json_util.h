// Reading JSON input files with errors that name the file, the field and the line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "error.h"

namespace adagrouper {

// Reads and parses a JSON file. A missing file or a syntax error is an InputError
// "PATH: line L, column C: ..." .
nlohmann::json read_json_file(const std::filesystem::path& path);

// A view of one value inside a parsed document, with the path that names it
// ("stages[2].profile[0].forward_s") for error messages. Cheap to copy.
class Field {
 public:
  Field(const nlohmann::json& value, std::string file, std::string path = {});

  const nlohmann::json& json() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  bool has(std::string_view key) const;
  Field at(std::string_view key) const;   // required member of an object
  Field at(std::size_t index) const;      // element of an array
  std::size_t size() const;               // array length (requires an array)

  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }

  // Typed reads; each fails with "FILE: PATH: must be ..., got ..." .
  double number() const;                  // any finite number
  double non_negative() const;            // finite, >= 0
  double positive() const;                // finite, > 0
  std::int64_t integer() const;           // an integral number
  std::int64_t integer_at_least(std::int64_t min) const;
  std::string string() const;
  bool boolean() const;
  void require_object() const;
  void require_array() const;

  // Optional members with defaults.
  double non_negative_or(std::string_view key, double fallback) const;

  [[noreturn]] void fail(std::string_view what) const;

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

// "null", "true", a number or a short excerpt of the value, for error messages.
std::string describe_json(const nlohmann::json& value);

}  // namespace adagrouper
