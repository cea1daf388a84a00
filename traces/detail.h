// Internal to the traces library: the recursive entry points shared by the file
// readers and the rate-form resolver. `depth` counts nested rate forms and files, so
// that a trace file referring to itself fails instead of recursing forever.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "formats.h"
#include "json_util.h"
#include "trace.h"

namespace adagrouper::traces::detail {

inline constexpr int kMaxDepth = 16;

Trace resolve(const Field& rate, const std::filesystem::path& base_dir, int depth);
Loaded load_file(const std::filesystem::path& path, const LoadOptions& options, int depth);
Loaded parse_text(std::string_view text, const std::string& source, const LoadOptions& options,
                  const std::filesystem::path& base_dir, int depth);

}  // namespace adagrouper::traces::detail
