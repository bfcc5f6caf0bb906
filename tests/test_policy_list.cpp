// The one list of table policies and its name dispatch (include/ccht/policy_list.hpp): every name
// reaches its own type, in both spellings; a typo is a ccht::error naming every policy; and every
// policy of the list has its explicit instantiation on the CPU backend (a table of each links).
#include <ccht/ccht.hpp>
#include <ccht/policy_list.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

namespace {

using ccht::policy_naming;

/// The policies and their names, written out by hand: what the list must say.
struct expected_policy {
  char const* library;
  char const* tools;
  std::type_index type;
};
std::vector<expected_policy> const expected{
    {"lru", "ccht-lru", typeid(ccht::lru)},
    {"fifo", "ccht-fifo", typeid(ccht::fifo)},
    {"lfu", "ccht-lfu", typeid(ccht::lfu)},
    {"double-lru", "ccht-double-lru", typeid(ccht::double_lru)},
    {"coarse-lru", "ccht-coarse-lru", typeid(ccht::coarse_lru)},
    {"cht-lru", "cht-lru", typeid(ccht::lru_cht)},
    {"cht-random", "cht-random", typeid(ccht::random_cht)},
};

static_assert(ccht::table_policies::size == 7);
static_assert(ccht::is_table_policy<ccht::double_lru> && ccht::is_table_policy<ccht::random_cht>);
static_assert(!ccht::is_table_policy<int>);

/// The type with_policy() hands f for @p name.
std::type_index dispatched(std::string const& name, policy_naming naming) {
  return ccht::with_policy(
      name, []<class P>(std::type_identity<P>) { return std::type_index(typeid(P)); }, naming);
}

TEST(PolicyList, EveryNameDispatchesToItsType) {
  for (auto const& e : expected) {
    EXPECT_EQ(dispatched(e.library, policy_naming::library), e.type) << e.library;
    EXPECT_EQ(dispatched(e.tools, policy_naming::tools), e.type) << e.tools;
    EXPECT_TRUE(ccht::is_policy_name(e.library)) << e.library;
    EXPECT_TRUE(ccht::is_policy_name(e.tools, policy_naming::tools)) << e.tools;
  }
}

TEST(PolicyList, ListsThePoliciesInOrder) {
  std::vector<std::type_index> types;
  std::vector<std::string> library, tools;
  ccht::for_each_policy([&]<class P>(std::type_identity<P>) {
    types.emplace_back(typeid(P));
    library.push_back(ccht::policy_name<P>());
    tools.push_back(ccht::policy_name<P>(policy_naming::tools));
  });
  ASSERT_EQ(types.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(types[i], expected[i].type) << i;
    EXPECT_EQ(library[i], expected[i].library) << i;
    EXPECT_EQ(tools[i], expected[i].tools) << i;
  }
  EXPECT_EQ(ccht::policy_names(),
            "lru, fifo, lfu, double-lru, coarse-lru, cht-lru, cht-random");
  EXPECT_EQ(ccht::policy_names(policy_naming::tools),
            "ccht-lru, ccht-fifo, ccht-lfu, ccht-double-lru, ccht-coarse-lru, cht-lru, cht-random");
}

TEST(PolicyList, UnknownNameThrowsListingThePolicies) {
  struct bad {
    char const* name;
    policy_naming naming;
  };
  for (bad const b : {bad{"double_lru", policy_naming::library}, bad{"", policy_naming::library},
                      bad{"LRU", policy_naming::library},
                      bad{"ccht-lru", policy_naming::library},  // the other spelling
                      bad{"double-lru", policy_naming::tools},
                      bad{"ccht-cht-lru", policy_naming::tools}}) {
    EXPECT_FALSE(ccht::is_policy_name(b.name, b.naming)) << b.name;
    try {
      dispatched(b.name, b.naming);
      ADD_FAILURE() << "no error for '" << b.name << "'";
    } catch (ccht::error const& e) {
      EXPECT_EQ(e.code(), ccht::error_code::invalid_argument) << b.name;
      std::string const what = e.what();
      EXPECT_EQ(what, "ccht: invalid_argument: " + ccht::unknown_policy_message(b.name, b.naming));
      EXPECT_NE(what.find("'" + std::string(b.name) + "'"), std::string::npos) << what;
      for (auto const& x : expected) {
        char const* const name = b.naming == policy_naming::library ? x.library : x.tools;
        EXPECT_NE(what.find(name), std::string::npos) << what << " should name " << name;
      }
    }
  }
}

TEST(PolicyList, ReturnsWhatFReturns) {
  // A reference passes through, and f runs once, for the named policy only.
  int calls = 0;
  bool global = false;
  bool& r = ccht::with_policy("coarse-lru", [&]<class P>(std::type_identity<P>) -> bool& {
    ++calls;
    global = P::global == ccht::global_layer::bucket_lru;
    return global;
  });
  EXPECT_EQ(&r, &global);
  EXPECT_TRUE(global);
  EXPECT_EQ(calls, 1);
}

TEST(PolicyList, EveryPolicyIsInstantiated) {
  // A table of each policy, used through the launcher's templated members: this links only if
  // host/cpu/launcher_cpu.cpp instantiates every policy of the list.
  ccht::for_each_policy([]<class P>(std::type_identity<P>) {
    constexpr bool global = P::global != ccht::global_layer::none;
    ccht::table<ccht::cpu_backend, P> t(64, {.cpu_threads = 1, .capacity = global ? 48u : 0u});
    std::vector<ccht::key_type> keys{1, 2, 3}, ek(3);
    std::vector<ccht::value_type> vals{10, 20, 30}, out(3), ev(3);
    std::unique_ptr<bool[]> found(new bool[3]);
    std::vector<ccht::op_code> ops(3, ccht::op_code::find);
    std::vector<ccht::op_status> st(3);
    t.insert_or_assign(keys, vals, ek, ev);
    t.find(keys, out, std::span<bool>(found.get(), 3));
    t.execute(ops, keys, vals, out, st, ek, ev);
    EXPECT_EQ(out, vals) << P::name;
  });
}

}  // namespace
