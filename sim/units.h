// Numbers with units: "500us", "40GiB", "25Gbit/s" read as seconds, bytes and bytes per
// second (docs/formats.md, "Units"), and the same quantities printed with a unit.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace adagrouper {

// What a number measures, and the base unit a plain number is in.
enum class Quantity {
  time,  // seconds
  size,  // bytes
  rate,  // bytes per second
};

// "time", "size" or "rate".
std::string_view quantity_name(Quantity q);
// "seconds", "bytes" or "bytes per second": what a plain number means.
std::string_view base_unit_name(Quantity q);
// "s", "B" or "B/s": the base unit's symbol.
std::string_view base_unit_symbol(Quantity q);
// "500us", "40GiB" or "25Gbit/s": an example for messages and help texts.
std::string_view unit_example(Quantity q);
// The units `q` accepts, ", " between: "ns, us, µs, ms, s, min, h" for a time.
std::string_view unit_list(Quantity q);

// A number with a unit that cannot be read. what(): the text quoted, then reason():
// "\"40Gib\": unknown size unit \"Gib\" (B, kB, ...)".
class QuantityError : public std::invalid_argument {
 public:
  QuantityError(const std::string& quoted, std::string reason)
      : std::invalid_argument(quoted + ": " + reason), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// The value of `text`, a number (JSON's or strtod's decimal syntax, with an optional
// sign; no hex, no inf, no nan) optionally followed by blanks and a unit of `q`, in the
// base unit: parse_quantity("25Gbit/s", Quantity::rate) == 3.125e9. A plain number is
// already in the base unit. Powers of ten are applied to the decimal text, so "500us"
// is the double nearest to 5e-4, as "5e-4" would be. Any sign is accepted; ranges are
// the caller's. Throws QuantityError with a message that quotes `text` and, for a unit
// it does not take, lists the units of `q`:
//   "40Gib": unknown size unit "Gib" (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bit, ...)
double parse_quantity(std::string_view text, Quantity q);

// Whether `text` has a unit after its number (a quick look for callers that treat
// plain numbers and numbers with units differently; it does not validate).
bool has_unit(std::string_view text);

// `value` (in the base unit) with a unit that keeps it between 1 and 1000 where one
// does, three significant digits: "500 us", "40 GiB" (sizes in binary units), "25
// Gbit/s" (rates in bits per second, as links are sold), "1.5 min". For people: JSON
// outputs keep plain numbers in the base unit.
std::string format_quantity(double value, Quantity q);

}  // namespace adagrouper
