// Reading JSON input files with errors that name the file, the field and the line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.h"
#include "units.h"

namespace adagrouper {

// Deepest nesting of objects and arrays an input may have.
inline constexpr std::size_t kMaxJsonDepth = 128;
// Most memory (estimated before parsing) the parsed form of one JSON input may take.
inline constexpr double kMaxJsonBytes = 2.0 * (1 << 30);

// The whole content of a file: "PATH: is a directory", "PATH: cannot open file" or
// "PATH: cannot read file" when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

// Parses JSON strictly: a syntax error, an object that gives a key twice, nesting
// deeper than kMaxJsonDepth and a document too large for memory are InputErrors naming
// `source` and the line ("SOURCE: line L: stages[0]: duplicate key \"name\"").
// `first_line` numbers the text's first line (a line of a JSON Lines file).
nlohmann::json parse_json_text(std::string_view text, const std::string& source, std::size_t first_line = 1);

// read_text_file, then parse_json_text with the path as the source.
nlohmann::json read_json_file(const std::filesystem::path& path);

// The line of `key` in the object at `path` (as Field names it) of the JSON file
// `file`; 0 when `file` is no readable JSON file or holds no such key. For messages.
std::size_t json_key_line(const std::string& file, std::string_view path, std::string_view key);

// `s` with every byte sequence that is not UTF-8 replaced by U+FFFD: a file name or a
// name taken from one that goes into a JSON output.
std::string utf8_safe(std::string_view s);

// Optimal string alignment distance (insertions, deletions, substitutions and
// transpositions of adjacent characters) between two keys.
std::size_t edit_distance(std::string_view a, std::string_view b);

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
  // Finite and >= 0, or > 0; with `q`, a quantity as quantity(q) reads it.
  double non_negative(std::optional<Quantity> q = std::nullopt) const;
  double positive(std::optional<Quantity> q = std::nullopt) const;
  // A finite number in [min, max]; `why` explains the upper limit in the message.
  double number_in(double min, double max, std::string_view why = {}) const;
  // A time, a size or a rate (docs/formats.md, "Units"): a number in seconds, bytes or
  // bytes per second, as number() reads it, or a string with a unit ("500us", "40GiB",
  // "25Gbit/s"). A string without a unit or with a unit of another quantity fails, and
  // so does a rate with a unit below plain_rates; the message lists the units.
  double quantity(Quantity q) const;      // any finite value
  double seconds() const { return quantity(Quantity::time); }
  double bytes() const { return quantity(Quantity::size); }
  double rate() const { return quantity(Quantity::rate); }
  double number_in(Quantity q, double min, double max, std::string_view why = {}) const;
  std::int64_t integer() const;           // an integral number
  std::int64_t integer_at_least(std::int64_t min) const;
  // An integer in [min, max] (the range of int by default), never wrapped.
  int int_in(int min, int max = std::numeric_limits<int>::max()) const;
  std::string string() const;
  bool boolean() const;
  void require_object() const;
  void require_array() const;

  // Requires an object whose keys are all in `known`, or "description" or "comment"
  // (free text, allowed everywhere). An unknown key fails with the line and the
  // nearest known key: "FILE: line L: PATH: unknown key \"forwad_s\" (did you mean
  // \"forward_s\"?)"; `what` names the object when the path does not ("periodic").
  void check_keys(std::span<const std::string_view> known, std::string_view what = {}) const;
  void check_keys(std::initializer_list<std::string_view> known, std::string_view what = {}) const {
    check_keys(std::span<const std::string_view>(known.begin(), known.size()), what);
  }
  // The same with the keys listed in one string, ", " between them.
  void check_key_list(std::string_view keys, std::string_view what = {}) const;

  // Optional members with defaults.
  double non_negative_or(std::string_view key, double fallback) const;

  // This field, and every field reached through it with at(), takes rates as plain
  // numbers only: a rate with a unit fails with `why` (a string that outlives the
  // fields, such as a literal): "a speed is a multiplier, not a rate". For values that
  // are rates in name only: speeds, and traces in bits per second or factors.
  Field plain_rates(std::string_view why) const;
  std::string_view plain_rates_why() const { return plain_rates_; }

  [[noreturn]] void fail(std::string_view what) const;

 private:
  // `v` as a message quotes it: the number, or the string it was read from and the number.
  std::string got(double v) const;
  // v, when it lies in [min, max].
  double in_range(double v, double min, double max, std::string_view why) const;

  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
  std::string_view plain_rates_;  // empty: rates may have units
};

// The keys an object of a document may have, for check_schema: `path` names the object
// with "[]" for every array index ("devices[].program[]"; "" for the root), `keys` lists
// them with ", " between.
struct ObjectKeys {
  std::string_view path;
  std::string_view keys;
};

// Field::check_keys on every object of the document `root` that `schema` lists (an
// object it does not list is free-form); `what` names the document in messages.
void check_schema(const Field& root, std::span<const ObjectKeys> schema, std::string_view what);

// "null", "true", a number or a short excerpt of the value, for error messages; reads
// at most a few levels and characters of it, however large or deep it is.
std::string describe_json(const nlohmann::json& value);

}  // namespace adagrouper
