// The `mla` subcommands register themselves: each cmd_<name>.cc defines a register function and
// a static MLA_REGISTER_COMMAND(name, fn); main() adds them all (sorted by name) to the app.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace mla::cli {

// Adds one subcommand to app and arranges for its exit code to land in *exit_code when it runs.
using RegisterFn = void (*)(CLI::App& app, int* exit_code);

struct CommandEntry {
  std::string name;
  RegisterFn fn;
};

std::vector<CommandEntry>& command_table();

// The model generate and serve run without -m: the trained tiny DeepSeek-V3 model committed at
// models/tiny-kjv (scripts/train_bundled_model.py); its path is fixed at build time.
inline constexpr const char* kBundledModelDir = MLA_BUNDLED_MODEL_DIR;

struct CommandRegistrar {
  CommandRegistrar(const char* name, RegisterFn fn) { command_table().push_back({name, fn}); }
};

}  // namespace mla::cli

#define MLA_REGISTER_COMMAND(name, fn) \
  static const ::mla::cli::CommandRegistrar mla_command_registrar_##fn(name, fn)
