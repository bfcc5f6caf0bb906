#include "replay.hpp"

#include "exact_policies.hpp"

#include <ccht/ccht.hpp>
#include <ccht/policy_list.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

namespace ccht::sim {
namespace {

using clock_type = std::chrono::steady_clock;

access_counts diff(access_counts a, access_counts const& b) {
  a.bucket_reads -= b.bucket_reads;
  a.bucket_writes -= b.bucket_writes;
  a.bytes_read -= b.bytes_read;
  a.bytes_written -= b.bytes_written;
  return a;
}

template <class Cache>
replay_result run_exact(std::span<request const> reqs, std::size_t capacity) {
  Cache cache(capacity);
  auto const t0 = clock_type::now();
  for (request const& r : reqs) {
    if (r.update) {
      cache.put(r.key);
    } else {
      cache.access(r.key);
    }
  }
  replay_result out;
  out.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  out.requests = cache.stats().requests;
  out.updates = cache.stats().updates;
  out.hits = cache.stats().hits;
  out.evictions = cache.stats().evictions;
  out.backend = "host";
  return out;
}

/// Backend buffer of n elements (host vector on the CPU, device memory on CUDA).
template <class Backend, class T>
class buffer {
 public:
  explicit buffer(std::size_t n)
      : n_(n), p_(static_cast<T*>(Backend::allocate(n * sizeof(T) + 1))) {}
  ~buffer() { Backend::deallocate(p_); }
  buffer(buffer const&) = delete;
  buffer& operator=(buffer const&) = delete;
  std::span<T> span(std::size_t n) { return {p_, n}; }
  void upload(T const* host, std::size_t n) { Backend::copy_from_host(p_, host, n * sizeof(T)); }
  void download(T* host, std::size_t n) { Backend::copy_to_host(host, p_, n * sizeof(T)); }

