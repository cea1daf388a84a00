// The table of units and the parser and printer of numbers with units.
#include "units.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace adagrouper {

namespace {

// One unit: value = number x 10^exp10 x factor. The power of ten goes into the decimal
// text before it is converted, so that "500us" rounds once, as "500e-6" does; the factor
// is exact or a small integer (60, 3600, 1/8, 1024^k).
struct Unit {
  std::string_view name;
  Quantity quantity;
  int exp10;
  double factor;
};

constexpr double kBit = 1.0 / 8.0;
constexpr double kKi = 1024.0;

// clang-format off
constexpr std::array kUnits{
  Unit{"ns", Quantity::time, -9, 1}, Unit{"us", Quantity::time, -6, 1}, Unit{"\u00B5s", Quantity::time, -6, 1},
  Unit{"\u03BCs", Quantity::time, -6, 1}, Unit{"ms", Quantity::time, -3, 1}, Unit{"s", Quantity::time, 0, 1},
  Unit{"min", Quantity::time, 0, 60}, Unit{"h", Quantity::time, 0, 3600},
  Unit{"B", Quantity::size, 0, 1}, Unit{"kB", Quantity::size, 3, 1}, Unit{"KB", Quantity::size, 3, 1},
  Unit{"MB", Quantity::size, 6, 1}, Unit{"GB", Quantity::size, 9, 1}, Unit{"TB", Quantity::size, 12, 1},
  Unit{"KiB", Quantity::size, 0, kKi}, Unit{"MiB", Quantity::size, 0, kKi * kKi},
  Unit{"GiB", Quantity::size, 0, kKi * kKi * kKi}, Unit{"TiB", Quantity::size, 0, kKi * kKi * kKi * kKi},
  Unit{"bit", Quantity::size, 0, kBit}, Unit{"kbit", Quantity::size, 3, kBit}, Unit{"Mbit", Quantity::size, 6, kBit},
  Unit{"Gbit", Quantity::size, 9, kBit}, Unit{"Tbit", Quantity::size, 12, kBit},
  Unit{"bps", Quantity::rate, 0, kBit}, Unit{"kbps", Quantity::rate, 3, kBit}, Unit{"Mbps", Quantity::rate, 6, kBit},
  Unit{"Gbps", Quantity::rate, 9, kBit}, Unit{"Tbps", Quantity::rate, 12, kBit},
};
// clang-format on

// A rate unit is a size unit followed by "/s", or one of the table's bit rates.
std::optional<Unit> find_unit(std::string_view name) {
  const bool per_second = name.size() > 2 && name.ends_with("/s");
  const std::string_view size = per_second ? name.substr(0, name.size() - 2) : name;
  for (const Unit& u : kUnits) {
    if (u.name != size) continue;
    if (!per_second) return u;
    if (u.quantity == Quantity::size) return Unit{name, Quantity::rate, u.exp10, u.factor};
  }
  return std::nullopt;
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// The number at the start of `s`: [+-] digits [. digits] [e [+-] digits], or with the
// digits only after the point; its mantissa (sign and digits, no exponent), exponent
// and length. Nothing when `s` does not start with one.
struct Number {
  std::string_view mantissa;
  long exponent = 0;
  std::size_t length = 0;
};

std::optional<Number> scan_number(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t digits = 0;
  for (; i < s.size() && is_digit(s[i]); ++i) ++digits;
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && is_digit(s[i]); ++i) ++digits;
  if (digits == 0) return std::nullopt;
  Number n{s.substr(0, i), 0, i};
  if (i + 1 < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    std::size_t j = i + 1;
    const bool negative = s[j] == '-';
    if (s[j] == '+' || s[j] == '-') ++j;
    if (j < s.size() && is_digit(s[j])) {
      for (; j < s.size() && is_digit(s[j]); ++j) n.exponent = std::min(n.exponent * 10 + (s[j] - '0'), 100000L);
      if (negative) n.exponent = -n.exponent;
      n.length = j;
    }
  }
  return n;
}

// The power of ten just above the first nonzero digit of unsigned decimal digits
// ("123.4": 3, "0.05": -1); out of range: a large magnitude overflows, a small one is 0.
long magnitude(std::string_view digits) {
  const std::size_t point = std::min(digits.find('.'), digits.size());
  const std::size_t first = digits.find_first_not_of("0.");
  if (first == std::string_view::npos) return 0;
  if (first < point) return static_cast<long>(point - first);
  return -static_cast<long>(first - point - 1);
}

// mantissa x 10^exponent, rounded once; nothing when out of the range of a double.
std::optional<double> to_double(std::string_view mantissa, long exponent) {
  const bool negative = !mantissa.empty() && mantissa.front() == '-';
  if (!mantissa.empty() && (mantissa.front() == '-' || mantissa.front() == '+')) mantissa.remove_prefix(1);
  const std::string text = fmt::format("{}e{}", mantissa, exponent);
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) {
    // Too small for a double reads as 0, as strtod and a JSON number read it.
    if (magnitude(mantissa) + exponent > 0) return std::nullopt;
    v = 0;
  } else if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return negative ? -v : v;
}

