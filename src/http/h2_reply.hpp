// What HTTP/2 needs that is pure: telling the client preface of a
// cleartext HTTP/2 connection (h2c, prior knowledge) from an HTTP/1.1
// request, the header block of a local reply, and the gRPC spelling of a
// local reply (Trailers-Only: :status 200 and grpc-status in one HEADERS
// frame), so that a gRPC client's retry throttling sees a status it knows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/decision.hpp"
#include "http/local_reply.hpp"

namespace levee::http {

/// "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (RFC 9113 3.4).
inline constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

enum class Preface : std::uint8_t { No, NeedMore, Yes };
/// What the first bytes of a connection are: the whole preface, a prefix
/// of it (read more), or anything else (HTTP/1.1).
Preface detect_preface(std::string_view first) noexcept;

/// gRPC status codes levee answers with (grpc/doc/statuscodes.md).
enum class GrpcStatus : std::uint8_t {
  Ok = 0,
  Cancelled = 1,
  Unknown = 2,
  InvalidArgument = 3,
  DeadlineExceeded = 4,
  NotFound = 5,
  PermissionDenied = 7,
  ResourceExhausted = 8,
  Internal = 13,
  Unimplemented = 12,
  Unavailable = 14,
  Unauthenticated = 16,
};

/// The gRPC status of a local reply: its reason's when it has one (quota
/// 8, overload and upstream failures 14, a deadline 4, a bad request 3,
/// no route or an unsupported feature 12), else its HTTP status's (the
/// gRPC HTTP-to-status mapping).
GrpcStatus grpc_status(const LocalReply& r) noexcept;
GrpcStatus grpc_status_of_http(int status) noexcept;

/// Whether a request's content-type is gRPC's ("application/grpc",
/// "application/grpc+proto", ...).
bool is_grpc(std::string_view content_type) noexcept;
/// Whether a gRPC body begins with a whole length-prefixed message (its
/// 5-byte prefix and the bytes it announces).
bool grpc_message_whole(std::string_view body) noexcept;

/// An HTTP/2 header block being built: names (lower-cased) and values are
/// copied into one store and read back as views. Kept in the per-worker
/// pool of exchange scratch and cleared without giving its memory back,
/// so that a warm worker builds a block, proxied or local, with no heap
/// allocation (the HTTP/2 library copies the block when it is submitted).
class H2Fields {
 public:
  void clear() noexcept {
    store_.clear();
    items_.clear();
  }
  /// clear(), and gives the memory back if a large block grew it past
  /// `max_bytes` (so that the pool does not keep a burst's worth).
  void clear_and_trim(std::size_t max_bytes) {
    if (store_.capacity() > max_bytes) std::string().swap(store_);
    if (items_.capacity() * sizeof(Item) > max_bytes) std::vector<Item>().swap(items_);
    clear();
  }
  std::size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  std::string_view name(std::size_t i) const noexcept { return view(items_[i].name_off, items_[i].name_len); }
  std::string_view value(std::size_t i) const noexcept { return view(items_[i].value_off, items_[i].value_len); }
  /// The memory the block holds, used or not.
  std::size_t bytes_held() const noexcept { return store_.capacity() + items_.capacity() * sizeof(Item); }
  /// The value of the first field called `name` ("" when none).
  std::string_view find(std::string_view name) const noexcept;

  /// Adds a field; its name is lower-cased. Neither may be a view into
  /// this block (adding may move the store).
  void add(std::string_view name, std::string_view value);
  void add(std::string_view name, std::uint64_t value);
  /// Adds a field whose value write(std::string&) appends to the string
  /// it is given.
  template <typename Write>
  void add_with(std::string_view name, Write&& write) {
    const std::size_t n = begin(name);
    write(store_);
    items_.back().value_len = static_cast<std::uint32_t>(store_.size() - n);
  }

 private:
  struct Item {
    std::uint32_t name_off, name_len, value_off, value_len;
  };
  /// Appends the (lower-cased) name and opens its item; returns where its
  /// value begins.
  std::size_t begin(std::string_view name);
  std::string_view view(std::uint32_t off, std::uint32_t len) const noexcept { return {store_.data() + off, len}; }

  std::string store_;
  std::vector<Item> items_;
};

/// The header block of a local reply over HTTP/2 (":status" first, no
/// connection-specific fields) and its body. `grpc`: Trailers-Only, no body.
/// request_id_name/request_id: returned to the client when not empty.
void h2_local_reply(const LocalReply& r, bool grpc, std::string_view request_id_name, std::string_view request_id,
                    H2Fields& fields, std::string& body);

/// grpc-message's percent-encoding (bytes outside printable ASCII, and
/// '%'), appended to `out`.
void grpc_percent_encode(std::string_view s, std::string& out);

}  // namespace levee::http
