#include "control/cpu.hpp"

#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace levee::control {

namespace {

std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string cgroup_v2_dir() {
  auto c = slurp("/proc/self/cgroup");
  if (!c) return {};
  std::istringstream in(*c);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      std::string rel = line.substr(3);
      for (const char* base : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        std::string dir = std::string(base) + rel;
        if (slurp(dir + "/cpu.stat")) return dir;
      }
    }
  }
  return {};
}

std::string cgroup_v1_dir(const std::string& controller) {
  auto c = slurp("/proc/self/cgroup");
  if (!c) return {};
  std::istringstream in(*c);
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = line.substr(a + 1, b - a - 1);
    if (("," + ctrls + ",").find("," + controller + ",") == std::string::npos) continue;
    std::string rel = line.substr(b + 1);
    for (const std::string& base : std::array<std::string, 2>{"/sys/fs/cgroup/" + controller, "/sys/fs/cgroup/cpu,cpuacct"}) {
      if (slurp(base + rel + "/cpu.cfs_quota_us") || slurp(base + rel + "/cpuacct.usage")) return base + rel;
    }
  }
  return {};
}

/// Quota in CPUs from a cgroup, or 0 when unlimited/unknown.
double cgroup_quota_cpus(const std::string& v2dir, const std::string& v1dir) {
  if (!v2dir.empty()) {
    if (auto m = slurp(v2dir + "/cpu.max")) {
      std::istringstream in(*m);
      std::string quota;
      double period = 100000;
      in >> quota >> period;
      if (quota != "max" && period > 0) return std::stod(quota) / period;
    }
  }
  if (!v1dir.empty()) {
    auto q = slurp(v1dir + "/cpu.cfs_quota_us");
    auto p = slurp(v1dir + "/cpu.cfs_period_us");
    if (q && p) {
      double qq = std::stod(*q), pp = std::stod(*p);
      if (qq > 0 && pp > 0) return qq / pp;
    }
  }
  return 0;
}

std::uint64_t stat_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  std::uint64_t v;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

ThreadSchedReader::ThreadSchedReader(int tid) {
  std::string path = "/proc/self/task/" + std::to_string(tid) + "/schedstat";
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

ThreadSchedReader::~ThreadSchedReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<ThreadSched> ThreadSchedReader::read() const {
  if (fd_ < 0) return std::nullopt;
  char buf[128];
  ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return std::nullopt;
  buf[n] = 0;
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(buf, "%llu %llu", &run, &wait) != 2) return std::nullopt;
  return ThreadSched{run, wait};
}

HostCpu::HostCpu() {
  unsigned cpus = available_cpus();
  cpus_ = cpus;
  dir_ = cgroup_v2_dir();
  if (!dir_.empty()) {
    v2_ = true;
    double q = cgroup_quota_cpus(dir_, {});
    if (q > 0) cpus_ = std::min<double>(cpus_, q);
    source_ = "cgroup2:" + dir_;
    return;
  }
  std::string v1 = cgroup_v1_dir("cpuacct");
  if (!v1.empty() && slurp(v1 + "/cpuacct.usage")) {
    dir_ = v1;
    double q = cgroup_quota_cpus({}, cgroup_v1_dir("cpu"));
    if (q > 0) {
      cpus_ = std::min<double>(cpus_, q);
      source_ = "cgroup1:" + dir_;
      return;
    }
    dir_.clear();  // no quota: the host is the limit
  }
  source_ = "proc:/proc/stat";
}

std::optional<double> HostCpu::sample() {
  const std::uint64_t wall = mono_ns();
  if (!dir_.empty()) {
    std::uint64_t usage = 0, throttled = 0;
    if (v2_) {
      auto s = slurp(dir_ + "/cpu.stat");
      if (!s) return std::nullopt;
      usage = stat_field(*s, "usage_usec") * 1000;
      throttled = stat_field(*s, "throttled_usec") * 1000;
    } else {
      auto u = slurp(dir_ + "/cpuacct.usage");
      if (!u) return std::nullopt;
      usage = std::stoull(*u);
      if (auto s = slurp(cgroup_v1_dir("cpu") + "/cpu.stat")) throttled = stat_field(*s, "throttled_time");
    }
    std::optional<double> out;
    if (primed_ && wall > last_wall_ns_) {
      double dt = static_cast<double>(wall - last_wall_ns_);
      double u = static_cast<double>(usage - last_usage_ns_) / (dt * cpus_);
      // Any time throttled by the quota means the cgroup wanted more than it got.
      if (throttled > last_throttled_ns_) u = std::max(u, 1.0);
      out = std::clamp(u, 0.0, 1.0);
    }
    last_usage_ns_ = usage;
    last_throttled_ns_ = throttled;
    last_wall_ns_ = wall;
    primed_ = true;
    return out;
  }
  auto s = slurp("/proc/stat");
  if (!s) return std::nullopt;
  std::istringstream in(*s);
  std::string cpu;
  std::uint64_t v, total = 0, idle = 0;
  in >> cpu;
  for (int i = 0; i < 8 && in >> v; ++i) {
    total += v;
    if (i == 3 || i == 4) idle += v;  // idle, iowait
  }
  std::optional<double> out;
  if (primed_ && total > last_total_) {
    out = 1.0 - static_cast<double>(idle - last_idle_) / static_cast<double>(total - last_total_);
  }
  last_idle_ = idle;
  last_total_ = total;
  primed_ = true;
  return out;
}

unsigned available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  unsigned n = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<unsigned>(CPU_COUNT(&set));
  double q = cgroup_quota_cpus(cgroup_v2_dir(), cgroup_v1_dir("cpu"));
  if (q > 0) n = std::min<unsigned>(n, static_cast<unsigned>(std::max(1.0, std::ceil(q))));
  return std::max(1u, n);
}

}  // namespace levee::control
