// Tokens for the IR text and the pipeline language, with line and column for error messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/program.h"

namespace optjit {

enum class Tok { ident, number, string, value_ref, punct, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;  // identifier, punctuation, number spelling, string contents, %name
  double number = 0;
  int line = 1, col = 1;
};

/// Splits text into tokens. `#` starts a comment to the end of the line. Errors name line:col.
Expected<std::vector<Token>> lex(std::string_view text);

std::string describe(const Token& t);

/// A cursor over tokens with the helpers both parsers use.
class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> toks) : toks_(std::move(toks)) {}
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  Token next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool at_punct(std::string_view p) const { return peek().kind == Tok::punct && peek().text == p; }
  bool at_ident(std::string_view w) const { return peek().kind == Tok::ident && peek().text == w; }
  bool accept_punct(std::string_view p) {
    if (!at_punct(p)) return false;
    ++pos_;
    return true;
  }
  /// "line L, column C: expected WHAT, found X".
  Error expected(std::string_view what) const {
    return error_at(peek(), fmt::format("expected {}, found {}", what, describe(peek())));
  }
  static Error error_at(const Token& t, std::string_view msg) {
    return make_error("line {}, column {}: {}", t.line, t.col, msg);
  }
  Status expect_punct(std::string_view p) {
    if (accept_punct(p)) return Status::Ok();
    return expected(fmt::format("'{}'", p));
  }
  Expected<std::string> expect_ident(std::string_view what = "a name") {
    if (peek().kind != Tok::ident) return expected(what);
    return next().text;
  }
  /// A number with an optional '-': a literal, `inf` or `nan`.
  Expected<double> number();
  /// Where a hyperparameter may lie, after `in`: `[0, inf] or (1, 2)`, each from low to high.
  /// Empty when the next token is not `in`.
  Expected<std::vector<ir::Interval>> intervals();

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
};

}  // namespace optjit
