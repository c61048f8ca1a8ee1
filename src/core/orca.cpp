#include "core/orca.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>

#include "core/text.hpp"

namespace levee::core {

namespace {

using Kind = OrcaMetric::Kind;

/// A metric's name in the TEXT form (snake case) or in proto3 JSON (lower
/// camel case): its kind, and for a map entry the key after the dot.
bool classify(std::string_view key, Kind& kind, std::string_view& name) noexcept {
  struct Scalar {
    std::string_view snake, camel;
    Kind kind;
  };
  static constexpr Scalar kScalars[] = {
      {"cpu_utilization", "cpuUtilization", Kind::Cpu},
      {"mem_utilization", "memUtilization", Kind::Mem},
      {"application_utilization", "applicationUtilization", Kind::Application},
      {"rps_fractional", "rpsFractional", Kind::RpsFractional},
      {"eps", "eps", Kind::Eps},
      {"rps", "rps", Kind::None},  // deprecated (an integer): known, not used
  };
  for (const auto& s : kScalars) {
    if (key == s.snake || key == s.camel) {
      kind = s.kind;
      name = {};
      return true;
    }
  }
  struct Map {
    std::string_view snake, camel;
    Kind kind;
  };
  static constexpr Map kMaps[] = {
      {"request_cost.", "requestCost.", Kind::RequestCost},
      {"utilization.", "utilization.", Kind::Utilization},
      {"named_metrics.", "namedMetrics.", Kind::Named},
  };
  for (const auto& m : kMaps) {
    for (std::string_view prefix : {m.snake, m.camel}) {
      if (key.size() > prefix.size() && key.substr(0, prefix.size()) == prefix) {
        kind = m.kind;
        name = key.substr(prefix.size());
        return true;
      }
    }
  }
  return false;
}

/// The map a JSON object member names ("request_cost": {...}).
bool classify_map(std::string_view key, Kind& kind) noexcept {
  if (key == "request_cost" || key == "requestCost") kind = Kind::RequestCost;
  else if (key == "utilization") kind = Kind::Utilization;
  else if (key == "named_metrics" || key == "namedMetrics") kind = Kind::Named;
  else return false;
  return true;
}

/// Collects the metrics a report carries into a LoadReport.
class Picker {
 public:
  Picker(LoadReport& out, const OrcaSelection& sel) noexcept : out_(out), sel_(sel) {}

  void put(Kind kind, std::string_view name, double v) noexcept {
    if (!std::isfinite(v) || v < 0) {
      malformed();
      return;
    }
    switch (kind) {
      case Kind::Cpu: out_.cpu_utilization = v; break;
      case Kind::Mem: out_.mem_utilization = v; break;
      case Kind::Application: out_.application_utilization = v; break;
      default: break;
    }
    if (matches(sel_.utilization, kind, name)) out_.selected_utilization = v;
    if (matches(sel_.cost, kind, name)) out_.cost = v;
  }
  void unknown() noexcept {
    if (out_.unknown < UINT16_MAX) ++out_.unknown;
  }
  void malformed() noexcept {
    if (out_.malformed < UINT16_MAX) ++out_.malformed;
  }

 private:
  static bool matches(const OrcaMetric& m, Kind kind, std::string_view name) noexcept {
    return m.kind != Kind::None && m.kind == kind && m.name == name;
  }
  LoadReport& out_;
  const OrcaSelection& sel_;
};

/// A finite number in from_chars' grammar (JSON's, plus what TEXT writers
/// such as Python's repr produce: "2.0", "1e-05", "inf", "nan").
std::optional<double> number(std::string_view s) noexcept {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double d = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec == std::errc::result_out_of_range) return std::nullopt;
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return d;
}

// --- TEXT: comma-separated key=value ------------------------------------------

OrcaStatus parse_text(std::string_view body, Picker& pick) noexcept {
  for_each_token(body, [&](std::string_view tok) {
    const auto eq = tok.find('=');
    if (eq == std::string_view::npos) {
      pick.malformed();
      return;
    }
    Kind kind;
    std::string_view name;
    if (!classify(trim(tok.substr(0, eq)), kind, name)) {
      pick.unknown();
      return;
    }
    const auto v = number(tok.substr(eq + 1));
    if (!v) pick.malformed();
    else pick.put(kind, name, *v);  // a known unused metric (rps) is still checked
  });
  return OrcaStatus::Ok;
}

// --- JSON: proto3 JSON of the message -------------------------------------------

// A small reader: enough to walk an OrcaLoadReport. Keys with escapes are
// compared raw (no metric name levee selects has one).
class Json {
 public:
  Json(std::string_view s, Picker& pick) noexcept : s_(s), pick_(pick) {}

