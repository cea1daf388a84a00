// Output files are complete or absent: written to a temporary file beside the target,
// then renamed over it.
#pragma once

#include <filesystem>
#include <string_view>

namespace adagrouper {

// Throws std::runtime_error naming the path on failure (the temporary is removed).
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

}  // namespace adagrouper
