#include "core/headers.hpp"

#include <charconv>
#include <cmath>

#include "core/text.hpp"

namespace levee::core {

std::optional<Duration> parse_grpc_timeout(std::string_view v) noexcept {
  v = trim(v);
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  auto digits = parse_u64(v.substr(0, v.size() - 1));
  if (!digits) return std::nullopt;
  std::int64_t unit_ns;
  switch (v.back()) {
    case 'H': unit_ns = 3600000000000; break;
    case 'M': unit_ns = 60000000000; break;
    case 'S': unit_ns = 1000000000; break;
    case 'm': unit_ns = 1000000; break;
    case 'u': unit_ns = 1000; break;
    case 'n': unit_ns = 1; break;
    default: return std::nullopt;
  }
  // Eight digits of hours (or minutes) do not fit a nanosecond count: test
  // against the cap before multiplying, never after.
  const auto n = static_cast<std::int64_t>(*digits);  // at most 99999999
  if (n > kMaxHeaderTimeout.count() / unit_ns) return kMaxHeaderTimeout;
  return Duration(n * unit_ns);
}

std::size_t format_grpc_timeout(Duration d, char* out) noexcept {
  // The largest unit that keeps the value within 8 digits, rounding down
  // (never promise more time than there is).
  std::int64_t ns = std::max<std::int64_t>(0, d.count());
  struct Unit { std::int64_t ns; char c; };
  constexpr Unit units[] = {{1, 'n'}, {1000, 'u'}, {1000000, 'm'}, {1000000000, 'S'},
                            {60000000000, 'M'}, {3600000000000, 'H'}};
  for (const auto& u : units) {
    std::int64_t v = ns / u.ns;
    if (v <= 99999999) {
      auto [p, ec] = std::to_chars(out, out + 9, v);
      (void)ec;
      *p++ = u.c;
      return static_cast<std::size_t>(p - out);
    }
  }
  out[0] = '0';
  out[1] = 'n';
  return 2;
}

std::optional<Duration> parse_timeout_ms(std::string_view v) noexcept {
  auto n = parse_u64(trim(v));
  if (!n || *n > static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(kMaxHeaderTimeout).count()))
    return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(*n));
}

std::optional<std::uint32_t> parse_attempt(std::string_view v) noexcept {
  auto n = parse_u64(trim(v));
  if (!n || *n > 1000000) return std::nullopt;
  return static_cast<std::uint32_t>(*n);
}

bool pushback_says_no_retry(std::string_view v) noexcept {
  v = trim(v);
  std::int32_t ms = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  return ec != std::errc{} || p != v.data() + v.size() || ms < 0;
}

namespace {

std::optional<double> parse_number(std::string_view s) noexcept {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double d = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc{} || p != s.data() + s.size() || !std::isfinite(d) || d < 0)
    return std::nullopt;
  return d;
}

enum class Key : std::uint8_t { Other, Cpu, App, Cost };

Key classify(std::string_view key) noexcept {
  if (key == "cpu_utilization" || key == "cpuUtilization") return Key::Cpu;
  if (key == "application_utilization" || key == "applicationUtilization") return Key::App;
  if (key == "request_cost.cpu" || key == "requestCost.cpu") return Key::Cost;
  return Key::Other;
}

void assign(LoadReport& out, Key k, double v) noexcept {
  switch (k) {
    case Key::Cpu: out.cpu_utilization = v; break;
    case Key::App: out.application_utilization = v; break;
    case Key::Cost: out.cost_cpu = v; break;
    case Key::Other: break;
  }
}

OrcaStatus parse_text(std::string_view body, LoadReport& out) noexcept {
  bool ok = true;
  for_each_token(body, [&](std::string_view tok) {
    auto eq = tok.find('=');
    if (eq == std::string_view::npos) { ok = false; return; }
    auto key = trim(tok.substr(0, eq));
    Key k = classify(key);
    if (k == Key::Other) return;  // other metrics (mem, named_metrics.*) are not ours
    auto v = parse_number(tok.substr(eq + 1));
    if (!v) { ok = false; return; }
    assign(out, k, *v);
  });
  return ok ? OrcaStatus::Ok : OrcaStatus::Malformed;
}

// A minimal JSON reader: enough to walk an OrcaLoadReport in proto3 JSON.
// Strings with escapes are compared raw (keys we care about have none).
class Json {
 public:
  Json(std::string_view s, LoadReport& out) noexcept : s_(s), out_(out) {}

  bool parse() noexcept {
    ws();
    if (!object("", 0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  void ws() noexcept {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) noexcept {
    ws();
    if (i_ < s_.size() && s_[i_] == c) { ++i_; return true; }
    return false;
  }
  bool string(std::string_view& out) noexcept {
    if (!eat('"')) return false;
    std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      ++i_;
    }
    if (i_ >= s_.size()) return false;
    out = s_.substr(start, i_ - start);
    ++i_;
    return true;
  }
  bool object(std::string_view prefix, int depth) noexcept {
    if (depth > 8 || !eat('{')) return false;
    if (eat('}')) return true;
    for (;;) {
      std::string_view key;
      if (!string(key) || !eat(':')) return false;
      if (!value(prefix, key, depth)) return false;
      if (eat(',')) continue;
      return eat('}');
    }
  }
  bool value(std::string_view prefix, std::string_view key, int depth) noexcept {
    ws();
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') {
      // Only request_cost's members are interesting; others are skipped.
      bool cost = prefix.empty() && (key == "request_cost" || key == "requestCost");
      return object(cost ? std::string_view("request_cost") : std::string_view("-"), depth + 1);
    }
    if (c == '[') return array(depth + 1);
    if (c == '"') {
      std::string_view ignored;
      return string(ignored);
    }
    std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']') ++i_;
    auto raw = trim(s_.substr(start, i_ - start));
    if (raw == "true" || raw == "false" || raw == "null") return true;
    Key k = Key::Other;
    if (prefix.empty()) k = classify(key);
    else if (prefix == "request_cost" && key == "cpu") k = Key::Cost;
    auto v = parse_number(raw);
    if (k == Key::Other) {
      // Other numbers must still be numbers (possibly negative) to be well-formed.
      double d;
      auto [p, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), d);
      return ec == std::errc{} && p == raw.data() + raw.size();
    }
    if (!v) return false;
    assign(out_, k, *v);
    return true;
  }
  bool array(int depth) noexcept {
    if (depth > 8 || !eat('[')) return false;
    if (eat(']')) return true;
    for (;;) {
      if (!value("-", "", depth)) return false;
      if (eat(',')) continue;
      return eat(']');
    }
  }

  std::string_view s_;
  LoadReport& out_;
  std::size_t i_ = 0;
};

}  // namespace

OrcaStatus parse_orca(std::string_view v, LoadReport& out) noexcept {
  v = trim(v);
  LoadReport tmp;
  if (v.size() >= 4 && iequals(v.substr(0, 4), "TEXT")) {
    auto st = parse_text(v.substr(4), tmp);
    if (st == OrcaStatus::Ok) out = tmp;
    return st;
  }
  if (v.size() >= 4 && iequals(v.substr(0, 4), "JSON")) {
    Json j(trim(v.substr(4)), tmp);
    if (!j.parse()) return OrcaStatus::Malformed;
    out = tmp;
    return OrcaStatus::Ok;
  }
  if (v.size() >= 3 && iequals(v.substr(0, 3), "BIN")) return OrcaStatus::Unsupported;
  return OrcaStatus::Malformed;
}

}  // namespace levee::core
