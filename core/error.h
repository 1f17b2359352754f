/// \file
/// Ember's exceptions and the checks that throw them.
///
/// Every failure a user can cause (a bad shape, an out-of-range dim, a dtype
/// mismatch, a missing kernel, a corrupt file) throws one of these, with a
/// message that names the op and the offending shapes or file. Nothing aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ember {

/// Base of every Ember exception; catch this to catch them all.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Shapes that do not fit together (matmul, broadcasting, cat, losses, views).
class ShapeError : public Error {
 public:
  using Error::Error;
};
/// A dim or an index outside its range.
class IndexError : public Error {
 public:
  using Error::Error;
};
/// A dtype the op does not accept, or two that do not match.
class DTypeError : public Error {
 public:
  using Error::Error;
};
/// A device that is unavailable, has no kernel for the op, or mixed devices.
class DeviceError : public Error {
 public:
  using Error::Error;
};
/// Misuse of autograd: backward twice through a freed graph, a saved tensor
/// modified in place, backward on a non-scalar without a gradient.
class AutogradError : public Error {
 public:
  using Error::Error;
};
/// A file that cannot be read or written, or whose contents are invalid.
class IOError : public Error {
 public:
  using Error::Error;
};
/// Any other invalid argument (a negative probability, an unknown option).
class ValueError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string cat_str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

/// EMBER_CHECK(cond, ErrorType, message parts...): throws ErrorType with the
/// parts streamed together when cond is false. The message is only built on
/// failure, so checks cost one branch on the hot path.
#define EMBER_CHECK(cond, ErrorType, ...)                                                              \
  do {                                                                                                 \
    if (__builtin_expect(!(cond), 0)) throw ::ember::ErrorType(::ember::detail::cat_str(__VA_ARGS__)); \
  } while (0)

}  // namespace ember