  bool parse() noexcept {
    if (!object(Level::Top, Kind::None, 0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  enum class Level : std::uint8_t { Top, Map, Skip };

  void ws() noexcept {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) noexcept {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool string(std::string_view& out) noexcept {
    if (!eat('"')) return false;
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      ++i_;
    }
    if (i_ >= s_.size()) return false;
    out = s_.substr(start, i_ - start);
    ++i_;
    return true;
  }
  bool object(Level level, Kind map, int depth) noexcept {
    if (depth > 8 || !eat('{')) return false;
    if (eat('}')) return true;
    for (;;) {
      std::string_view key;
      if (!string(key) || !eat(':')) return false;
      if (!member(level, map, key, depth)) return false;
      if (eat(',')) continue;
      return eat('}');
    }
  }
  bool member(Level level, Kind map, std::string_view key, int depth) noexcept {
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') {
      Kind inner;
      if (level == Level::Top && classify_map(key, inner)) return object(Level::Map, inner, depth + 1);
      if (level != Level::Skip) pick_.unknown();
      return object(Level::Skip, Kind::None, depth + 1);
    }
    if (c == '[') {
      if (level != Level::Skip) pick_.unknown();
      return array(depth + 1);
    }
    if (c == '"') {
      std::string_view ignored;
      if (!string(ignored)) return false;
      // proto3 JSON may quote a double ("NaN", "0.5"): not a value levee
      // reads, but a well-formed report.
      if (level != Level::Skip) {
        Kind kind;
        std::string_view name;
        if (level == Level::Map || classify(key, kind, name)) pick_.malformed();
        else pick_.unknown();
      }
      return true;
    }
    std::string_view raw;
    if (!literal(raw)) return false;
    if (raw == "true" || raw == "false" || raw == "null") {
      if (level != Level::Skip) pick_.unknown();
      return true;
    }
    const auto v = number(raw);
    if (!v) return false;  // not JSON
    if (level == Level::Skip) return true;
    if (level == Level::Map) {
      pick_.put(map, key, *v);
      return true;
    }
    Kind kind;
    std::string_view name;
    if (!classify(key, kind, name) || !name.empty()) pick_.unknown();  // "request_cost.cpu" is no JSON key
    else pick_.put(kind, {}, *v);
    return true;
  }
  bool literal(std::string_view& raw) noexcept {
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']') ++i_;
    raw = trim(s_.substr(start, i_ - start));
    return !raw.empty();
  }
  bool array(int depth) noexcept {
    if (depth > 8 || !eat('[')) return false;
    if (eat(']')) return true;
    for (;;) {
      ws();
      if (i_ >= s_.size()) return false;
      bool ok;
      if (s_[i_] == '{') ok = object(Level::Skip, Kind::None, depth + 1);
      else if (s_[i_] == '[') ok = array(depth + 1);
      else if (s_[i_] == '"') {
        std::string_view ignored;
        ok = string(ignored);
      } else {
        std::string_view raw;
        ok = literal(raw) && (raw == "true" || raw == "false" || raw == "null" || number(raw));
      }
      if (!ok) return false;
      if (eat(',')) continue;
      return eat(']');
    }
  }

  std::string_view s_;
  Picker& pick_;
  std::size_t i_ = 0;
};

// --- BIN: base64 of the protobuf --------------------------------------------------

/// Decodes standard base64, padded or not, into out; returns the length,
/// or -1 for a character outside the alphabet or a report longer than out.
template <std::size_t N>
int decode_base64(std::string_view s, std::array<unsigned char, N>& out) noexcept {
  s = trim(s);
  while (!s.empty() && s.back() == '=') s.remove_suffix(1);
  std::size_t n = 0;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char ch : s) {
    int v;
    if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
    else if (ch == '+' || ch == '-') v = 62;  // '-' and '_': the URL-safe alphabet
    else if (ch == '/' || ch == '_') v = 63;
    else return -1;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (n == N) return -1;
      out[n++] = static_cast<unsigned char>(acc >> bits);
    }
  }
  if (bits >= 6) return -1;  // one character alone cannot end a base64 string
  return static_cast<int>(n);
}

class Protobuf {
 public:
  Protobuf(const unsigned char* p, std::size_t n) noexcept : p_(p), end_(p + n) {}

  bool done() const noexcept { return p_ == end_; }