 private:
  std::size_t n_;
  T* p_;
};

template <class Backend, class Policy>
replay_result run_table(std::span<request const> reqs, std::size_t capacity,
                        replay_options const& opt) {
  constexpr bool global = Policy::global != global_layer::none;
  std::size_t const slots = global ? table_slots_for_global(capacity, opt.slots_ratio)
                                   : table_slots_for_capacity(capacity, opt.slots_ratio);
  table_options to;
  to.seed = opt.seed;
  to.cpu_threads = opt.cpu_threads;
  to.capacity = global ? capacity : 0;
  to.global_samples = opt.global_samples;
  to.global_search = parse_victim_search(opt.global_search);
  to.own_first_slack = opt.own_slack;
  to.bulk_victim_select = opt.bulk_select;
  to.count_accesses = true;  // per-chunk counters: cheap enough for the replay path
  table<Backend, Policy> t(slots, to);
  access_counts lookups, inserts;
  std::size_t const batch = opt.batch;
  buffer<Backend, key_type> d_keys(batch), d_ek(batch);
  buffer<Backend, value_type> d_vals(batch), d_ev(batch);
  buffer<Backend, bool> d_found(batch);
  std::vector<key_type> queries, upserts;
  std::unique_ptr<bool[]> found(new bool[batch]);
  queries.reserve(batch);
  upserts.reserve(batch);

  replay_result out;
  auto const t0 = clock_type::now();
  for (std::size_t b = 0; b < reqs.size(); b += batch) {
    std::size_t const e = std::min(reqs.size(), b + batch);
    queries.clear();
    upserts.clear();
    for (std::size_t i = b; i < e; ++i) {
      (reqs[i].update ? upserts : queries).push_back(reqs[i].key);
    }
    out.updates += upserts.size();
    if (!queries.empty()) {
      std::size_t const q = queries.size();
      d_keys.upload(queries.data(), q);
      access_counts const before = t.access_stats();
      t.find(d_keys.span(q), d_vals.span(q), d_found.span(q));
      lookups += diff(t.access_stats(), before);
      d_found.download(found.get(), q);
      out.requests += q;
      for (std::size_t i = 0; i < q; ++i) {
        if (found[i]) {
          ++out.hits;
        } else {
          upserts.push_back(queries[i]);  // a miss inserts the key
        }
      }
    }
    if (!upserts.empty()) {
      std::size_t const u = upserts.size();
      d_keys.upload(upserts.data(), u);
      d_vals.upload(upserts.data(), u);  // the payload is the key itself
      access_counts const before = t.access_stats();
      out.evictions += t.insert_or_assign(d_keys.span(u), d_vals.span(u), d_ek.span(u),
                                          d_ev.span(u));
      inserts += diff(t.access_stats(), before);
      out.inserts += u;
    }
  }
  out.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  out.slots = t.num_slots();
  out.backend = Backend::name;
  out.lookup_accesses = lookups;
  out.insert_accesses = inserts;
  return out;
}

/// The table policy named @p policy in the tools' spelling (ccht-lru, ..., cht-random).
template <class Backend>
replay_result run_table_policy(std::span<request const> reqs, std::string const& policy,
                               std::size_t capacity, replay_options const& opt) {
  return with_policy(
      policy,
      [&]<class P>(std::type_identity<P>) { return run_table<Backend, P>(reqs, capacity, opt); },
      policy_naming::tools);
}

}  // namespace

std::vector<std::string> const& known_policies() {
  static std::vector<std::string> const names = [] {
    std::vector<std::string> n{"lru", "fifo", "lfu"};  // the exact references
    for_each_policy(
        [&]<class P>(std::type_identity<P>) { n.push_back(policy_name<P>(policy_naming::tools)); });
    return n;
  }();
  return names;
}

std::string unknown_policy_message(std::string const& policy) {
  std::string list;
  for (auto const& p : known_policies()) { list += (list.empty() ? "" : ", ") + p; }
  return "policy must be one of " + list + "; got '" + policy + "'";
}

std::size_t table_slots_for_global(std::size_t capacity, double slots_ratio) {
  if (!(slots_ratio > 0.0 && slots_ratio <= 1.0)) {
    throw std::invalid_argument("--slots-ratio must be in (0, 1]");
  }
  constexpr std::size_t b = default_bucket_size;
  // slots = capacity / ratio, rounded down to whole buckets but never below the capacity.
  auto slots = static_cast<std::size_t>(static_cast<double>(capacity) / slots_ratio) / b * b;
  if (slots < capacity) { slots = (capacity + b - 1) / b * b; }
  if (slots < 2 * b) { slots = 2 * b; }
  return slots;
}

std::size_t table_slots_for_capacity(std::size_t capacity, double slots_ratio) {
  if (!(slots_ratio > 0.0 && slots_ratio <= 1.0)) {
    throw std::invalid_argument("--slots-ratio must be in (0, 1]");
  }
  constexpr std::size_t b = default_bucket_size;
  // Until a global capacity layer exists, the table itself is the capacity: never more slots
  // than the exact policy it is compared with.
  std::size_t const slots = capacity / b * b;
  if (slots < 2 * b) {
    throw std::invalid_argument("capacity " + std::to_string(capacity) +
                                " is below the table's minimum of two buckets (" +
                                std::to_string(2 * b) + " slots)");
  }
  return slots;
}

replay_result replay(std::span<request const> requests, std::string const& policy,
                     std::size_t capacity, replay_options const& options) {
  if (capacity == 0) { throw std::invalid_argument("capacity must be at least 1"); }
  if (options.batch == 0) { throw std::invalid_argument("--batch must be at least 1"); }
  replay_result r;
  if (policy == "lru") {
    r = run_exact<exact_lru>(requests, capacity);
  } else if (policy == "fifo") {
    r = run_exact<exact_fifo>(requests, capacity);
  } else if (policy == "lfu") {
    r = run_exact<exact_lfu>(requests, capacity);
  } else if (is_policy_name(policy, policy_naming::tools)) {
    if (options.backend == "cpu") {
      r = run_table_policy<cpu_backend>(requests, policy, capacity, options);
    } else if (options.backend == "cuda") {
#if CCHT_WITH_CUDA
      if (!cuda_backend::available()) {
        throw std::invalid_argument("--backend cuda: no GPU is available here");
      }
      r = run_table_policy<cuda_backend>(requests, policy, capacity, options);
#else
      throw std::invalid_argument("--backend cuda: this build has no CUDA backend");
#endif
    } else {
      throw std::invalid_argument("unknown backend '" + options.backend + "' (expected cpu or cuda)");
    }
    r.batch = options.batch;
  } else {
    throw std::invalid_argument(unknown_policy_message(policy));
  }
  r.policy = policy;
  r.capacity = capacity;
  return r;
}

std::vector<request> as_queries(std::span<std::uint64_t const> keys) {
  std::vector<request> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) { out[i] = {keys[i], false}; }
  return out;
}

}  // namespace ccht::sim
