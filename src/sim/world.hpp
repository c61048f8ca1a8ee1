// A scenario made into running parts: backends, levee instances, clients,
// the wire between them, the modelled Redis, and the scenario's events;
// run to the end and summarised in the load generator's formats.
#pragma once

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "sim/backend.hpp"
#include "sim/clients.hpp"
#include "sim/redis.hpp"
#include "sim/instance.hpp"
#include "sim/output.hpp"
#include "sim/scenario.hpp"

namespace levee::sim {

class World final : public Handler {
 public:
  explicit World(const Scenario& s);
  ~World();

  /// Runs every event up to the end of the load plus the longest deadline.
  void run();

  RunInfo info() const;
  std::vector<ClassStats> classes();
  std::vector<Second> seconds();
  std::vector<NodeSeries> nodes() const;

  void write_json(std::ostream& o, bool wall) {
    sim::write_json(o, info(), classes(), nodes(), clients_.front()->timeline, wall);
  }
  void write_csv(std::ostream& o) { sim::write_csv(o, classes(), seconds()); }

  Engine& engine() noexcept { return e_; }
  const std::vector<std::unique_ptr<Backend>>& backends(const std::string& group) const;
  const std::vector<std::unique_ptr<Instance>>& instances(const std::string& group) const;
  ClientGroup& clients(const std::string& group);
  double wall_seconds = 0;

  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;

 private:
  void apply(const EventSpec& ev);

  const Scenario& s_;
  Engine e_;
  Wire wire_;
  RedisModel redis_;
  std::map<std::string, std::vector<std::unique_ptr<Backend>>> backends_;
  std::map<std::string, std::vector<std::unique_ptr<Instance>>> instances_;
  std::vector<std::unique_ptr<Caller>> service_callers_;
  std::vector<std::unique_ptr<ClientGroup>> clients_;
  std::map<std::string, std::vector<Node*>> nodes_;
  TimePoint end_{};
};

}  // namespace levee::sim
