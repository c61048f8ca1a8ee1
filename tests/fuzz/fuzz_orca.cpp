// ORCA load reports (`endpoint-load-metrics`) from backends, in every form
// levee reads. The first input byte picks the form (or none: the raw value,
// to fuzz the form dispatch itself); the rest is the report.
//
// Checked:
//   - a report that is not Ok leaves the caller's report untouched (one
//     whose framing could not be read is never used);
//   - an Ok report holds only finite, non-negative numbers;
//   - an Ok report, written out in every form (TEXT, JSON, BIN), parses back
//     to itself with nothing ignored;
//   - the TEXT form agrees with a reference reader of `k=v, k=v`, values and
//     the counts of unknown and malformed metrics alike.
// Every parse selects named_metrics.kv as the utilization and
// request_cost.cpu as the cost.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "core/orca.hpp"
#include "core/text.hpp"
#include "fuzz_check.hpp"

using namespace levee::core;

namespace {

void number(std::string& out, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%.17g", v);
  out.append(buf, static_cast<std::size_t>(n));
}

const OrcaSelection& selection() {
  static const OrcaSelection sel = [] {
    OrcaSelection s;
    s.utilization = *parse_orca_metric("named_metrics.kv");
    return s;
  }();
  return sel;
}

std::string write_text(const LoadReport& r) {
  std::string s;
  auto field = [&](const char* k, const std::optional<double>& v) {
    if (!v) return;
    if (!s.empty()) s += ", ";
    s += k;
    s += '=';
    number(s, *v);
  };
  field("cpu_utilization", r.cpu_utilization);
  field("mem_utilization", r.mem_utilization);
  field("application_utilization", r.application_utilization);
  field("named_metrics.kv", r.selected_utilization);
  field("request_cost.cpu", r.cost);
  return s;
}

std::string write_json(const LoadReport& r) {
  std::string s = "{";
  auto field = [&](const char* k, const std::optional<double>& v) {
    if (!v) return;
    if (s.size() > 1) s += ',';
    s += '"';
    s += k;
    s += "\":";
    number(s, *v);
  };
  auto map = [&](const char* m, const char* k, const std::optional<double>& v) {
    if (!v) return;
    if (s.size() > 1) s += ',';
    s += '"';
    s += m;
    s += "\":{\"";
    s += k;
    s += "\":";
    number(s, *v);
    s += '}';
  };
  field("cpu_utilization", r.cpu_utilization);
  field("mem_utilization", r.mem_utilization);
  field("application_utilization", r.application_utilization);
  map("named_metrics", "kv", r.selected_utilization);
  map("request_cost", "cpu", r.cost);
  s += '}';
  return s;
}

// The protobuf wire format, written here from the spec (no code shared
// with the reader), then standard base64 without padding as grpc-go sends it.
std::string write_bin(const LoadReport& r) {
  std::string pb;
  auto dbl = [](std::string& out, int field, double v) {
    out.push_back(static_cast<char>(field << 3 | 1));
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
  };
  auto entry = [&](int field, std::string_view key, const std::optional<double>& v) {
    if (!v) return;
    std::string e;
    e.push_back(static_cast<char>(1 << 3 | 2));
    e.push_back(static_cast<char>(key.size()));
    e += key;
    dbl(e, 2, *v);
    pb.push_back(static_cast<char>(field << 3 | 2));
    pb.push_back(static_cast<char>(e.size()));
    pb += e;
  };
  if (r.cpu_utilization) dbl(pb, 1, *r.cpu_utilization);
  if (r.mem_utilization) dbl(pb, 2, *r.mem_utilization);
  if (r.application_utilization) dbl(pb, 9, *r.application_utilization);
  entry(8, "kv", r.selected_utilization);
  entry(4, "cpu", r.cost);
  static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : pb) {
    acc = acc << 8 | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      s.push_back(kB64[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) s.push_back(kB64[(acc << (6 - bits)) & 63]);
  return s;
}

struct Form {
  std::string_view prefix;  ///< what the header value starts with
  std::string (*write)(const LoadReport&);
};

constexpr Form kForms[] = {
    {"TEXT ", write_text},
    {"JSON ", write_json},
    {"BIN ", write_bin},
};
constexpr std::size_t kFormCount = sizeof kForms / sizeof kForms[0];

bool same(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || *a == *b);
}
bool same(const LoadReport& a, const LoadReport& b) {
  return same(a.cpu_utilization, b.cpu_utilization) && same(a.mem_utilization, b.mem_utilization) &&
         same(a.application_utilization, b.application_utilization) &&
         same(a.selected_utilization, b.selected_utilization) && same(a.cost, b.cost) && a.unknown == b.unknown &&
         a.malformed == b.malformed;
}

void check_value(const std::optional<double>& v, std::string_view what, std::string_view input) {
  if (!v) return;
  FUZZ_CHECK(std::isfinite(*v) && !(*v < 0), "%.*s = %g from '%.*s'", int(what.size()), what.data(), *v,
             int(input.size()), input.data());
}

// A decimal as ORCA writers emit it: [-]digits[.digits][(e|E)[+|-]digits]
// (digits on either side of the point). Returns the value, or nullopt.
std::optional<double> ref_number(std::string_view s) {
  s = trim(s);
  std::size_t i = 0, mant = 0;
  if (i < s.size() && s[i] == '-') ++i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++mant;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++mant;
  }
  if (mant == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exp = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++exp;
    if (exp == 0) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  std::string z(s);
  errno = 0;
  double d = std::strtod(z.c_str(), nullptr);
  // Beyond a double (to infinity, or a nonzero value rounding to zero): malformed.
  if (errno == ERANGE && (std::isinf(d) || d == 0)) return std::nullopt;
  return d;
}

/// The TEXT form as a reference reader sees it: comma-separated key=value,
/// later keys win; a token without '=', or a value that is not a finite
/// decimal >= 0, is a malformed metric; a key outside the ORCA schema is an
/// unknown one; both are ignored and counted, and the rest is used.
LoadReport ref_text(std::string_view body) {
  LoadReport r;
  auto count = [](std::uint16_t& n) {
    if (n < UINT16_MAX) ++n;
  };
  for_each_token(body, [&](std::string_view tok) {
    auto eq = tok.find('=');
    if (eq == std::string_view::npos) {
      count(r.malformed);
      return;
    }
    auto key = trim(tok.substr(0, eq));
    std::optional<double>* slot = nullptr;
    bool known = true;
    if (key == "cpu_utilization" || key == "cpuUtilization") slot = &r.cpu_utilization;
    else if (key == "mem_utilization" || key == "memUtilization") slot = &r.mem_utilization;
    else if (key == "application_utilization" || key == "applicationUtilization") slot = &r.application_utilization;
    else if (key == "request_cost.cpu" || key == "requestCost.cpu") slot = &r.cost;
    else if (key == "named_metrics.kv" || key == "namedMetrics.kv") slot = &r.selected_utilization;
    else if (key == "rps" || key == "rps_fractional" || key == "rpsFractional" || key == "eps") known = true;
    else {
      known = false;
      for (std::string_view p : {"request_cost.", "requestCost.", "utilization.", "named_metrics.", "namedMetrics."})
        known = known || (key.size() > p.size() && key.substr(0, p.size()) == p);
    }
    if (!known) {
      count(r.unknown);
      return;
    }
    auto v = ref_number(tok.substr(eq + 1));
    if (!v || *v < 0 || !std::isfinite(*v)) {
      count(r.malformed);
      return;
    }
    if (slot) *slot = *v;
  });
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t pick = data[0] % (kFormCount + 1);
  const std::string_view body = levee::fuzz::as_view(data + 1, size - 1);
  std::string value;
  if (pick < kFormCount) value.append(kForms[pick].prefix);
  value.append(body);

  LoadReport sentinel;
  sentinel.cpu_utilization = 123.25;
  sentinel.application_utilization = 456.5;
  sentinel.cost = 789.75;
  LoadReport out = sentinel;
  const OrcaStatus st = parse_orca(value, out, selection());
  FUZZ_CHECK(st == OrcaStatus::Ok || st == OrcaStatus::Malformed, "status %d", int(st));
  if (st != OrcaStatus::Ok) {
    FUZZ_CHECK(same(out, sentinel), "a report that is not Ok changed the caller's report: '%s'", value.c_str());
  } else {
    check_value(out.cpu_utilization, "cpu_utilization", value);
    check_value(out.mem_utilization, "mem_utilization", value);
    check_value(out.application_utilization, "application_utilization", value);
    check_value(out.selected_utilization, "named_metrics.kv", value);
    check_value(out.cost, "request_cost.cpu", value);
    LoadReport clean = out;
    clean.unknown = clean.malformed = 0;
    for (const Form& f : kForms) {
      std::string again(f.prefix);
      again += f.write(clean);
      LoadReport back;
      FUZZ_CHECK(parse_orca(again, back, selection()) == OrcaStatus::Ok && same(back, clean),
                 "'%s' does not read back as '%s' in form %.*s", value.c_str(), again.c_str(),
                 int(f.prefix.size()), f.prefix.data());
    }
    // The -bin header is the BIN form's body alone.
    LoadReport bin;
    FUZZ_CHECK(parse_orca_bin(write_bin(clean), bin, selection()) == OrcaStatus::Ok && same(bin, clean),
               "'%s' does not read back from endpoint-load-metrics-bin", value.c_str());
  }
  if (pick == 0) {  // TEXT: compare with the reference reader
    const LoadReport want = ref_text(body);
    FUZZ_CHECK(st == OrcaStatus::Ok, "TEXT '%s' is always readable, got status %d", value.c_str(), int(st));
    FUZZ_CHECK(same(out, want), "TEXT '%s': values or counts differ from the reference", value.c_str());
  }
  // The -bin reader on any bytes: never a crash; an Ok report holds only valid numbers.
  LoadReport raw = sentinel;
  if (parse_orca_bin(body, raw, selection()) == OrcaStatus::Ok) {
    check_value(raw.cpu_utilization, "cpu_utilization", body);
    check_value(raw.selected_utilization, "named_metrics.kv", body);
    check_value(raw.cost, "request_cost.cpu", body);
  } else {
    FUZZ_CHECK(same(raw, sentinel), "a -bin report that is not Ok changed the caller's report");
  }
  return 0;
}
