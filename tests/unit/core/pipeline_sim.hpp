// The admission pipeline driven in simulated time against a naive backend
// of fixed capacity: N workers with an unbounded FIFO in front of them,
// service times from a function. Arrivals are open loop; every granted
// request goes to the backend, every completion returns its permit with a
// latency sample, and queued requests are granted or dropped through the
// pipeline's wakes, as the proxy's shell would do. Outcomes are counted per
// criticality and per tenant.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <vector>

#include "core/admission.hpp"
#include "sim_time.hpp"

namespace levee::test {

struct PipelineSim {
  struct Job {
    std::uint64_t id;
    core::Criticality crit;
    core::TenantId tenant;
    TimePoint arrived;
    TimePoint deadline;
    TimePoint sent{};
    std::uint32_t inflight = 0;
    std::uint32_t tag = 0;  ///< the limit's tag for its grant (lane, probe)
    Duration service{};  ///< drawn when it starts at the backend
  };
  struct Done {
    TimePoint at;
    Job job;
    bool operator>(const Done& o) const { return at > o.at; }
  };
  struct Counts {
    std::uint64_t offered = 0, rejected = 0, served = 0, late = 0, queued = 0;
    std::map<core::Reason, std::uint64_t> reasons;
  };

  PipelineSim(core::AdmissionConfig cfg, int workers, std::function<Duration(const Job&)> service)
      : adm(std::move(cfg)), free_workers(workers), service_(std::move(service)) {}

  /// A request arrives now.
  core::Verdict arrive(core::Criticality c, core::TenantId t, Duration deadline, double u = 0.5) {
    Job j{next_id++, c, t, clk.now, clk.now + deadline};
    auto& k = by_crit[core::index(c)];
    ++k.offered;
    ++by_tenant[t].offered;
    core::Arrival a{c, t, 1, clk.now, j.deadline, u, j.id};
    core::Verdict v = adm.admit(a, sink());
    if (v.rejected()) {
      reject(j, v.decision.reason);
    } else if (v.queued()) {
      ++k.queued;
      queued.emplace(j.id, j);
    } else {
      submit(j, v.in_flight, v.tag);
    }
    flush();
    return v;
  }

  /// Advances simulated time to t, completing backend work and ticking the queue on the way.
  void advance_to(TimePoint t) {
    while (!events.empty() && events.top().at <= t) {
      Done d = events.top();
      events.pop();
      clk.now = d.at;
      complete(d);
    }
    clk.now = t;
    adm.tick(clk.now, sink());
    flush();
  }

  /// Open-loop arrivals at `rate` per second for `span`, criticality and tenant drawn by `pick`.
  void run(double rate, Duration span, Duration deadline,
           const std::function<std::pair<core::Criticality, core::TenantId>(Rng&)>& pick) {
    const Duration gap = core::from_seconds(1.0 / rate);
    const TimePoint end = clk.now + span;
    TimePoint next = clk.now;
    while (next < end) {
      advance_to(next);
      auto [c, t] = pick(rng);
      arrive(c, t, deadline, rng.u());
      next += gap;
    }
    advance_to(end);
  }

  double share_served(core::Criticality c) const {
    const auto& k = by_crit[core::index(c)];
    return k.offered ? static_cast<double>(k.served) / static_cast<double>(k.offered) : 1.0;
  }

  core::Admission adm;
  SimClock clk;
  Rng rng{42};
  int free_workers;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, Job> queued;
  std::deque<Job> backlog;
  std::priority_queue<Done, std::vector<Done>, std::greater<>> events;
  std::array<Counts, core::kCriticalityCount> by_crit{};
  std::map<core::TenantId, Counts> by_tenant;
  std::uint64_t backend_started = 0;
  std::uint64_t releases = 0;  ///< permits returned so far
  /// Called for every outcome: (job, served within deadline).
  std::function<void(const Job&, bool)> on_outcome;
  /// The backend reports each request's cost (request_cost.cpu): its
  /// service time, as a CPU-bound backend would.
  bool report_cost = false;

 private:
  struct Sink {
    PipelineSim* s;
    void operator()(const core::QueueGate::Wake& w) const { s->wakes_.push_back(w); }
  };
  Sink sink() { return Sink{this}; }
  void flush() {
    while (!wakes_.empty()) {
      auto w = wakes_.front();
      wakes_.erase(wakes_.begin());
      auto it = queued.find(w.cookie);
      if (it == queued.end()) continue;
      Job j = it->second;
      queued.erase(it);
      if (w.granted) submit(j, w.in_flight, w.tag);
      else reject(j, w.decision.reason);
    }
  }
  void reject(const Job& j, core::Reason r) {
    auto& k = by_crit[core::index(j.crit)];
    ++k.rejected;
    ++k.reasons[r];
    ++by_tenant[j.tenant].rejected;
    ++by_tenant[j.tenant].reasons[r];
    if (on_outcome) on_outcome(j, false);
  }
  void submit(Job j, std::uint32_t inflight, std::uint32_t tag) {
    j.sent = clk.now;
    j.inflight = inflight;
    j.tag = tag;
    ++backend_started;
    if (free_workers > 0) {
      --free_workers;
      j.service = service_(j);
      events.push({clk.now + j.service, j});
    } else {
      backlog.push_back(j);
    }
  }
  void complete(const Done& d) {
    const Job& j = d.job;
    const bool in_time = clk.now <= j.deadline;
    auto& k = by_crit[core::index(j.crit)];
    if (in_time) {
      ++k.served;
      ++by_tenant[j.tenant].served;
    } else {
      ++k.late;
    }
    if (on_outcome) on_outcome(j, in_time);
    core::QueueGate::Sample s{clk.now - j.sent, j.inflight, false};
    adm.on_attempt({clk.now, j.crit, j.tenant, core::Answer::Accepted,
                    report_cost ? std::optional<double>(core::to_seconds(j.service)) : std::nullopt, std::nullopt});
    adm.release(clk.now, &s, sink(), j.tag);
    ++releases;
    if (!backlog.empty()) {
      Job n = backlog.front();
      backlog.pop_front();
      n.service = service_(n);
      events.push({clk.now + n.service, n});
    } else {
      ++free_workers;
    }
    flush();
  }
  std::function<Duration(const Job&)> service_;
  std::vector<core::QueueGate::Wake> wakes_;
};

}  // namespace levee::test
