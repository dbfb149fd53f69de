// StopStringFilter: cuts streamed text at the first stop string, holding back only the tail that
// could still become one, so a client never sees part of a stop string (OpenAI's `stop`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mla::sched {

// Text goes in as it is detokenized; what comes out is safe to send. With stop strings s_i, at
// most max|s_i| - 1 bytes are held back at any time. Stop strings are UTF-8 (they come from
// JSON), so a held-back tail starts at a character boundary and output stays whole UTF-8.
class StopStringFilter {
 public:
  StopStringFilter() = default;
  // include_stop: the stop string itself is part of the text that comes out (vLLM's
  // include_stop_str_in_output); what follows it still never does.
  explicit StopStringFilter(std::vector<std::string> stops, bool include_stop = false);

  bool empty() const { return stops_.empty(); }

  // Appends piece and returns the text that can no longer be part of a stop string. When a stop
  // string is complete, sets *stopped and returns the text before its first occurrence (what
  // follows is dropped); the filter must not be pushed again.
  // Cost: O(held · Σ|s_i|) per call, held < max|s_i| + |piece|.
  std::string push(std::string_view piece, bool* stopped);

  // The held-back tail, when generation ends for another reason.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  size_t max_len_ = 0;
  std::string held_;
};

}  // namespace mla::sched
