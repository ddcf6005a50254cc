"""C++ helper shared by every source of the package: error messages built without iostreams.

`TORCH_CHECK(cond, "text", value, ...)` formats its arguments through a std::ostringstream created in
the extension's own code. When a toolchain links libstdc++ statically into the extension (some custom
GCC installs do), that stream uses the extension's private copy of the C++ locale machinery next to
the one libtorch uses, and formatting a number crashes the process instead of raising. Messages are
therefore assembled here from std::to_string and plain string concatenation, and handed to
TORCH_CHECK as one std::string, which c10 passes through without any stream:

    TORCH_CHECK(ok, gn_inline_msg::cat("expected ", n, " elements, got shape ", gn_inline_msg::shape(x)));

Dtypes are named by `gn_inline_msg::dtype_name` ("Float", as a stream prints them) and devices by
`Device::str()` ("cuda:0", formatted inside libc10). AT_DISPATCH's error for a dtype it has no case for is
streamed too, so an operator refuses such dtypes first with `gn_inline_msg::not_implemented_for` (same
words). Note that std::to_string prints a double with six decimals ("0.000010"), not as a stream would
("1e-05"). tests/cxx_messages.py finds any other message form in the sources.
"""

MESSAGE_HEADER = r"""
// Guarded: several sources of one extension prepend this header.
#ifndef GN_INLINE_MESSAGE_HEADER
#define GN_INLINE_MESSAGE_HEADER
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <string>
#include <type_traits>

namespace gn_inline_msg {

inline void append(std::string& out, const char* text) { out += text; }
inline void append(std::string& out, const std::string& text) { out += text; }
inline void append(std::string& out, char c) { out += c; }
inline void append(std::string& out, bool value) { out += value ? "true" : "false"; }

template <typename Number, typename = std::enable_if_t<std::is_arithmetic_v<Number>>>
inline void append(std::string& out, Number value) {
  out += std::to_string(value);
}

// "[2, 64, 30, 30]", as PyTorch prints sizes.
inline std::string shape(c10::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(sizes[i]);
  }
  return out + "]";
}

// "Float", "Half", ... as PyTorch prints a dtype in C++ messages (c10::toString returns a literal).
inline const char* dtype_name(c10::ScalarType type) { return c10::toString(type); }

// The words of AT_DISPATCH's error for a dtype it has no case for: "\"op\" not implemented for 'Int'". That
// error is formatted through a stream, so operators refuse such dtypes with this message before dispatching.
inline std::string not_implemented_for(const char* op, c10::ScalarType type) {
  return std::string("\"") + op + "\" not implemented for '" + dtype_name(type) + "'";
}

template <typename... Parts>
inline std::string cat(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}

}  // namespace gn_inline_msg
#endif  // GN_INLINE_MESSAGE_HEADER
"""
