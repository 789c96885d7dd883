#include "ir/compile.h"

#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "ir/builtins.h"
#include "ir/pipeline_text.h"
#include "support/input_file.h"

namespace optjit {

namespace {

// `s` as an error message shows it: control bytes as \xNN, and past 200 bytes cut (between
// UTF-8 characters: Python decodes the message), with its length ("aaa... (2000000 bytes)").
// A string of text without '(' is taken for a path, and its echo was the whole of it, a
// megabyte of message.
std::string shown(const std::string& s) {
  constexpr size_t kMost = 200;
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= kMost && (c & 0xC0) != 0x80)  // not inside a character
      return out + fmt::format("... ({} bytes)", s.size());
    out += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, char(c));
  }
  return out;
}

// `text` without a UTF-8 byte order mark, as Windows editors start a file with: no text (Python's
// open(path).read() keeps it, and the parser met it as "unexpected byte 0xef").
std::string without_byte_order_mark(std::string text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  return text;
}

}  // namespace

Expected<std::string> read_pipeline_text(const std::string& s) {
  const std::string q = shown(s);  // (about 200 bytes of it looked at)
  // Pipeline text always has '('; a path to a file never needs one. Only a regular file of
  // text-like size is read: /dev/zero filled memory until the machine ran out, a FIFO (or
  // /dev/stdin) waited forever, and a directory read as empty text.
  constexpr std::uintmax_t kMaxBytes = 1 << 20;
  std::error_code ec;
  const bool file = std::filesystem::is_regular_file(s, ec);
  if (s.find('(') != std::string::npos && !file) return without_byte_order_mark(s);
  if (!file) {
    if (std::filesystem::exists(s, ec))
      return make_error("'{}' is not a regular file (a pipeline is text, or a file that holds it)",
                        q);
    // A transform's bare name ("adamw") is a call without its parentheses, not a file.
    if (dsl::find_builtin(s))
      return make_error("'{}' is neither pipeline text nor a readable file (did you mean '{}()'?)",
                        q, q);
    return make_error("'{}' is neither pipeline text nor a readable file", q);
  }
  const std::uintmax_t size = std::filesystem::file_size(s, ec);
  if (!ec && size > kMaxBytes)
    return make_error("'{}' is {} bytes: a pipeline file holds at most {} bytes of text", q, size,
                      kMaxBytes);
  // Read through its descriptor, capped (a file swapped for a FIFO or grown since is refused).
  auto read = support::read_file(s, kMaxBytes);
  if (!read) return read.error();
  std::string text = without_byte_order_mark(std::move(*read));
  // PowerShell's redirection writes UTF-16, which the parser would meet as "unexpected byte
  // 0xff".
  if (text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF"))
    return make_error("'{}' is UTF-16 text: a pipeline file is UTF-8 (or ASCII)", q);
  return text;
}

Expected<plan::Plan> compile_pipeline(std::string_view text, dsl::DTypes dtypes) {
  auto pipeline = dsl::parse_pipeline(text);
  if (!pipeline) return make_error("pipeline: {}", pipeline.error().message);
  auto program = dsl::lower(*pipeline, dtypes);
  if (!program) return make_error("pipeline: {}", program.error().message);
  return plan::make_plan(*program);
}

}  // namespace optjit
