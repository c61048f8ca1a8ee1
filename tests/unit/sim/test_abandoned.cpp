// An attempt levee gives up on while its backend works keeps its permit
// until the backend is done (proxy/abandoned.hpp; the simulator's
// Instance::hold mirrors it).
#include <catch2/catch_test_macros.hpp>

#include "sim_helpers.hpp"

using levee::test::levee_yaml;
using levee::test::run;
using levee::test::Run;

namespace {
// 10 workers x 100 ms (100/s) behind a static limit of 10, offered 80/s:
// under capacity, but a third of the requests carry a 60 ms deadline, so
// levee gives up on each of them while the backend is still at it.
std::string impatient(const std::string& response_timeout) {
  return "name: impatient\nseed: 5\n"
         "backends:\n  - {name: app, workers: 10, service: fixed:100ms}\n"
         "levee:\n  - name: levee\n" +
         levee_yaml("concurrency: {limit: 10}, queue: {target: 2s}, response_timeout: " + response_timeout) +
         "clients:\n  - name: load\n    target: levee\n    phases: 10s@80\n"
         "    classes: [{name: patient, weight: 2, criticality: CRITICAL, deadline: 2s},"
         " {name: impatient, weight: 1, criticality: CRITICAL, deadline: 60ms}]\n";
}
}  // namespace

TEST_CASE("abandoned attempts: the backend never queues behind work levee gave up on") {
  Run r = run(impatient("30s"));
  const auto& be = *r.w().backends("app")[0];
  // The impatient requests do reach the backend, which answers each of
  // them after levee has given up (by then nobody waits for it).
  const auto& imp = r.cls("load", "impatient");
  CHECK(imp.offered > 200);
  CHECK(imp.ok == 0);
  CHECK(be.counters().answered == be.counters().received);
  CHECK(be.counters().received > 700);
  // Their permits came back only when the backend was done with them: the
  // backend never held more than its workers (it queued 10 and more per
  // burst when the permit came back at the give-up).
  CHECK(be.counters().max_queue == 0);
  // What the backend could serve was served.
  CHECK(Run::success(r.cls("load", "patient")) > 0.99);
}

TEST_CASE("abandoned attempts: a backend that hangs gives the permits back at the response timeout") {
  // With a response timeout shorter than the service time, the give-up
  // itself comes at the timeout: the permit is back at once and the
  // backend queues what levee sends meanwhile.
  Run r = run(impatient("50ms"));
  CHECK(r.w().backends("app")[0]->counters().max_queue > 0);
}
