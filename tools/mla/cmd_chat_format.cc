// `mla chat-format`: renders a conversation (JSON file) with a model's built-in chat format,
// recognised from tokenizer_config.json or chosen with --chat-format, and prints the prompt text
// and its ids (exactly one BOS; message text never becomes control tokens).
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::cli {
namespace {

struct ChatFormatOptions {
  std::string model;
  std::string tokenizer;
  std::string messages;
  std::string format;
  bool no_generation_prompt = false;
  bool json = false;
};

int fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

int run_chat_format(const ChatFormatOptions& o) {
  Result<tok::LoadedTokenizer> lt = tok::load_tokenizer(o.model, o.tokenizer);
  if (!lt.ok()) return fail(lt.status());
  Result<tok::ChatFormat> f = o.format.empty() ? tok::detect_chat_format(lt->config.chat_template)
                                               : tok::chat_format_from_name(o.format);
  if (!f.ok()) return fail(f.status());
  Result<std::string> text = tok::read_text_file(o.messages);
  if (!text.ok()) return fail(text.status());
  Result<tok::OrderedJson> j = tok::parse_ordered_json(*text, o.messages);
  if (!j.ok()) return fail(j.status());
  tok::ChatOptions opts;
  Result<std::vector<tok::ChatMessage>> msgs = tok::parse_chat_messages(*j, o.messages, &opts);
  if (!msgs.ok()) return fail(msgs.status());
  if (o.no_generation_prompt) opts.add_generation_prompt = false;
  Result<std::vector<tok::ChatPart>> parts = tok::render_chat(*f, *msgs, opts);
  if (!parts.ok()) return fail(parts.status());
  Result<std::vector<int32_t>> ids = tok::encode_chat(lt->tokenizer, *parts);
  if (!ids.ok()) return fail(ids.status());
  const std::string prompt = tok::chat_text(*parts);
  if (o.json) {
    fmt::print("{}\n",
               nlohmann::ordered_json(
                   {{"format", tok::chat_format_name(*f)}, {"prompt", prompt}, {"ids", *ids}})
                   .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  } else {
    fmt::print("format: {}\nprompt:\n{}\nids ({}): {}\n", tok::chat_format_name(*f), prompt,
               ids->size(), fmt::join(*ids, ","));
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_chat_format(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<ChatFormatOptions>();
  CLI::App* cmd =
      app.add_subcommand("chat-format", "Render a conversation with the model's chat format");
  CLI::Option* m = cmd->add_option("-m,--model", opts->model,
                                   "Model directory (tokenizer.json, tokenizer_config.json)");
  CLI::Option* t = cmd->add_option("--tokenizer", opts->tokenizer,
                                   "A tokenizer.json file (then --chat-format is needed)");
  m->excludes(t);
  cmd->add_option("--messages", opts->messages,
                  "JSON file: [{\"role\", \"content\"}, ...] or {\"messages\": [...], "
                  "\"tools\": [...], \"add_generation_prompt\": bool}")
      ->required();
  cmd->add_option("--chat-format", opts->format,
                  "Format to use instead of recognising the template: " + tok::chat_format_names());
  cmd->add_flag("--no-generation-prompt", opts->no_generation_prompt,
                "Do not end with the assistant prefix");
  cmd->add_flag("--json", opts->json, "Print {\"format\", \"prompt\", \"ids\"}");
  cmd->callback([opts, exit_code] {
    if (opts->model.empty() && opts->tokenizer.empty()) {
      *exit_code = fail(invalid_argument("chat-format: give -m DIR or --tokenizer FILE"));
      return;
    }
    *exit_code = run_chat_format(*opts);
  });
}

MLA_REGISTER_COMMAND("chat-format", register_chat_format);

}  // namespace mla::cli
