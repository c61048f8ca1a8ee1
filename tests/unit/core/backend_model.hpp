// A discrete-event model of a naive fixed-capacity backend: N workers, an
// unbounded FIFO in front of them, service times from a distribution. Used
// to check that the adaptive concurrency limit finds the backend's capacity.
#pragma once

#include <deque>
#include <functional>
#include <queue>
#include <vector>

#include "sim_time.hpp"

namespace levee::test {

struct BackendModel {
  struct Done {
    TimePoint at;
    TimePoint sent;
    std::uint32_t inflight_at_start;
    std::uint32_t tag = 0;  ///< the caller's, handed back (the limit's tag)
    bool operator>(const Done& o) const { return at > o.at; }
  };

  BackendModel(int workers, std::function<Duration()> service) : free(workers), service_(std::move(service)) {}

  /// service: this request's service time (zero: one drawn when it starts).
  void submit(TimePoint now, std::uint32_t inflight, std::uint32_t tag = 0, Duration service = {}) {
    if (free > 0) {
      --free;
      start(now, {now, inflight, tag, service});
    } else {
      waiting.push_back({now, inflight, tag, service});
    }
  }

  /// Pops the next completion (caller advances its clock to it).
  Done next() {
    Done d = events.top();
    events.pop();
    if (!waiting.empty()) {
      const Waiting w = waiting.front();
      waiting.pop_front();
      start(d.at, w);
    } else {
      ++free;
    }
    return d;
  }

  bool idle() const { return events.empty(); }

  struct Waiting {
    TimePoint sent;
    std::uint32_t inflight;
    std::uint32_t tag;
    Duration service;
  };
  int free;
  std::deque<Waiting> waiting;
  std::priority_queue<Done, std::vector<Done>, std::greater<>> events;
  Duration served_work{};

 private:
  void start(TimePoint now, const Waiting& w) {
    const Duration s = w.service > Duration::zero() ? w.service : service_();
    served_work += s;
    events.push({now + s, w.sent, w.inflight, w.tag});
  }
  std::function<Duration()> service_;
};

}  // namespace levee::test
