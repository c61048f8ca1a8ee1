// The one place the fuzz targets name the HTTP/1.1 layer's headers. The
// parsers are moving from src/proxy/ to src/http/: when they do, this
// include and LEVEE_FUZZ_HTTP_SOURCES in CMakeLists.txt are the only lines
// to change.
#pragma once

#include "proxy/http.hpp"       // RequestParser, ResponseParser, Head, BodySink
#include "proxy/io_buffer.hpp"  // IoBuffer: the socket read buffer

namespace levee::fuzz {
namespace h1 = levee::proxy;
}  // namespace levee::fuzz
