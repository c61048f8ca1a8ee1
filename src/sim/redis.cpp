#include "sim/redis.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace levee::sim {

namespace {

using core::RedisCommand;
using core::RedisReply;

RedisReply wrongtype() { return RedisReply::error_of("WRONGTYPE Operation against a key holding the wrong kind of value"); }
RedisReply not_integer() { return RedisReply::error_of("ERR value is not an integer or out of range"); }
RedisReply not_float() { return RedisReply::error_of("ERR value is not a valid float"); }
RedisReply syntax() { return RedisReply::error_of("ERR syntax error"); }

bool parse_int(const std::string& s, std::int64_t& out) noexcept {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && !s.empty();
}

// Redis's float syntax for scores and increments: a number, or inf with a sign.
bool parse_float(const std::string& s, double& out) noexcept {
  std::string l;
  for (char c : s) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (l == "inf" || l == "+inf") {
    out = INFINITY;
    return true;
  }
  if (l == "-inf") {
    out = -INFINITY;
    return true;
  }
  const char* b = s.data();
  if (!s.empty() && *b == '+') ++b;
  auto r = std::from_chars(b, s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && b != s.data() + s.size() && !std::isnan(out);
}

std::string fmt(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // the shortest form that reads back exactly
  return std::string(buf, r.ptr);
}

// A ZREMRANGEBYSCORE bound: "(" makes it exclusive.
bool parse_bound(const std::string& s, double& v, bool& exclusive) noexcept {
  exclusive = !s.empty() && s[0] == '(';
  return parse_float(exclusive ? s.substr(1) : s, v);
}

}  // namespace

const RedisModel::Outage* RedisModel::outage(TimePoint t) const noexcept {
  for (const auto& o : outages_)
    if (t >= o.from && t < o.to) return &o;
  return nullptr;
}

std::uint32_t RedisModel::generation(TimePoint t) const noexcept {
  std::uint32_t g = 0;
  for (const auto& o : outages_) g += o.flush && o.to <= t;
  return g;
}

void RedisModel::catch_up(TimePoint t) {
  // A restart without persistence: whatever was there before is gone when
  // it answers again (nobody could look while it was out).
  flushed_.resize(outages_.size(), false);
  for (std::size_t i = 0; i < outages_.size(); ++i)
    if (outages_[i].flush && !flushed_[i] && outages_[i].to <= t) {
      keys_.clear();
      flushed_[i] = true;
    }
  if (t >= next_sweep_) {
    expire_all(t);
    next_sweep_ = t + std::chrono::seconds(1);
  }
}

void RedisModel::expire_all(TimePoint t) {
  for (auto it = keys_.begin(); it != keys_.end();)
    it = it->second.expires <= t ? keys_.erase(it) : std::next(it);
}

std::size_t RedisModel::keys(TimePoint t) {
  catch_up(t);
  expire_all(t);
  return keys_.size();
}

RedisModel::Value* RedisModel::find(TimePoint t, const std::string& key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return nullptr;
  if (it->second.expires <= t) {  // expired keys are gone when looked at, as in Redis
    keys_.erase(it);
    return nullptr;
  }
  return &it->second;
}

RedisModel::Value* RedisModel::find_or_make(TimePoint t, const std::string& key, Kind k, RedisReply& err) {
  Value* v = find(t, key);
  if (v == nullptr) {
    v = &keys_[key];
    v->kind = k;
    return v;
  }
  if (v->kind != k) {
    err = wrongtype();
    return nullptr;
  }
  return v;
}

void RedisModel::exec(TimePoint t, const std::vector<RedisCommand>& cmds, std::vector<RedisReply>& out) {
  ++pipelines_;
  out.clear();
  out.reserve(cmds.size());
  for (const auto& c : cmds) out.push_back(exec_one(t, c));
}

RedisReply RedisModel::exec_one(TimePoint t, const RedisCommand& c) {
  catch_up(t);
  ++commands_;
  if (c.empty()) return RedisReply::error_of("ERR empty command");
  // Command names are case-insensitive; the core sends them in capitals,
  // so a copy is made only for other spellings.
  std::string upper;
  const bool caps = std::none_of(c[0].begin(), c[0].end(), [](char ch) { return std::islower(static_cast<unsigned char>(ch)); });
  if (!caps) {
    upper = c[0];
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  const std::string& op = caps ? c[0] : upper;
  const std::size_t n = c.size();
  auto arity = [&] {
    std::string lower = op;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return RedisReply::error_of("ERR wrong number of arguments for '" + lower + "' command");
  };
  RedisReply err;

  if (op == "SET") {  // SET key value [NX|XX] [PX ms|EX s]
    if (n < 3) return arity();
    bool nx = false, xx = false;
    std::int64_t ttl_ms = 0;
    for (std::size_t i = 3; i < n; ++i) {
      std::string o = c[i];
      for (auto& ch : o) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (o == "NX") nx = true;
      else if (o == "XX") xx = true;
      else if ((o == "PX" || o == "EX") && i + 1 < n) {
        std::int64_t v = 0;
        if (!parse_int(c[++i], v)) return not_integer();
        if (v <= 0) return RedisReply::error_of("ERR invalid expire time in 'set' command");
        ttl_ms = o == "EX" ? v * 1000 : v;
      } else {
        return syntax();
      }
    }
    if (nx && xx) return syntax();
    const bool exists = find(t, c[1]) != nullptr;
    if ((nx && exists) || (xx && !exists)) return RedisReply::nil();
    Value v;  // SET replaces a key of any type, and its expiry
    v.kind = Kind::String;
    v.str = c[2];
    if (ttl_ms > 0) v.expires = t + std::chrono::milliseconds(ttl_ms);
    keys_[c[1]] = std::move(v);
    return RedisReply::status_of("OK");
  }
  if (op == "GET") {
    if (n != 2) return arity();
    Value* v = find(t, c[1]);
    if (v == nullptr) return RedisReply::nil();
    if (v->kind != Kind::String) return wrongtype();
    return RedisReply::string_of(v->str);
  }
  if (op == "PEXPIRE" || op == "EXPIRE") {
    if (n != 3) return arity();
    std::int64_t v = 0;
    if (!parse_int(c[2], v)) return not_integer();
    Value* k = find(t, c[1]);
    if (k == nullptr) return RedisReply::integer_of(0);
    const std::int64_t ms = op == "EXPIRE" ? v * 1000 : v;
    if (ms <= 0) keys_.erase(c[1]);  // an expiry in the past deletes the key
    else k->expires = t + std::chrono::milliseconds(ms);
    return RedisReply::integer_of(1);
  }
  if (op == "DEL") {
    if (n < 2) return arity();
    std::int64_t gone = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (find(t, c[i]) != nullptr) gone += static_cast<std::int64_t>(keys_.erase(c[i]));
    return RedisReply::integer_of(gone);
  }
  if (op == "HINCRBYFLOAT") {
    if (n != 4) return arity();
    double incr = 0;
    if (!parse_float(c[3], incr) || std::isinf(incr)) return not_float();
    Value* v = find_or_make(t, c[1], Kind::Hash, err);
    if (v == nullptr) return err;
    double cur = 0;
    auto f = v->hash.find(c[2]);
    if (f != v->hash.end() && (!parse_float(f->second, cur) || std::isinf(cur)))
      return RedisReply::error_of("ERR hash value is not a float");
    const double sum = cur + incr;
    if (!std::isfinite(sum)) return RedisReply::error_of("ERR increment would produce NaN or Infinity");
    std::string s = fmt(sum);
    v->hash[c[2]] = s;
    return RedisReply::string_of(std::move(s));
  }
  if (op == "HSETNX") {
    if (n != 4) return arity();
    Value* v = find_or_make(t, c[1], Kind::Hash, err);
    if (v == nullptr) return err;
    return RedisReply::integer_of(v->hash.emplace(c[2], c[3]).second ? 1 : 0);
  }
  if (op == "HGETALL") {
    if (n != 2) return arity();
    RedisReply r;
    r.type = RedisReply::Type::Array;
    Value* v = find(t, c[1]);
    if (v == nullptr) return r;
    if (v->kind != Kind::Hash) return wrongtype();
    r.elements.reserve(2 * v->hash.size());
    for (const auto& [k, x] : v->hash) {
      r.elements.push_back(RedisReply::string_of(k));
      r.elements.push_back(RedisReply::string_of(x));  // the string it holds, as Redis keeps it
    }
    return r;
  }
  if (op == "ZADD") {  // ZADD key score member [score member ...]
    if (n < 4 || (n - 2) % 2 != 0) return n < 4 ? arity() : syntax();
    for (std::size_t i = 2; i < n; i += 2) {
      double s = 0;
      if (!parse_float(c[i], s)) return not_float();
    }
    Value* v = find_or_make(t, c[1], Kind::ZSet, err);
    if (v == nullptr) return err;
    std::int64_t added = 0;
    for (std::size_t i = 2; i < n; i += 2) {
      double s = 0;
      parse_float(c[i], s);
      added += v->zset.count(c[i + 1]) == 0;
      v->zset[c[i + 1]] = s;
    }
    return RedisReply::integer_of(added);
  }
  if (op == "ZREMRANGEBYSCORE") {
    if (n != 4) return arity();
    double lo = 0, hi = 0;
    bool lo_ex = false, hi_ex = false;
    if (!parse_bound(c[2], lo, lo_ex) || !parse_bound(c[3], hi, hi_ex))
      return RedisReply::error_of("ERR min or max is not a float");
    Value* v = find(t, c[1]);
    if (v == nullptr) return RedisReply::integer_of(0);
    if (v->kind != Kind::ZSet) return wrongtype();
    std::int64_t gone = 0;
    for (auto it = v->zset.begin(); it != v->zset.end();) {
      const double s = it->second;
      const bool in = (lo_ex ? s > lo : s >= lo) && (hi_ex ? s < hi : s <= hi);
      if (in) {
        it = v->zset.erase(it);
        ++gone;
      } else {
        ++it;
      }
    }
    if (v->zset.empty()) keys_.erase(c[1]);  // Redis drops an emptied set
    return RedisReply::integer_of(gone);
  }
  if (op == "ZCARD") {
    if (n != 2) return arity();
    Value* v = find(t, c[1]);
    if (v == nullptr) return RedisReply::integer_of(0);
    if (v->kind != Kind::ZSet) return wrongtype();
    return RedisReply::integer_of(static_cast<std::int64_t>(v->zset.size()));
  }
  if (op == "ZREM") {
    if (n < 3) return arity();
    Value* v = find(t, c[1]);
    if (v == nullptr) return RedisReply::integer_of(0);
    if (v->kind != Kind::ZSet) return wrongtype();
    std::int64_t gone = 0;
    for (std::size_t i = 2; i < n; ++i) gone += static_cast<std::int64_t>(v->zset.erase(c[i]));
    if (v->zset.empty()) keys_.erase(c[1]);
    return RedisReply::integer_of(gone);
  }
  return RedisReply::error_of("ERR unknown command '" + c[0] + "'");
}

}  // namespace levee::sim
