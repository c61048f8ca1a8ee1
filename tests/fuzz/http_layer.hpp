// The one place the fuzz targets name the HTTP/1.1 layer's headers: the
// parsers (src/http) and the socket read buffer the connection feeds them
// from (src/proxy/io_buffer.hpp).
#pragma once

#include "http/message.hpp"     // Head, RequestInfo, ResponseInfo
#include "http/parser.hpp"      // RequestParser, ResponseParser, BodySink
#include "proxy/io_buffer.hpp"  // IoBuffer

namespace levee::fuzz::h1 {
using levee::http::BodySink;
using levee::http::Head;
using levee::http::RequestInfo;
using levee::http::RequestParser;
using levee::http::ResponseInfo;
using levee::http::ResponseParser;
using levee::http::ResponseSignals;
using levee::proxy::IoBuffer;
}  // namespace levee::fuzz::h1
