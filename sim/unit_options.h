// Command-line option values with units: TimeArg, SizeArg and RateArg read "500us",
// "40GiB" and "25Gbit/s" (or a plain number in seconds, bytes, bytes per second) through
// Boost.Program_options, so that a bad value is Boost's one-line error naming the option:
//
//   ("memory-limit", po::value<SizeArg>()->value_name("BYTES"), "... (units accepted: 40GiB)")
//   const double bytes = vm["memory-limit"].as<SizeArg>().value;
//
// Header-only, for the programs that link Boost.Program_options (not part of sim.h).
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/any.hpp>
#include <boost/lexical_cast.hpp>
#include <boost/program_options/errors.hpp>
#include <boost/program_options/value_semantic.hpp>

#include "units.h"

namespace adagrouper {

template <Quantity Q>
struct QuantityArg {
  double value = 0;
};
using TimeArg = QuantityArg<Quantity::time>;  // seconds
using SizeArg = QuantityArg<Quantity::size>;  // bytes
using RateArg = QuantityArg<Quantity::rate>;  // bytes per second

// How --help prints a default: as the plain number would print.
template <Quantity Q>
std::ostream& operator<<(std::ostream& os, const QuantityArg<Q>& a) {
  return os << boost::lexical_cast<std::string>(a.value);
}

// Boost.Program_options' hook (found by argument-dependent lookup): the option's text
// through parse_quantity; a bad one is "the argument ('40Gib') for option
// '--memory-limit' is invalid: unknown size unit ...".
template <Quantity Q>
void validate(boost::any& v, const std::vector<std::string>& values, QuantityArg<Q>*, int) {
  namespace po = boost::program_options;
  po::validators::check_first_occurrence(v);
  const std::string& text = po::validators::get_single_string(values);
  try {
    v = QuantityArg<Q>{parse_quantity(text, Q)};
  } catch (const QuantityError& e) {
    po::invalid_option_value error(text);
    error.m_error_template = "the argument ('%value%') for option '%canonical_option%' is invalid: " + e.reason();
    throw error;
  }
}

// The number an option holds: a double or one of the types above (nullopt otherwise).
inline std::optional<double> option_number(const boost::any& value) {
  if (const auto* d = boost::any_cast<double>(&value)) return *d;
  if (const auto* t = boost::any_cast<TimeArg>(&value)) return t->value;
  if (const auto* s = boost::any_cast<SizeArg>(&value)) return s->value;
  if (const auto* r = boost::any_cast<RateArg>(&value)) return r->value;
  return std::nullopt;
}

}  // namespace adagrouper
