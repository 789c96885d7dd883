// User-facing errors travel as values (Error / Expected<T>); compiler bugs are assertions.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/core.h>

namespace optjit {

/// A user error: bad pipeline text, bad files, type mismatches, missing devices.
struct Error {
  std::string message;
};

template <typename... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

/// A value or the error that prevented it (std::expected is C++23; this is the subset we use).
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

/// Success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return {}; }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

/// Internal invariant: a failure is a bug in optjit, not in the user's input.
[[noreturn]] void internal_error(const char* file, int line, const std::string& what);

#define OPTJIT_CHECK(cond, ...)                                       \
  do {                                                                \
    if (!(cond)) ::optjit::internal_error(__FILE__, __LINE__, #cond); \
  } while (0)

}  // namespace optjit

/// Propagate an error from an Expected or Status expression.
#define OPTJIT_TRY(expr)                          \
  do {                                            \
    auto&& optjit_try_ = (expr);                  \
    if (!optjit_try_) return optjit_try_.error(); \
  } while (0)
