"""C++ helper shared by every source of the package: error messages built without iostreams.

`TORCH_CHECK(cond, "text", value, ...)` formats its arguments through a std::ostringstream created in
the extension's own code. When a toolchain links libstdc++ statically into the extension (some custom
GCC installs do), that stream uses the extension's private copy of the C++ locale machinery next to
the one libtorch uses, and formatting a number crashes the process instead of raising. Messages are
therefore assembled here from std::to_string and plain string concatenation, and handed to
TORCH_CHECK as one std::string, which c10 passes through without any stream:

    TORCH_CHECK(ok, gn_inline_msg::cat("expected ", n, " elements, got shape ", gn_inline_msg::shape(x)));
"""

MESSAGE_HEADER = r"""
// Guarded: several sources of one extension prepend this header.
#ifndef GN_INLINE_MESSAGE_HEADER
#define GN_INLINE_MESSAGE_HEADER
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

template <typename... Parts>
inline std::string cat(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}

}  // namespace gn_inline_msg
#endif  // GN_INLINE_MESSAGE_HEADER
"""
