// A configuration back out as text: the running config for GET
// /admin/config (JSON, secrets redacted, every default filled in), and the
// place of a key in a file, for errors found after loading (a reload that
// changes what only a restart can).
#pragma once

#include <string>
#include <string_view>

#include "config/config.hpp"

namespace levee::config {

/// The whole configuration as JSON (every field, defaults included).
/// Passwords, API keys and the admin token read "<redacted>".
std::string to_json(const Config& c);

/// One section of it (a top-level key: "admin", "quota_sync", ...), for
/// telling whether a section changed.
std::string section_json(const Config& c, std::string_view key);

/// The line and column (1-based) of the key at `path` ("workers",
/// "listeners[1].port") in YAML text; {0, 0} when it is not there.
std::pair<int, int> locate(const std::string& text, std::string_view path);

}  // namespace levee::config