  bool varint(std::uint64_t& v) noexcept {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const unsigned char b = *p_++;
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool fixed64(double& d) noexcept {
    if (end_ - p_ < 8) return false;
    std::uint64_t bits = 0;
    for (int i = 7; i >= 0; --i) bits = (bits << 8) | p_[i];  // little-endian on the wire
    std::memcpy(&d, &bits, sizeof d);
    p_ += 8;
    return true;
  }
  bool bytes(Protobuf& inner) noexcept {
    std::uint64_t len;
    if (!varint(len) || len > static_cast<std::uint64_t>(end_ - p_)) return false;
    inner = Protobuf(p_, static_cast<std::size_t>(len));
    p_ += len;
    return true;
  }
  /// Skips a field of wire type wt.
  bool skip(std::uint64_t wt) noexcept {
    std::uint64_t v;
    Protobuf ignored(nullptr, 0);
    switch (wt) {
      case 0: return varint(v);
      case 1: return advance(8);
      case 2: return bytes(ignored);
      case 5: return advance(4);
      default: return false;  // groups (3, 4) are not in proto3; 6, 7 do not exist
    }
  }
  std::string_view view() const noexcept { return {reinterpret_cast<const char*>(p_), static_cast<std::size_t>(end_ - p_)}; }

 private:
  bool advance(std::size_t n) noexcept {
    if (static_cast<std::size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }
  const unsigned char* p_;
  const unsigned char* end_;
};

/// A map<string, double> entry: key = 1, value = 2, either order, either
/// absent (proto3 defaults: "" and 0).
bool map_entry(Protobuf entry, Kind kind, Picker& pick) noexcept {
  std::string_view key;
  double value = 0;
  bool value_ok = true;
  while (!entry.done()) {
    std::uint64_t tag;
    if (!entry.varint(tag)) return false;
    const std::uint64_t field = tag >> 3, wt = tag & 7;
    if (field == 1 && wt == 2) {
      Protobuf k(nullptr, 0);
      if (!entry.bytes(k)) return false;
      key = k.view();
    } else if (field == 2 && wt == 1) {
      if (!entry.fixed64(value)) return false;
    } else {
      value_ok = value_ok && field != 2;
      if (!entry.skip(wt)) return false;
    }
  }
  if (value_ok) pick.put(kind, key, value);
  else pick.malformed();
  return true;
}

OrcaStatus parse_protobuf(std::string_view base64, Picker& pick) noexcept {
  std::array<unsigned char, 6144> buf;
  const int n = decode_base64(base64, buf);
  if (n < 0) return OrcaStatus::Malformed;
  Protobuf pb(buf.data(), static_cast<std::size_t>(n));
  while (!pb.done()) {
    std::uint64_t tag;
    if (!pb.varint(tag)) return OrcaStatus::Malformed;
    const std::uint64_t field = tag >> 3, wt = tag & 7;
    Kind scalar = Kind::None, map = Kind::None;
    switch (field) {
      case 1: scalar = Kind::Cpu; break;
      case 2: scalar = Kind::Mem; break;
      case 6: scalar = Kind::RpsFractional; break;
      case 7: scalar = Kind::Eps; break;
      case 9: scalar = Kind::Application; break;
      case 4: map = Kind::RequestCost; break;
      case 5: map = Kind::Utilization; break;
      case 8: map = Kind::Named; break;
      case 3: break;  // rps, deprecated
      default: pick.unknown(); break;
    }
    if (scalar != Kind::None && wt == 1) {
      double d;
      if (!pb.fixed64(d)) return OrcaStatus::Malformed;
      pick.put(scalar, {}, d);
    } else if (map != Kind::None && wt == 2) {
      Protobuf entry(nullptr, 0);
      if (!pb.bytes(entry) || !map_entry(entry, map, pick)) return OrcaStatus::Malformed;
    } else {
      if (scalar != Kind::None || map != Kind::None) pick.malformed();  // a known field of the wrong type
      if (!pb.skip(wt)) return OrcaStatus::Malformed;
    }
  }
  return OrcaStatus::Ok;
}

}  // namespace

std::optional<OrcaMetric> parse_orca_metric(std::string_view s) {
  Kind kind;
  std::string_view name;
  if (!classify(s, kind, name) || kind == Kind::None) return std::nullopt;
  return OrcaMetric{kind, std::string(name)};
}

OrcaStatus parse_orca(std::string_view v, LoadReport& out, const OrcaSelection& sel) noexcept {
  v = trim(v);
  LoadReport r;
  Picker pick(r, sel);
  auto body_after = [&](std::string_view prefix, std::string_view& body) {
    if (v.size() < prefix.size() || !iequals(v.substr(0, prefix.size()), prefix)) return false;
    if (v.size() > prefix.size() && v[prefix.size()] != ' ' && v[prefix.size()] != '\t') return false;
    body = trim(v.substr(prefix.size()));
    return true;
  };
  std::string_view body;
  OrcaStatus st = OrcaStatus::Malformed;
  if (body_after("TEXT", body)) st = parse_text(body, pick);
  else if (body_after("JSON", body)) st = Json(body, pick).parse() ? OrcaStatus::Ok : OrcaStatus::Malformed;
  else if (body_after("BIN", body)) st = parse_protobuf(body, pick);
  if (st == OrcaStatus::Ok) out = r;
  return st;
}

OrcaStatus parse_orca_bin(std::string_view base64, LoadReport& out, const OrcaSelection& sel) noexcept {
  LoadReport r;
  Picker pick(r, sel);
  const OrcaStatus st = parse_protobuf(base64, pick);
  if (st == OrcaStatus::Ok) out = r;
  return st;
}

}  // namespace levee::core
