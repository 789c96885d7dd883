#include "ir/lexer.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace optjit {

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::end:
      return "end of input";
    case Tok::ident:
      return fmt::format("'{}'", t.text);
    case Tok::number:
      return fmt::format("number {}", t.text);
    case Tok::string:
      return fmt::format("string \"{}\"", t.text);
    case Tok::value_ref:
      return fmt::format("'{}'", t.text);
    case Tok::punct:
      return fmt::format("'{}'", t.text);
  }
  return "?";
}

Expected<std::vector<Token>> lex(std::string_view s) {
  std::vector<Token> out;
  int line = 1, col = 1;
  size_t i = 0;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i) {
      if (s[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
  };
  auto is_ident_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  while (i < s.size()) {
    char c = s[i];
    if (c == '\n' || c == ' ' || c == '\t' || c == '\r') {
      advance(1);
      continue;
    }
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') advance(1);
      continue;
    }
    Token t;
    t.line = line;
    t.col = col;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && is_ident_char(s[j])) ++j;
      t.kind = Tok::ident;
      t.text = std::string(s.substr(i, j - i));
      advance(j - i);
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < s.size() &&
                std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      std::string buf(s.substr(i, std::min<size_t>(s.size() - i, 64)));
      char* end = nullptr;
      t.number = std::strtod(buf.c_str(), &end);
      size_t n = static_cast<size_t>(end - buf.c_str());
      if (n < buf.size() && is_ident_char(buf[n]))
        return make_error("line {}, column {}: malformed number '{}'", line, col,
                          buf.substr(0, n + 1));
      if (std::isinf(t.number))  // strtod's overflow; a typo more often than a wish for inf
        return make_error(
            "line {}, column {}: number '{}' is too large for a double (write inf "
            "for infinity)",
            line, col, buf.substr(0, n));
      t.kind = Tok::number;
      t.text = buf.substr(0, n);
      advance(n);
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != '"' && s[j] != '\n') ++j;
      if (j >= s.size() || s[j] != '"')
        return make_error("line {}, column {}: unterminated string", line, col);
      t.kind = Tok::string;
      t.text = std::string(s.substr(i + 1, j - i - 1));
      advance(j + 1 - i);
    } else if (c == '%') {
      size_t j = i + 1;
      while (j < s.size() && is_ident_char(s[j])) ++j;
      if (j == i + 1)
        return make_error("line {}, column {}: '%' must start a value name", line, col);
      t.kind = Tok::value_ref;
      t.text = std::string(s.substr(i, j - i));
      advance(j - i);
    } else {
      static constexpr std::string_view kTwo[] = {"<=", ">=", "==", "!=", "&&", "||", "**"};
      static constexpr std::string_view kOne = "(){}[],=:;+-*/<>!?";
      t.kind = Tok::punct;
      for (auto two : kTwo)
        if (s.substr(i, 2) == two) t.text = std::string(two);
      if (t.text.empty()) {
        if (kOne.find(c) == std::string_view::npos) {
          if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
            return make_error("line {}, column {}: unexpected byte 0x{:02x}", line, col,
                              static_cast<unsigned char>(c));
          return make_error("line {}, column {}: unexpected character '{}'", line, col, c);
        }
        t.text = std::string(1, c);
      }
      advance(t.text.size());
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.line = line;
  end.col = col;
  out.push_back(end);
  return out;
}

Expected<double> TokenStream::number() {
  const bool neg = accept_punct("-");
  double v;
  if (peek().kind == Tok::number)
    v = next().number;
  else if (at_ident("inf"))
    next(), v = std::numeric_limits<double>::infinity();
  else if (at_ident("nan"))  // written, so that a bound can name it (lr = nan is invalid)
    next(), v = std::numeric_limits<double>::quiet_NaN();
  else
    return expected("a number");
  return neg ? -v : v;
}

Expected<std::vector<ir::Interval>> TokenStream::intervals() {
  std::vector<ir::Interval> out;
  if (!at_ident("in")) return out;
  next();
  do {
    ir::Interval i;
    if (accept_punct("("))
      i.lo_open = true;
    else if (!accept_punct("["))
      return expected("'[' or '(' starting an interval, e.g. [0, inf]");
    auto lo = number();
    if (!lo) return lo.error();
    OPTJIT_TRY(expect_punct(","));
    auto hi = number();
    if (!hi) return hi.error();
    if (accept_punct(")"))
      i.hi_open = true;
    else if (!accept_punct("]"))
      return expected("']' or ')' closing the interval");
    if (std::isnan(*lo) || std::isnan(*hi) || *lo > *hi)
      return expected("an interval from low to high");
    i.lo = *lo, i.hi = *hi;
    out.push_back(i);
  } while (at_ident("or") && (next(), true));
  return out;
}

}  // namespace optjit
