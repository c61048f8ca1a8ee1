// ORCA load reports (`endpoint-load-metrics`) from backends, in every form
// levee reads. The first input byte picks the form (or none: the raw value,
// to fuzz the form dispatch itself); the rest is the report.
//
// Checked:
//   - a report that is not Ok leaves the caller's report untouched (a
//     half-understood report is never used);
//   - an Ok report holds only finite, non-negative numbers;
//   - an Ok report, written out in every form, parses back to itself;
//   - the TEXT form agrees with a reference reader of `k=v, k=v`.
//
// A new form (BIN, base64 protobuf) is one line in kForms plus its writer.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "core/headers.hpp"
#include "core/text.hpp"
#include "fuzz_check.hpp"

using namespace levee::core;

namespace {

void number(std::string& out, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%.17g", v);
  out.append(buf, static_cast<std::size_t>(n));
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
  field("application_utilization", r.application_utilization);
  field("request_cost.cpu", r.cost_cpu);
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
  field("cpu_utilization", r.cpu_utilization);
  field("application_utilization", r.application_utilization);
  if (r.cost_cpu) {
    if (s.size() > 1) s += ',';
    s += "\"request_cost\":{\"cpu\":";
    number(s, *r.cost_cpu);
    s += '}';
  }
  s += '}';
  return s;
}

struct Form {
  std::string_view prefix;  ///< what the header value starts with
  std::string (*write)(const LoadReport&);
};

constexpr Form kForms[] = {
    {"TEXT ", write_text},
    {"JSON ", write_json},
};
constexpr std::size_t kFormCount = sizeof kForms / sizeof kForms[0];

bool same(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || *a == *b);
}
bool same(const LoadReport& a, const LoadReport& b) {
  return same(a.cpu_utilization, b.cpu_utilization) && same(a.application_utilization, b.application_utilization) &&
         same(a.cost_cpu, b.cost_cpu);
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
/// later keys win, keys levee does not use are ignored, a bad value of a
/// used key or a token without '=' makes the report malformed.
std::optional<LoadReport> ref_text(std::string_view body) {
  LoadReport r;
  bool malformed = false;
  for_each_token(body, [&](std::string_view tok) {
    auto eq = tok.find('=');
    if (eq == std::string_view::npos) {
      malformed = true;
      return;
    }
    auto key = trim(tok.substr(0, eq));
    std::optional<double>* slot = nullptr;
    if (key == "cpu_utilization" || key == "cpuUtilization") slot = &r.cpu_utilization;
    else if (key == "application_utilization" || key == "applicationUtilization") slot = &r.application_utilization;
    else if (key == "request_cost.cpu" || key == "requestCost.cpu") slot = &r.cost_cpu;
    if (!slot) return;
    auto v = ref_number(tok.substr(eq + 1));
    if (!v) {
      malformed = true;
      return;
    }
    if (*v < 0 || !std::isfinite(*v)) malformed = true;
    else *slot = *v;
  });
  if (malformed) return std::nullopt;
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
  sentinel.cost_cpu = 789.75;
  LoadReport out = sentinel;
  const OrcaStatus st = parse_orca(value, out);
  FUZZ_CHECK(st == OrcaStatus::Ok || st == OrcaStatus::Malformed || st == OrcaStatus::Unsupported,
             "status %d", int(st));
  if (st != OrcaStatus::Ok) {
    FUZZ_CHECK(same(out, sentinel), "a report that is not Ok changed the caller's report: '%s'", value.c_str());
  } else {
    check_value(out.cpu_utilization, "cpu_utilization", value);
    check_value(out.application_utilization, "application_utilization", value);
    check_value(out.cost_cpu, "request_cost.cpu", value);
    for (const Form& f : kForms) {
      std::string again(f.prefix);
      again += f.write(out);
      LoadReport back;
      FUZZ_CHECK(parse_orca(again, back) == OrcaStatus::Ok && same(back, out),
                 "'%s' does not read back as '%s' in form %.*s", value.c_str(), again.c_str(),
                 int(f.prefix.size()), f.prefix.data());
    }
  }
  if (pick == 0) {  // TEXT: compare with the reference reader
    auto want = ref_text(body);
    FUZZ_CHECK((st == OrcaStatus::Ok) == want.has_value(), "TEXT '%s': status %d, reference %s", value.c_str(),
               int(st), want ? "ok" : "malformed");
    if (want) FUZZ_CHECK(same(out, *want), "TEXT '%s': values differ from the reference", value.c_str());
  }
  return 0;
}
