/**
 * @file policy_list.hpp
 * @brief The table policies as one list, their names, and with_policy(): a policy chosen by name
 *        at run time, handed on as a type.
 *
 * Adding a policy is one entry in CCHT_TABLE_POLICIES. Everything that enumerates the policies
 * follows that line: ccht::table_policies (the type list below), the CPU backend's explicit
 * instantiations (host/cpu/launcher_cpu.cpp), the CUDA backend's one translation unit per policy
 * (CMakeLists.txt reads the macro from this file), the Python binding (ccht.Table's `policy`), and
 * the CLI and simulator (`--policy`).
 *
 * Each policy has two spellings. Its library name is Policy::name (core/policy.hpp); Python takes
 * it. The tools (`ccht` and its simulator) also run exact reference caches called lru, fifo and
 * lfu, so they spell the CCHT policies with a "ccht-" prefix (ccht-lru, ccht-double-lru, ...); the
 * paper's kick-out baselines are not CCHT and keep their own names (cht-lru, cht-random).
 *
 * Host only (it builds strings and throws).
 */
#pragma once

#include <ccht/core/policy.hpp>
#include <ccht/error.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ccht {

/// The table policies, in the order tools list them: X(policy) for each. Keep the entries
/// X(name) separated by spaces: CMakeLists.txt parses this macro (one CUDA unit per entry).
#define CCHT_TABLE_POLICIES(X) \
  X(lru) X(fifo) X(lfu) X(double_lru) X(coarse_lru) X(lru_cht) X(random_cht)

/// A list of types.
template <class... Ts>
struct type_list {
  /// How many types the list holds.
  static constexpr std::size_t size = sizeof...(Ts);
};

namespace detail {
template <class List>
struct drop_first;
template <class T, class... Ts>
struct drop_first<type_list<T, Ts...>> {
  using type = type_list<Ts...>;
};
#define CCHT_DETAIL_POLICY_ENTRY(P) , P
}  // namespace detail

/// Every table policy (CCHT_TABLE_POLICIES), in its order.
using table_policies =
    typename detail::drop_first<type_list<void CCHT_TABLE_POLICIES(CCHT_DETAIL_POLICY_ENTRY)>>::type;
#undef CCHT_DETAIL_POLICY_ENTRY

/// Whether @p P is one of table_policies (an explicit instantiation of it exists on both backends).
template <class P, class List = table_policies>
inline constexpr bool is_table_policy = false;
/// @cond
template <class P, class... Ps>
inline constexpr bool is_table_policy<P, type_list<Ps...>> = (std::is_same_v<P, Ps> || ...);
/// @endcond

/// Which spelling of the policy names a caller takes (see the file's comment).
enum class policy_naming {
  library,  ///< Policy::name: lru, fifo, lfu, double-lru, coarse-lru, cht-lru, cht-random
  tools,    ///< the CLI's: ccht-lru, ..., ccht-coarse-lru for CCHT; cht-lru, cht-random as they are
};

/// The name of @p Policy in @p naming.
template <class Policy>
std::string policy_name(policy_naming naming = policy_naming::library) {
  bool const prefixed = naming == policy_naming::tools && !Policy::kick_out;
  return (prefixed ? std::string("ccht-") : std::string()) + Policy::name;
}

/// Calls f(std::type_identity<P>{}) for each P of table_policies, in order.
template <class F>
void for_each_policy(F&& f) {
  [&]<class... Ps>(type_list<Ps...>) { (f(std::type_identity<Ps>{}), ...); }(table_policies{});
}

/// The names of every policy in @p naming, comma-separated ("lru, fifo, ...").
inline std::string policy_names(policy_naming naming = policy_naming::library) {
  std::string out;
  for_each_policy([&]<class P>(std::type_identity<P>) {
    out += (out.empty() ? "" : ", ") + policy_name<P>(naming);
  });
  return out;
}

/// Whether @p name names a table policy in @p naming.
inline bool is_policy_name(std::string_view name, policy_naming naming = policy_naming::library) {
  bool found = false;
  for_each_policy([&]<class P>(std::type_identity<P>) {
    found = found || name == policy_name<P>(naming);
  });
  return found;
}

/// The message of the error with_policy() throws for @p name (without ccht::error's prefix).
inline std::string unknown_policy_message(std::string_view name,
                                          policy_naming naming = policy_naming::library) {
  return "policy must be one of " + policy_names(naming) + "; got '" + std::string(name) + "'";
}

namespace detail {
template <class R, class F, class P, class... Rest>
R with_policy_in(std::string_view name, policy_naming naming, F& f) {
  if (name == policy_name<P>(naming)) { return f(std::type_identity<P>{}); }
  if constexpr (sizeof...(Rest) > 0) {
    return with_policy_in<R, F, Rest...>(name, naming, f);
  } else {
    throw error(error_code::invalid_argument, unknown_policy_message(name, naming));
  }
}
}  // namespace detail

/**
 * @brief Calls @p f with the policy named @p name: f(std::type_identity<P>{}) for the P of
 *        table_policies whose name in @p naming is @p name, and returns what it returns.
 *
 * f must return the same type for every policy (a generic lambda taking std::type_identity<P>).
 * @throws ccht::error (invalid_argument) when no policy has that name; its message lists the
 *         valid names (unknown_policy_message)
 */
template <class F>
decltype(auto) with_policy(std::string_view name, F&& f,
                           policy_naming naming = policy_naming::library) {
  return [&]<class P0, class... Ps>(type_list<P0, Ps...>) -> decltype(auto) {
    using R = std::invoke_result_t<F&, std::type_identity<P0>>;
    static_assert((std::is_same_v<R, std::invoke_result_t<F&, std::type_identity<Ps>>> && ...),
                  "with_policy: f must return the same type for every policy");
    return detail::with_policy_in<R, F, P0, Ps...>(name, naming, f);
  }(table_policies{});
}

}  // namespace ccht
