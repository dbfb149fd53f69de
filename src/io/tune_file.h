// The machine's tuning file, written by `mla tune` and read by the engine: today the measured
// prefill_absorption_threshold (the chunk length up to which the absorbed path is faster), for
// FP32 attention and, when measured, for BF16 attention (`--attention-dtype bf16`, whose absorbed
// path runs on the BF16 / AMX kernels and so wins up to longer chunks).
// Location: $MLA_TUNE_FILE, else $XDG_CACHE_HOME/mla/tune.json, else ~/.cache/mla/tune.json.
#pragma once

#include <optional>
#include <string>

#include "core/dtype.h"
#include "mla/status.h"

namespace mla {

struct TuneData {
  int prefill_absorption_threshold = 0;
  int prefill_absorption_threshold_bf16 = -1;  // -1: not measured
  std::string measured_on;                     // free text: date, CPU, threads
};

std::string tune_file_path();
// not_found when the file does not exist; data_loss naming the field when it is malformed.
Result<TuneData> read_tune_file(const std::string& path);
// Creates the parent directory; writes atomically (temp file + rename).
Status write_tune_file(const std::string& path, const TuneData& data);
// The tuned threshold when the file exists and is valid (read once per process); the engine falls
// back to kDefaultPrefillAbsorptionThreshold (kernels/mla_attention.h) otherwise.
// attention: the absorbed query dtype the engine runs with (kF32 or kBF16); BF16 falls back to
// the FP32 figure when only that was measured.
std::optional<int> tuned_prefill_absorption_threshold(DType attention = DType::kF32);

}  // namespace mla
