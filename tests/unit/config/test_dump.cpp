// config::to_json (GET /admin/config) and config::locate (placing errors a
// reload finds after loading).
#include <catch2/catch_test_macros.hpp>

#include <string>

#include "config/config.hpp"
#include "config/dump.hpp"

using namespace levee::config;

namespace {

const char* kWithSecrets = R"(
workers: 2
listeners:
  - port: 8080
    routes:
      - cluster: app
clusters:
  - name: app
    endpoints: ["127.0.0.1:9000", {address: "svc.local:9001", weight: 3}]
quota_sync:
  enabled: false
  redis:
    address: "127.0.0.1:6379"
    password: hunter2-very-secret
)";

}  // namespace

TEST_CASE("the dump has every section, defaults filled in, and no secret", "[config][dump]") {
  auto r = load_string(kWithSecrets, "t.yaml");
  REQUIRE(r.ok());
  const std::string j = to_json(*r.config);
  CHECK(j.find("hunter2") == std::string::npos);
  CHECK(j.find("\"password\":\"<redacted>\"") != std::string::npos);
  CHECK(j.find("\"workers\":2") != std::string::npos);
  CHECK(j.find("svc.local") != std::string::npos);
  // A default nobody wrote.
  CHECK(j.find("\"drain_timeout\"") != std::string::npos);
  CHECK(j.front() == '{');
  CHECK(j.substr(j.size() - 2) == "}\n");
  // A section alone, as reload compares them.
  CHECK(section_json(*r.config, "workers") == "2");
  CHECK(section_json(*r.config, "quota_sync").find("<redacted>") != std::string::npos);
}

TEST_CASE("section_json tells a changed section from an unchanged one", "[config][dump]") {
  auto a = load_string(kWithSecrets, "t.yaml");
  std::string other = kWithSecrets;
  other.replace(other.find("weight: 3"), 9, "weight: 4");
  auto b = load_string(other, "t.yaml");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(section_json(*a.config, "clusters") != section_json(*b.config, "clusters"));
  CHECK(section_json(*a.config, "listeners") == section_json(*b.config, "listeners"));
}

TEST_CASE("locate finds keys and list items by path", "[config][dump]") {
  const std::string text = kWithSecrets;
  // Line 1 is the empty line after R"(.
  CHECK(locate(text, "workers") == std::pair{2, 1});
  CHECK(locate(text, "listeners[0].port") == std::pair{4, 5});
  CHECK(locate(text, "quota_sync.redis.password") == std::pair{14, 5});
  CHECK(locate(text, "clusters[0].name") == std::pair{8, 5});
  // Absent keys and indices, and text that is not YAML, have no place.
  CHECK(locate(text, "admin") == std::pair{0, 0});
  CHECK(locate(text, "listeners[3].port") == std::pair{0, 0});
  CHECK(locate("{ not yaml", "workers") == std::pair{0, 0});
}
