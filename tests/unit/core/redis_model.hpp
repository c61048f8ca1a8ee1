// An in-memory model of the few Redis commands the fleet quota sync sends,
// with Redis's reply shapes and key expiry on a clock the test sets. For
// core tests (and the simulator): it is not a Redis, only as much of its
// behaviour as the sync depends on.
#pragma once

#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/fleet_quota.hpp"

namespace levee::test {

using core::RedisCommand;
using core::RedisReply;

class RedisModel {
 public:
  std::int64_t now_ms = 0;           ///< the server's clock, for expiry
  std::uint64_t commands = 0;        ///< executed so far

  std::vector<RedisReply> exec(const std::vector<RedisCommand>& cmds) {
    std::vector<RedisReply> out;
    out.reserve(cmds.size());
    for (const auto& c : cmds) out.push_back(one(c));
    return out;
  }
  /// A restart without persistence.
  void flush() { keys_.clear(); }
  /// Puts a string where the sync expects a hash (an operator's mistake).
  void set_string(const std::string& key, const std::string& v) {
    keys_[key] = Value{Kind::String, v, {}, {}, 0};
  }
  bool exists(const std::string& key) {
    expire_old();
    return keys_.count(key) != 0;
  }
  double hash_field(const std::string& key, const std::string& field) {
    expire_old();
    auto it = keys_.find(key);
    if (it == keys_.end()) return 0.0;
    auto f = it->second.hash.find(field);
    return f == it->second.hash.end() ? 0.0 : f->second;
  }

 private:
  enum class Kind { String, Hash, ZSet };
  struct Value {
    Kind kind;
    std::string str;
    std::map<std::string, double> hash;
    std::map<std::string, double> zset;
    std::int64_t expires_at = 0;  ///< 0: never
  };

  static double to_d(const std::string& s) {
    double v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  }
  static std::string fmt(double v) {
    char b[64];
    auto r = std::to_chars(b, b + sizeof b, v);
    return std::string(b, r.ptr);
  }
  void expire_old() {
    for (auto it = keys_.begin(); it != keys_.end();)
      it = (it->second.expires_at != 0 && it->second.expires_at <= now_ms) ? keys_.erase(it) : std::next(it);
  }
  static RedisReply wrongtype() {
    return RedisReply::error_of("WRONGTYPE Operation against a key holding the wrong kind of value");
  }

  RedisReply one(const RedisCommand& c) {
    ++commands;
    expire_old();
    const std::string& op = c[0];
    auto find = [&](const std::string& k) -> Value* {
      auto it = keys_.find(k);
      return it == keys_.end() ? nullptr : &it->second;
    };
    if (op == "SET") {  // SET key value NX PX ttl
      if (find(c[1])) return RedisReply::nil();
      keys_[c[1]] = Value{Kind::String, c[2], {}, {}, now_ms + static_cast<std::int64_t>(to_d(c[5]))};
      return RedisReply::status_of("OK");
    }
    if (op == "GET") {
      Value* v = find(c[1]);
      if (!v) return RedisReply::nil();
      if (v->kind != Kind::String) return wrongtype();
      return RedisReply::string_of(v->str);
    }
    if (op == "PEXPIRE") {
      Value* v = find(c[1]);
      if (!v) return RedisReply::integer_of(0);
      v->expires_at = now_ms + static_cast<std::int64_t>(to_d(c[2]));
      return RedisReply::integer_of(1);
    }
    if (op == "HINCRBYFLOAT") {
      Value* v = find(c[1]);
      if (!v) v = &(keys_[c[1]] = Value{Kind::Hash, {}, {}, {}, 0});
      if (v->kind != Kind::Hash) return wrongtype();
      double& f = v->hash[c[2]];
      f += to_d(c[3]);
      return RedisReply::string_of(fmt(f));
    }
    if (op == "HSETNX") {
      Value* v = find(c[1]);
      if (!v) v = &(keys_[c[1]] = Value{Kind::Hash, {}, {}, {}, 0});
      if (v->kind != Kind::Hash) return wrongtype();
      if (v->hash.count(c[2])) return RedisReply::integer_of(0);
      v->hash[c[2]] = to_d(c[3]);
      return RedisReply::integer_of(1);
    }
    if (op == "HGETALL") {
      RedisReply r;
      r.type = RedisReply::Type::Array;
      Value* v = find(c[1]);
      if (!v) return r;
      if (v->kind != Kind::Hash) return wrongtype();
      for (auto& [k, x] : v->hash) {
        r.elements.push_back(RedisReply::string_of(k));
        // Redis keeps the strings it was given: an integer reads back as one.
        const bool integral = x == static_cast<double>(static_cast<std::int64_t>(x));
        r.elements.push_back(RedisReply::string_of(integral ? std::to_string(static_cast<std::int64_t>(x)) : fmt(x)));
      }
      return r;
    }
    if (op == "ZADD") {
      Value* v = find(c[1]);
      if (!v) v = &(keys_[c[1]] = Value{Kind::ZSet, {}, {}, {}, 0});
      if (v->kind != Kind::ZSet) return wrongtype();
      bool added = v->zset.count(c[3]) == 0;
      v->zset[c[3]] = to_d(c[2]);
      return RedisReply::integer_of(added ? 1 : 0);
    }
    if (op == "ZREMRANGEBYSCORE") {  // key -inf (max
      Value* v = find(c[1]);
      if (!v) return RedisReply::integer_of(0);
      if (v->kind != Kind::ZSet) return wrongtype();
      double max = to_d(c[3].substr(1));
      std::int64_t n = 0;
      for (auto it = v->zset.begin(); it != v->zset.end();)
        if (it->second < max) {
          it = v->zset.erase(it);
          ++n;
        } else {
          ++it;
        }
      return RedisReply::integer_of(n);
    }
    if (op == "ZCARD") {
      Value* v = find(c[1]);
      if (!v) return RedisReply::integer_of(0);
      if (v->kind != Kind::ZSet) return wrongtype();
      return RedisReply::integer_of(static_cast<std::int64_t>(v->zset.size()));
    }
    if (op == "ZREM") {
      Value* v = find(c[1]);
      if (!v || v->kind != Kind::ZSet) return RedisReply::integer_of(0);
      return RedisReply::integer_of(static_cast<std::int64_t>(v->zset.erase(c[2])));
    }
    return RedisReply::error_of("ERR unknown command '" + op + "'");
  }

  std::map<std::string, Value> keys_;
};

}  // namespace levee::test
