// levee: an L7 admission-control reverse proxy.
//
//   levee [-c FILE]            run with FILE (default config/levee.yaml)
//   levee --validate FILE      check FILE and exit (0 valid, 2 invalid)
//   levee --version | --help
//
// Exit codes: 0 clean exit (including a drain on SIGTERM), 1 runtime
// failure (a port in use, say), 2 configuration errors.
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "config/config.hpp"
#include "control/process_log.hpp"
#include "core/text.hpp"
#include "control/server.hpp"
#include "proxy/tls_context.hpp"

#ifndef LEVEE_VERSION
#define LEVEE_VERSION "0.0.0"
#endif

namespace {

void usage(std::ostream& o) {
  o << "usage: levee [-c FILE] [--workers N] [--log-level L] [--debug]\n"
       "       levee --validate FILE\n"
       "       levee --version | --help\n"
       "\n"
       "  -c, --config FILE   configuration (default: config/levee.yaml)\n"
       "      --validate FILE check a configuration and exit: 0 valid, 2 invalid\n"
       "      --workers N     override `workers` from the configuration\n"
       "      --log-level L   process log level: trace, debug, info (default), warn,\n"
       "                      error, critical, off (POST /admin/log_level changes it later)\n"
       "      --debug         verbose process log (--log-level debug)\n"
       "\n"
       "Signals: SIGHUP reload the configuration, SIGUSR1 reopen the access log,\n"
       "         SIGTERM/SIGINT drain (/ready 503, drain_delay, finish in-flight, exit 0).\n"
       "Docs: docs/configuration.md, docs/operations.md\n";
}

int report(const levee::config::LoadResult& r) {
  for (const auto& e : r.errors) std::cerr << e.format() << '\n';
  std::cerr << r.errors.size() << " error(s) in the configuration\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "config/levee.yaml";
  std::string validate;
  unsigned workers = 0;
  bool debug = false;
  std::string log_level;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "levee: " << a << " needs " << what << '\n';
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-c" || a == "--config") path = value("a file");
    else if (a == "--validate") validate = value("a file");
    else if (a == "--workers") {
      const std::string v = value("a number");
      const auto n = levee::core::parse_u64(v);
      if (!n || *n < 1 || *n > 1024) {
        std::cerr << "levee: --workers must be a number from 1 to 1024, not '" << v << "'\n";
        return 2;
      }
      workers = static_cast<unsigned>(*n);
    }
    else if (a == "--debug") debug = true;
    else if (a == "--log-level") {
      log_level = value("a level");
      const auto l = spdlog::level::from_str(log_level);
      if (l == spdlog::level::off && log_level != "off") {
        std::cerr << "levee: --log-level must be trace, debug, info, warn, error, critical or off, not '"
                  << log_level << "'\n";
        return 2;
      }
    }
    else if (a == "--version") {
      std::cout << "levee " << LEVEE_VERSION << '\n';
      return 0;
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "levee: unknown argument '" << a << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (!validate.empty()) {
    auto r = levee::config::load_file(validate);
    if (r.ok()) r.errors = levee::proxy::check_tls(*r.config);  // certificate and key files
    if (!r.ok()) return report(r);
    std::cout << validate << ": ok\n";
    return 0;
  }
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << path << ": cannot read the file\n";
      return 2;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto r = levee::config::load_string(text, path);
  if (r.ok()) r.errors = levee::proxy::check_tls(*r.config);  // certificate and key files
  if (!r.ok()) return report(r);
  auto cfg = std::make_shared<levee::config::Config>(std::move(*r.config));
  if (workers) cfg->workers = workers;
  levee::control::init_process_log(debug);
  if (!log_level.empty()) spdlog::set_level(spdlog::level::from_str(log_level));
  // A write to a closed pipe (a piped access log whose reader exited, a
  // client gone) is an error to handle, not a reason to die.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    levee::control::Server server(cfg, std::move(text), workers);
    server.start();
    return server.run();
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    return 1;
  }
}
