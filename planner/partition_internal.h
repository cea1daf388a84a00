// Constants shared by the partitioning files, internal to planner/.
#pragma once

#include <limits>

namespace adagrouper::planner::partition_parts {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace adagrouper::planner::partition_parts
