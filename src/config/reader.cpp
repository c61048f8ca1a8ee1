#include "config/reader.hpp"

#include <cmath>
#include <sstream>

namespace levee::config::detail {

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string at(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void Map::finish() {
  if (!valid_ || finished_) return;
  finished_ = true;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    auto key = it->first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string msg = "unknown key";
    std::size_t best = 3;
    std::string guess;
    for (const auto& k : known_) {
      auto d = edit_distance(key, k);
      if (d < best) {
        best = d;
        guess = k;
      }
    }
    if (!guess.empty()) msg += " (did you mean '" + guess + "'?)";
    ctx_.error_at(it->first.Mark(), join(path_, key), msg);
  }
}


bool scalar(Ctx& ctx, const YAML::Node& n, const std::string& path, std::string_view what) {
  if (!n.IsScalar()) {
    ctx.error(n, path, std::string("must be ") + std::string(what));
    return false;
  }
  return true;
}

void read(Ctx& ctx, const YAML::Node& n, const std::string& path, std::string& out) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "a string")) return;
  if (!core::valid_utf8(n.Scalar())) {
    ctx.error(n, path, "must be valid UTF-8");
    return;
  }
  out = n.Scalar();
}

void read_bool(Ctx& ctx, const YAML::Node& n, const std::string& path, bool& out) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "true or false")) return;
  const auto& s = n.Scalar();
  if (s == "true") out = true;
  else if (s == "false") out = false;
  else ctx.error(n, path, "must be true or false, not '" + s + "'");
}

void read_double(Ctx& ctx, const YAML::Node& n, const std::string& path, double& out, double lo,
                 double hi) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "a number")) return;
  const auto& s = n.Scalar();
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || !std::isfinite(v)) {
    ctx.error(n, path, "must be a number, not '" + s + "'");
    return;
  }
  if (v < lo || v > hi) {
    std::ostringstream o;
    o << "must be between " << lo << " and " << hi;
    ctx.error(n, path, o.str());
    return;
  }
  out = v;
}

void read_duration(Ctx& ctx, const YAML::Node& n, const std::string& path, Duration& out, Duration lo,
                   Duration hi) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "a duration like 250ms or 2s")) return;
  auto d = parse_duration(n.Scalar());
  if (!d) {
    ctx.error(n, path, "must be a duration like 250ms or 2s, not '" + n.Scalar() + "'");
    return;
  }
  if (*d < lo || *d > hi) {
    ctx.error(n, path, "is out of range");
    return;
  }
  out = *d;
}

void read_criticality(Ctx& ctx, const YAML::Node& n, const std::string& path, Criticality& out) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "a criticality")) return;
  auto c = core::parse_criticality(n.Scalar());
  if (!c) {
    ctx.error(n, path,
              "must be CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or SHEDDABLE, not '" + n.Scalar() + "'");
    return;
  }
  out = *c;
}

}  // namespace levee::config::detail
