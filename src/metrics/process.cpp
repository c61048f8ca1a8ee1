#include "metrics/process.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#ifndef LEVEE_VERSION
#define LEVEE_VERSION "0.0.0"
#endif
#ifndef LEVEE_COMMIT
#define LEVEE_COMMIT "unknown"
#endif
#ifndef LEVEE_BUILD_TYPE
#define LEVEE_BUILD_TYPE "unknown"
#endif

namespace levee::metrics {

namespace {

/// The fields of /proc/self/stat that the gauges use (proc(5) numbering).
struct Stat {
  double utime_ticks = 0, stime_ticks = 0;  // (14), (15)
  double start_ticks = 0;                   // (22) since boot
  double vsize_bytes = 0;                   // (23)
  double rss_pages = 0;                     // (24)
};

std::optional<Stat> read_stat() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  // The command name (2) is in parentheses and may hold spaces or ')':
  // fields start after the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(close + 1));
  std::vector<std::string> t;
  for (std::string w; in >> w;) t.push_back(std::move(w));
  // t[0] is field (3), so field (k) is t[k - 3].
  if (t.size() < 22) return std::nullopt;
  auto num = [&](std::size_t field) { return std::stod(t[field - 3]); };
  Stat s;
  s.utime_ticks = num(14);
  s.stime_ticks = num(15);
  s.start_ticks = num(22);
  s.vsize_bytes = num(23);
  s.rss_pages = num(24);
  return s;
}

std::optional<double> boot_time_seconds() {
  std::ifstream f("/proc/stat");
  for (std::string key; f >> key;) {
    if (key == "btime") {
      double v = 0;
      if (f >> v) return v;
      return std::nullopt;
    }
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::nullopt;
}

std::optional<double> open_fds() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/fd", ec), end;
  if (ec) return std::nullopt;
  double n = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) return std::nullopt;
    ++n;
  }
  // The iterator's own descriptor on /proc/self/fd is listed too.
  return n - 1;
}

std::optional<double> max_fds() {
  std::ifstream f("/proc/self/limits");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream in(line.substr(std::string_view("Max open files").size()));
    std::string soft;
    if (!(in >> soft)) return std::nullopt;
    if (soft == "unlimited") return std::numeric_limits<double>::infinity();
    return std::stod(soft);
  }
  return std::nullopt;
}

double ticks_per_second() {
  const long t = ::sysconf(_SC_CLK_TCK);
  return t > 0 ? static_cast<double>(t) : 100.0;
}

double page_size() {
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<double>(p) : 4096.0;
}

GaugeSet gauge(std::string name, std::string help, std::function<std::optional<double>()> read,
               bool counter = false) {
  GaugeSet g{std::move(name), std::move(help), [read = std::move(read), counter](auto& out) {
               if (auto v = read()) out.push_back(sample({}, *v, counter));
             }};
  if (counter) g.type = prometheus::MetricType::Counter;
  return g;
}

}  // namespace

std::vector<GaugeSet> process_gauges() {
  const double hz = ticks_per_second();
  const double page = page_size();
  std::vector<GaugeSet> g;
  g.push_back(gauge("process_cpu_seconds_total", "Total user and system CPU time spent in seconds",
                    [hz]() -> std::optional<double> {
                      auto s = read_stat();
                      if (!s) return std::nullopt;
                      return (s->utime_ticks + s->stime_ticks) / hz;
                    },
                    true));
  g.push_back(gauge("process_resident_memory_bytes", "Resident memory size in bytes", [page]() -> std::optional<double> {
    auto s = read_stat();
    if (!s) return std::nullopt;
    return s->rss_pages * page;
  }));
  g.push_back(gauge("process_virtual_memory_bytes", "Virtual memory size in bytes", []() -> std::optional<double> {
    auto s = read_stat();
    if (!s) return std::nullopt;
    return s->vsize_bytes;
  }));
  g.push_back(gauge("process_open_fds", "Number of open file descriptors", open_fds));
  g.push_back(gauge("process_max_fds", "Maximum number of open file descriptors (soft limit)", max_fds));
  // Boot time and the start offset never change: read them once.
  std::optional<double> start;
  if (auto s = read_stat()) {
    if (auto boot = boot_time_seconds()) start = *boot + s->start_ticks / hz;
  }
  g.push_back(gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds",
                    [start] { return start; }));
  g.push_back({"levee_build_info", "levee's version, source commit, build type and allocator (always 1)",
               [b = build_info()](auto& out) {
                 out.push_back(sample({{"version", b.version}, {"commit", b.commit}, {"build_type", b.build_type},
                                       {"allocator", b.allocator}}, 1.0));
               }});
  return g;
}

// Asked of the dynamic linker, not of the build: a binary built with
// LEVEE_TCMALLOC but started without the library loaded says so.
static const char* allocator() noexcept { return ::dlsym(RTLD_DEFAULT, "tc_malloc") ? "tcmalloc" : "system"; }

BuildInfo build_info() noexcept { return {LEVEE_VERSION, LEVEE_COMMIT, LEVEE_BUILD_TYPE, allocator()}; }

}  // namespace levee::metrics
