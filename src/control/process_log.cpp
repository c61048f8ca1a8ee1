#include "control/process_log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace levee::control {

void init_process_log(bool debug) {
  auto l = spdlog::stderr_logger_mt("levee");
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  l->set_level(debug ? spdlog::level::debug : spdlog::level::info);
  spdlog::set_default_logger(l);
}

}  // namespace levee::control
