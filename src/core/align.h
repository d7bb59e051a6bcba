// Rounding helpers, in one place: a size rounded up to an alignment, a count divided rounding up.
#pragma once

#include <type_traits>

namespace dlbench {

// `value` rounded up to a multiple of `alignment` (> 0); `value` >= 0.
template <typename T>
constexpr T align_up(T value, T alignment) {
  static_assert(std::is_integral_v<T>, "align_up rounds integers");
  return (value + alignment - 1) / alignment * alignment;
}

// ceil(`count` / `per`) for `count` >= 0 and `per` > 0: how many groups of `per` hold `count`.
template <typename T>
constexpr T ceil_div(T count, T per) {
  static_assert(std::is_integral_v<T>, "ceil_div divides integers");
  return (count + per - 1) / per;
}

}  // namespace dlbench
