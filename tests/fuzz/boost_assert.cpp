// Boost's assertions in the HTTP targets (built with BOOST_ENABLE_ASSERT_HANDLER):
// fatal, as without a handler, except one that Boost 1.81 (Debian 12) has
// wrong. Beast's parse_chunk_header asserts n >= 5 when it resumes after
// the last chunk's size line, but with an empty chunked body ("0\r\n\r\n")
// arriving a byte at a time n is 4 on that call. The code after the
// assertion handles it (it waits for CRLF CRLF), release builds skip the
// assertion, and upstream corrected it (boostorg/beast pull request 2861).
#include <boost/assert.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace boost {

void assertion_failed(char const* expr, char const* function, char const* file, long line) {
  if (std::strcmp(expr, "n >= 5") == 0 && std::strstr(file, "beast/http/impl/basic_parser.ipp")) return;
  std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed.\n", file, line, function, expr);
  std::abort();
}

void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file, long line) {
  std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed: %s\n", file, line, function, expr, msg);
  std::abort();
}

}  // namespace boost
