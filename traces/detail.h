// Internal to the traces library: the recursive entry points shared by the file
// readers and the rate-form resolver, and the cache of a TraceRates. `depth` counts
// nested rate forms and files, so that a trace file referring to itself fails instead
// of recursing forever.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "formats.h"
#include "json_util.h"
#include "rate_forms.h"
#include "trace.h"

namespace adagrouper::traces::detail {

inline constexpr int kMaxDepth = 16;

// What one TraceRates has read: trace files by canonical path and load options, and
// whole rate forms by their JSON and directory, so that a file or a form named several
// times in a network (channels, patterns, nested files) is read once and shared.
class TraceCache {
 public:
  // The trace in a file, loaded on the first request.
  std::shared_ptr<const Trace> file(const std::filesystem::path& path, const LoadOptions& options, int depth);
  // The trace a rate form gives, made by `make` on the first request of `key`.
  sim::RatePtr form(const std::string& key, const std::function<sim::RatePtr()>& make);

 private:
  std::mutex mutex_;  // held only to look up and insert: loading may nest (a file naming a file)
  std::map<std::string, std::shared_ptr<const Trace>> files_;
  std::map<std::string, sim::RatePtr> forms_;
};

// `cache` may be null (nothing is cached).
Trace resolve(const Field& rate, const std::filesystem::path& base_dir, int depth, TraceCache* cache = nullptr);
Loaded load_file(const std::filesystem::path& path, const LoadOptions& options, int depth,
                 TraceCache* cache = nullptr);
Loaded parse_text(std::string_view text, const std::string& source, const LoadOptions& options,
                  const std::filesystem::path& base_dir, int depth, TraceCache* cache = nullptr);

}  // namespace adagrouper::traces::detail
