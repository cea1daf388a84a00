// What the fuzz targets share: a temporary file for the loaders that read a path, and the
// rule that InputError and SimError are the only ways an input may be refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <utility>

#include "error.h"

namespace adagrouper::fuzz {

// The fuzzer's bytes as text.
inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Writes `bytes` to this process's temporary file whose name ends in `suffix` (one file
// per suffix, in $TMPDIR or /tmp, created on first use, replaced on every call, removed
// at exit) and returns its path.
std::filesystem::path write_temp(std::string_view bytes, std::string_view suffix = ".json");

// Runs `fn`; an InputError or a SimError is the expected refusal of a bad input. Any other
// exception escapes, and libFuzzer reports it (std::terminate) with the input.
template <class Fn>
void refused_cleanly(Fn&& fn) {
  try {
    fn();
  } catch (const InputError&) {
  } catch (const SimError&) {
  }
}

// A target whose loader reads a path: writes the fuzzer's bytes to the temporary file of
// `suffix` (write_temp), runs `fn(path)` under refused_cleanly and returns 0, what
// LLVMFuzzerTestOneInput returns.
template <class Fn>
int on_temp_file(const std::uint8_t* data, std::size_t size, std::string_view suffix, Fn&& fn) {
  const std::filesystem::path path = write_temp(text_of(data, size), suffix);
  refused_cleanly([&] { fn(path); });
  return 0;
}

// The same with a ".json" file.
template <class Fn>
int on_temp_file(const std::uint8_t* data, std::size_t size, Fn&& fn) {
  return on_temp_file(data, size, ".json", std::forward<Fn>(fn));
}

// For properties that must hold (a writer's output reads back): prints what failed and aborts,
// so that libFuzzer saves the input.
[[noreturn]] void violated(std::string_view what);

}  // namespace adagrouper::fuzz
