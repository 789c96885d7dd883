#include "ir/compile.h"

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "ir/builtins.h"
#include "ir/pipeline_text.h"

namespace optjit {

Expected<std::string> read_pipeline_text(const std::string& s) {
  // Pipeline text always has '('; a path to a file never needs one. Only a regular file of
  // text-like size is read: /dev/zero filled memory until the machine ran out, a FIFO (or
  // /dev/stdin) waited forever, and a directory read as empty text.
  constexpr std::uintmax_t kMaxBytes = 1 << 20;
  std::error_code ec;
  const bool file = std::filesystem::is_regular_file(s, ec);
  if (s.find('(') != std::string::npos && !file) return s;
  if (!file) {
    if (std::filesystem::exists(s, ec))
      return make_error("'{}' is not a regular file (a pipeline is text, or a file that holds it)",
                        s);
    // A transform's bare name ("adamw") is a call without its parentheses, not a file.
    if (dsl::find_builtin(s))
      return make_error("'{}' is neither pipeline text nor a readable file (did you mean '{}()'?)",
                        s, s);
    return make_error("'{}' is neither pipeline text nor a readable file", s);
  }
  const std::uintmax_t size = std::filesystem::file_size(s, ec);
  if (!ec && size > kMaxBytes)
    return make_error("'{}' is {} bytes: a pipeline file holds at most {} bytes of text", s, size,
                      kMaxBytes);
  std::ifstream in(s, std::ios::binary);
  if (!in) return make_error("'{}' is neither pipeline text nor a readable file", s);
  std::string text(kMaxBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return make_error("'{}': reading it failed", s);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxBytes)  // it grew since its size was taken
    return make_error("'{}' is over {} bytes: a pipeline file holds at most {} bytes of text", s,
                      kMaxBytes, kMaxBytes);
  // Editors on Windows start UTF-8 with a byte order mark, which is no text; PowerShell's
  // redirection writes UTF-16, which the parser would meet as "unexpected byte 0xff".
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  if (text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF"))
    return make_error("'{}' is UTF-16 text: a pipeline file is UTF-8 (or ASCII)", s);
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
