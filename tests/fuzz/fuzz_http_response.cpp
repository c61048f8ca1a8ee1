// The HTTP/1.1 response parser, as a backend's bytes reach it (see
// http_driver.hpp for the connection model and the invariants). Here, in
// addition: the load-report index and the don't-retry flag the parser notes
// agree with a reference computed from the stored fields, and a response
// to HEAD, a 1xx, 204 or 304 has no body.
#include <string>

#include "core/headers.hpp"
#include "core/text.hpp"
#include "http_driver.hpp"

namespace {

using namespace levee::fuzz;
using levee::core::iequals;

const h1::ResponseSignals& names() {
  static const h1::ResponseSignals n;  // endpoint-load-metrics(-bin), x-levee-no-retry
  return n;
}

struct ResponseTraits {
  using Info = h1::ResponseInfo;
  static constexpr bool kResponse = true;
  using Parser = h1::ResponseParser;

  static Parser make(h1::Head& head, Info& info, h1::BodySink& sink) { return Parser(head, info, sink, names()); }

  static bool bodyless(const Parser&, const Info& info, const DriveParams& prm) {
    return prm.head_response || info.status / 100 == 1 || info.status == 204 || info.status == 304;
  }

  static void check(const Parser&, const h1::Head& head, const Info& info) {
    FUZZ_CHECK(info.status >= 0 && info.status <= 999, "status %d", info.status);
    FUZZ_CHECK(info.version == 10 || info.version == 11, "HTTP version %d", info.version);
    FUZZ_CHECK(safe_value(info.reason), "the reason phrase holds CR, LF or NUL");
    const auto& fs = head.fields();
    int report = -1, report_bin = -1;
    bool no_retry = false;
    for (std::size_t i = 0; i < fs.size(); ++i) {
      const auto& f = fs[i];
      if (iequals(f.name, names().load_report)) report = static_cast<int>(i);
      else if (iequals(f.name, names().load_report_bin)) report_bin = static_cast<int>(i);
      else if (iequals(f.name, names().no_retry) || iequals(f.name, "x-envoy-overloaded")) no_retry = true;
      else if (iequals(f.name, "grpc-retry-pushback-ms") && levee::core::pushback_says_no_retry(f.value))
        no_retry = true;
    }
    FUZZ_CHECK(info.load_report == report, "load report noted at %d, stored at %d", info.load_report, report);
    FUZZ_CHECK(info.load_report_bin == report_bin, "binary load report noted at %d, stored at %d",
               info.load_report_bin, report_bin);
    FUZZ_CHECK(info.no_retry == no_retry, "no_retry noted %d, the fields say %d", info.no_retry, no_retry);
    FUZZ_CHECK(!info.too_many_fields, "too many fields, yet no error");
  }

  static std::string describe(const Info& i) {
    std::string s = std::to_string(i.status) + ' ' + std::to_string(i.version) + ' ' + std::string(i.reason);
    s += ' ' + std::to_string(i.load_report) + ' ' + std::to_string(i.load_report_bin) + ' ' +
         std::to_string(int(i.no_retry));
    s += ' ' + std::string(i.trailer_load.value()) + ' ' + std::to_string(int(i.trailer_load.bin)) + ' ' +
         std::to_string(int(i.trailer_load.truncated));
    return s;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return drive<ResponseTraits>(data, size);
}
