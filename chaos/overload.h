// Overload{lambdas...}: one callable with every lambda's operator(), for std::visit over a variant
// (the worker's lines, the scenario's faults).
#pragma once

namespace mw {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
// clang 14 has no class template argument deduction for aggregates: say it.
template <class... F>
Overload(F...) -> Overload<F...>;

}  // namespace mw
