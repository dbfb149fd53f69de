// StopStringFilter: earliest complete match wins; otherwise hold the longest suffix that is a
// prefix of some stop string (every shorter candidate start is a suffix of it).
#include "sched/stop_strings.h"

#include <algorithm>
#include <utility>

namespace mla::sched {

StopStringFilter::StopStringFilter(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  for (const std::string& s : stops_) max_len_ = std::max(max_len_, s.size());
}

std::string StopStringFilter::push(std::string_view piece, bool* stopped) {
  *stopped = false;
  held_.append(piece);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest stop string; of two starting there, the shorter (it completed first).
  size_t earliest = std::string::npos, end = 0;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    if (at < earliest || (at == earliest && at + s.size() < end)) end = at + s.size();
    earliest = std::min(earliest, at);
  }
  if (earliest != std::string::npos) {
    *stopped = true;
    std::string out = held_.substr(0, include_stop_ ? end : earliest);
    held_.clear();
    return out;
  }
  // No stop string is complete, so the longest possible partial one is shorter than max_len_.
  size_t keep = std::min(held_.size(), max_len_ - 1);
  for (; keep > 0; --keep) {
    const std::string_view tail = std::string_view(held_).substr(held_.size() - keep);
    const bool starts_one = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
      return std::string_view(s).substr(0, keep) == tail;
    });
    if (starts_one) break;
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::flush() {
  return std::exchange(held_, {});
}

}  // namespace mla::sched
