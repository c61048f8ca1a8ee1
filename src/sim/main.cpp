// levee-sim: runs a scenario (docs/simulation.md) in simulated time with
// the real admission core, and writes the load generator's JSON summary
// (stdout, or --json) and per-second CSV (--csv).
//
//   levee-sim SCENARIO.yaml [--seed N] [--json FILE] [--csv FILE] [--no-wall]
//             [--front NAME] [--step X] [--capacity RPS] [--commit SHA]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "sim/scenario.hpp"
#include "sim/world.hpp"

int main(int argc, char** argv) {
  using namespace levee::sim;
  std::string path, json, csv, front, commit;
  std::optional<std::uint64_t> seed;
  std::optional<double> step, capacity;
  bool wall = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "levee-sim: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--seed") seed = std::stoull(next());
      else if (a == "--json") json = next();
      else if (a == "--csv") csv = next();
      else if (a == "--front") front = next();
      else if (a == "--step") step = std::stod(next());
      else if (a == "--capacity") capacity = std::stod(next());
      else if (a == "--commit") commit = next();
      else if (a == "--no-wall") wall = false;
      else if (a == "--help" || a == "-h") {
        std::cout << "levee-sim SCENARIO.yaml [--seed N] [--json FILE] [--csv FILE] [--no-wall]\n"
                     "          [--front NAME] [--step X] [--capacity RPS] [--commit SHA]\n"
                     "See docs/simulation.md for the scenario format.\n";
        return 0;
      } else if (!a.empty() && a[0] == '-') {
        std::cerr << "levee-sim: unknown option " << a << "\n";
        return 2;
      } else {
        path = a;
      }
    } catch (const std::exception&) {
      std::cerr << "levee-sim: bad value for " << a << "\n";
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << "levee-sim: a scenario file is needed (--help)\n";
    return 2;
  }
  auto res = load_scenario_file(path);
  if (!res.scenario) {
    for (const auto& e : res.errors) std::cerr << "levee-sim: " << e << "\n";
    return 1;
  }
  Scenario& s = *res.scenario;
  if (seed) s.seed = *seed;
  if (!front.empty()) s.front = front;
  if (step) s.step = *step;
  if (capacity) s.capacity = *capacity;
  try {
    World w(s);
    const auto t0 = std::chrono::steady_clock::now();
    w.run();
    w.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!csv.empty()) {
      std::ofstream f(csv);
      w.write_csv(f);
    }
    auto info = w.info();
    if (!json.empty()) {
      std::ofstream f(json);
      w.write_json(f, wall);
    }
    w.write_json(std::cout, wall);
    std::fprintf(stderr, "levee-sim: %s: %llu requests, %llu events, %.1f s simulated in %.2f s (%.0f requests/s)\n",
                 s.name.c_str(), static_cast<unsigned long long>(info.requests),
                 static_cast<unsigned long long>(info.events), info.simulated_seconds, w.wall_seconds,
                 w.wall_seconds > 0 ? static_cast<double>(info.requests) / w.wall_seconds : 0.0);
    (void)commit;
  } catch (const std::exception& e) {
    std::cerr << "levee-sim: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
