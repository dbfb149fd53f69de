// The `mla` subcommands. Each register_* adds one subcommand to the app and arranges for its
// exit code to land in *exit_code when it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace mla::cli {

void register_verify(CLI::App& app, int* exit_code);
void register_memory(CLI::App& app, int* exit_code);
void register_attention(CLI::App& app, int* exit_code);

}  // namespace mla::cli
