// Request criticality, from the SRE book's "Handling Overload": four levels,
// shed from the bottom up.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace levee::core {

/// Ordered so that a larger value is more critical: `a > b` means a is shed after b.
enum class Criticality : std::uint8_t {
  Sheddable = 0,
  SheddablePlus = 1,
  Critical = 2,
  CriticalPlus = 3,
};
inline constexpr std::size_t kCriticalityCount = 4;

constexpr std::size_t index(Criticality c) noexcept { return static_cast<std::size_t>(c); }
constexpr Criticality criticality_from_index(std::size_t i) noexcept {
  return static_cast<Criticality>(i);
}

/// Every level, most critical first (the order in which quota is consumed).
inline constexpr std::array<Criticality, kCriticalityCount> kAllCriticalities = {
    Criticality::CriticalPlus, Criticality::Critical, Criticality::SheddablePlus,
    Criticality::Sheddable};

/// "CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS", "SHEDDABLE": header, log and label value.
std::string_view to_string(Criticality c) noexcept;

/// Case-insensitive parse of the four names; surrounding spaces and tabs are ignored.
/// Returns nullopt for anything else (the caller answers 400 or reports a config error).
std::optional<Criticality> parse_criticality(std::string_view s) noexcept;

}  // namespace levee::core
