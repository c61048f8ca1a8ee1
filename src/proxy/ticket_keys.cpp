#include "proxy/ticket_keys.hpp"

#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace levee::proxy {

namespace {

constexpr std::size_t kRecord = 80;
constexpr std::size_t kMaxFileKeys = 16;

bool read_records(const std::string& path, std::vector<TicketKeys::Key>& out, std::string& why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    why = "cannot read session ticket keys '" + path + "'";
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() % kRecord != 0 || bytes.size() / kRecord > kMaxFileKeys) {
    why = "'" + path + "' must hold 1 to 16 keys of 80 random bytes each (" + std::to_string(bytes.size()) +
          " bytes); e.g. openssl rand 80 > " + path;
    return false;
  }
  for (std::size_t at = 0; at < bytes.size(); at += kRecord) {
    TicketKeys::Key k;
    std::memcpy(k.name.data(), bytes.data() + at, 16);
    std::memcpy(k.hmac.data(), bytes.data() + at + 16, 32);
    std::memcpy(k.aes.data(), bytes.data() + at + 48, 32);
    out.push_back(k);
  }
  return true;
}

}  // namespace

bool TicketKeys::maybe_rotate(core::TimePoint now, core::Duration interval, std::size_t keep) {
  std::lock_guard lk(mu_);
  if (from_file_) return false;
  if (!keys_.empty() && now - rotated_ < interval) return false;
  Key k;
  if (RAND_bytes(k.name.data(), static_cast<int>(k.name.size())) != 1 ||
      RAND_bytes(k.hmac.data(), static_cast<int>(k.hmac.size())) != 1 ||
      RAND_bytes(k.aes.data(), static_cast<int>(k.aes.size())) != 1)
    return false;  // keep the keys there are; the next tick tries again
  keys_.push_front(k);
  while (keys_.size() > std::max<std::size_t>(keep, 1)) keys_.pop_back();
  rotated_ = now;
  return true;
}

bool TicketKeys::read_file(const std::string& path, std::vector<Key>& out, std::string& why) {
  out.clear();
  return read_records(path, out, why);
}

void TicketKeys::use_file_keys(const std::vector<Key>& keys) {
  std::lock_guard lk(mu_);
  keys_.assign(keys.begin(), keys.end());
  from_file_ = true;
}

void TicketKeys::use_generated() {
  std::lock_guard lk(mu_);
  if (!from_file_) return;
  keys_.clear();
  from_file_ = false;
}

std::optional<TicketKeys::Key> TicketKeys::encrypting() const {
  std::lock_guard lk(mu_);
  if (keys_.empty()) return std::nullopt;
  return keys_.front();
}

std::optional<std::pair<TicketKeys::Key, bool>> TicketKeys::find(const unsigned char* name) const {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < keys_.size(); ++i)
    if (std::memcmp(keys_[i].name.data(), name, 16) == 0) return std::pair{keys_[i], i == 0};
  return std::nullopt;
}

std::size_t TicketKeys::size() const {
  std::lock_guard lk(mu_);
  return keys_.size();
}

SessionCache::~SessionCache() {
  for (auto& [id, sess] : by_id) SSL_SESSION_free(sess);
}

}  // namespace levee::proxy
