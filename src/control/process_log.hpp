// The process log (start-up, state changes, errors) on stderr, through
// spdlog. Not the access log: nothing per request goes here.
#pragma once

namespace levee::control {

void init_process_log(bool debug);

}  // namespace levee::control
