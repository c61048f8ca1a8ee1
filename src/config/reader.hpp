// The schema walker the configuration sections share: a context that
// collects every error with its place, a mapping that reports the keys
// nobody asked for, and the scalar readers (each reports a wrong type or
// an out-of-range value with the key's path). Internal to src/config; each
// section parser (loader.cpp, tls.cpp) reads its keys with these.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "core/text.hpp"

namespace levee::config::detail {

struct Ctx {
  std::string file;
  std::vector<Error> errors;

  void error(const YAML::Node& n, const std::string& path, std::string msg) {
    Error e{file, 0, 0, path, std::move(msg)};
    if (n.IsDefined()) {
      auto m = n.Mark();
      if (m.line >= 0) {
        e.line = m.line + 1;
        e.column = m.column + 1;
      }
    }
    errors.push_back(std::move(e));
  }
  void error_at(const YAML::Mark& m, const std::string& path, std::string msg) {
    errors.push_back(Error{file, m.line + 1, m.column + 1, path, std::move(msg)});
  }
};

std::string join(const std::string& path, std::string_view key);
std::string at(const std::string& path, std::size_t i);

/// A mapping being read: remembers which keys the schema asked for.
class Map {
 public:
  Map(Ctx& ctx, const YAML::Node& node, std::string path)
      : ctx_(ctx), node_(node), path_(std::move(path)) {
    if (!node_.IsDefined() || node_.IsNull()) return;
    if (!node_.IsMap()) {
      ctx_.error(node_, path_, "must be a mapping");
      return;
    }
    valid_ = true;
    std::set<std::string> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      auto key = it->first.Scalar();
      if (!seen.insert(key).second)
        ctx_.error_at(it->first.Mark(), join(path_, key), "duplicate key");
    }
  }
  Map(const Map&) = delete;
  ~Map() { finish(); }

  bool valid() const { return valid_; }
  const std::string& path() const { return path_; }

  YAML::Node take(std::string_view key) {
    known_.emplace_back(key);
    if (!valid_) return YAML::Node(YAML::NodeType::Undefined);
    for (auto it = node_.begin(); it != node_.end(); ++it)
      if (it->first.Scalar() == key) return it->second;
    return YAML::Node(YAML::NodeType::Undefined);
  }
  bool has(std::string_view key) const {
    if (!valid_) return false;
    for (auto it = node_.begin(); it != node_.end(); ++it)
      if (it->first.Scalar() == key) return true;
    return false;
  }
  std::string sub(std::string_view key) const { return join(path_, key); }
  Ctx& ctx() { return ctx_; }

  /// Reports keys the schema never asked for.
  void finish();

 private:
  Ctx& ctx_;
  YAML::Node node_;
  std::string path_;
  bool valid_ = false;
  bool finished_ = false;
  std::vector<std::string> known_;
};

// ---- scalars --------------------------------------------------------------

bool scalar(Ctx& ctx, const YAML::Node& n, const std::string& path, std::string_view what);
void read(Ctx& ctx, const YAML::Node& n, const std::string& path, std::string& out);
void read_bool(Ctx& ctx, const YAML::Node& n, const std::string& path, bool& out);
template <typename T>
void read_uint(Ctx& ctx, const YAML::Node& n, const std::string& path, T& out, std::uint64_t lo,
               std::uint64_t hi) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "an integer")) return;
  auto v = core::parse_u64(n.Scalar());
  if (!v) {
    ctx.error(n, path, "must be an integer, not '" + n.Scalar() + "'");
    return;
  }
  if (*v < lo || *v > hi) {
    ctx.error(n, path, "must be " + std::to_string(lo) + ".." + std::to_string(hi));
    return;
  }
  out = static_cast<T>(*v);
}

void read_double(Ctx& ctx, const YAML::Node& n, const std::string& path, double& out, double lo, double hi);
void read_duration(Ctx& ctx, const YAML::Node& n, const std::string& path, Duration& out,
                   Duration lo = Duration::zero(), Duration hi = std::chrono::hours(24 * 365));
void read_criticality(Ctx& ctx, const YAML::Node& n, const std::string& path, Criticality& out);

}  // namespace levee::config::detail