// "a number of bytes, or a number and a size unit (B, kB, ...)": what `q` expects.
std::string expected(Quantity q) {
  return fmt::format("a number of {}, or a number and a {} unit ({})", base_unit_name(q), quantity_name(q),
                     unit_list(q));
}

// `s` in quotes, cut short when long: what a message quotes of the input.
std::string quote(std::string_view s) {
  return s.size() > 40 ? fmt::format("\"{}...\"", s.substr(0, 37)) : fmt::format("\"{}\"", s);
}

[[noreturn]] void bad(std::string_view text, std::string what) { throw QuantityError(quote(text), std::move(what)); }

// The unit after a number: an error unless it is one of `q`'s.
Unit check_unit(std::string_view text, std::string_view number, std::string_view unit, Quantity q) {
  const auto u = find_unit(unit);
  if (u && u->quantity == q) return *u;
  if (u)
    bad(text, fmt::format("{} is a {} unit, not a {} unit ({})", quote(unit), quantity_name(u->quantity),
                          quantity_name(q), unit_list(q)));
  const bool word = std::all_of(unit.begin(), unit.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '/' || (static_cast<unsigned char>(c) >= 0x80);
  });
  if (!word) bad(text, fmt::format("unexpected {} after the number {}; expected {}", quote(unit), quote(number), expected(q)));
  bad(text, fmt::format("unknown {} unit {} ({})", quantity_name(q), quote(unit), unit_list(q)));
}

// The largest unit of `units` not above `value` (the first when none is).
template <std::size_t N>
std::pair<std::string_view, double> pick(double value, const std::array<std::pair<std::string_view, double>, N>& units) {
  auto best = units.front();
  for (const auto& u : units)
    if (std::fabs(value) >= u.second) best = u;
  return best;
}

// Three significant digits, without trailing zeros: 3.12, 12.5, 250, 3600.
std::string three_digits(double x) {
  const double a = std::fabs(x);
  std::string s = fmt::format("{:.{}f}", x, a >= 100 ? 0 : a >= 10 ? 1 : 2);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

}  // namespace

std::string_view quantity_name(Quantity q) {
  return q == Quantity::time ? "time" : q == Quantity::size ? "size" : "rate";
}

std::string_view base_unit_name(Quantity q) {
  return q == Quantity::time ? "seconds" : q == Quantity::size ? "bytes" : "bytes per second";
}

std::string_view base_unit_symbol(Quantity q) { return q == Quantity::time ? "s" : q == Quantity::size ? "B" : "B/s"; }

std::string_view unit_example(Quantity q) {
  return q == Quantity::time ? "500us" : q == Quantity::size ? "40GiB" : "25Gbit/s";
}

std::string_view unit_list(Quantity q) {
  switch (q) {
    case Quantity::time: return "ns, us, \u00B5s, ms, s, min, h";
    case Quantity::size: return "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bit, kbit, Mbit, Gbit, Tbit";
    case Quantity::rate:
      return "B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s, bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s, "
             "bps, kbps, Mbps, Gbps, Tbps";
  }
  return {};
}

double parse_quantity(std::string_view text, Quantity q) {
  const std::string_view s = trim(text);
  if (s.empty()) bad(text, fmt::format("empty; expected {}", expected(q)));
  const auto number = scan_number(s);
  if (!number) bad(text, fmt::format("must be {}", expected(q)));
  const std::string_view unit = trim(s.substr(number->length));
  const Unit u = unit.empty() ? Unit{"", q, 0, 1} : check_unit(text, s.substr(0, number->length), unit, q);
  const long exponent = std::clamp(number->exponent + u.exp10, -100000L, 100000L);
  const auto v = to_double(number->mantissa, exponent);
  if (!v || !std::isfinite(*v * u.factor)) bad(text, "out of range (too large for a double)");
  return *v * u.factor;
}

bool has_unit(std::string_view text) {
  const std::string_view s = trim(text);
  const auto number = scan_number(s);
  return number && number->length < s.size();
}

std::string format_quantity(double value, Quantity q) {
  using U = std::pair<std::string_view, double>;
  U u;
  switch (q) {
    case Quantity::time:
      u = pick(value, std::array{U{"ns", 1e-9}, U{"us", 1e-6}, U{"ms", 1e-3}, U{"s", 1.0}});
      break;
    case Quantity::size:
      u = pick(value, std::array{U{"B", 1.0}, U{"KiB", kKi}, U{"MiB", kKi * kKi}, U{"GiB", kKi * kKi * kKi},
                                 U{"TiB", kKi * kKi * kKi * kKi}});
      break;
    case Quantity::rate:
      value *= 8;  // in bits per second
      u = pick(value, std::array{U{"bit/s", 1.0}, U{"kbit/s", 1e3}, U{"Mbit/s", 1e6}, U{"Gbit/s", 1e9},
                                 U{"Tbit/s", 1e12}});
      break;
  }
  if (value == 0) u = q == Quantity::time ? U{"s", 1.0} : u;
  return fmt::format("{} {}", three_digits(value / u.second), u.first);
}

}  // namespace adagrouper
