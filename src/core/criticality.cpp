#include "core/criticality.hpp"

#include "core/text.hpp"

namespace levee::core {

std::string_view to_string(Criticality c) noexcept {
  switch (c) {
    case Criticality::CriticalPlus: return "CRITICAL_PLUS";
    case Criticality::Critical: return "CRITICAL";
    case Criticality::SheddablePlus: return "SHEDDABLE_PLUS";
    case Criticality::Sheddable: return "SHEDDABLE";
  }
  return "CRITICAL";
}

std::optional<Criticality> parse_criticality(std::string_view s) noexcept {
  s = trim(s);
  for (Criticality c : kAllCriticalities) {
    if (iequals(s, to_string(c))) return c;
  }
  return std::nullopt;
}

}  // namespace levee::core
