// Backend-independent part of ccht::table: argument checks (the same errors on every backend),
// synchronous wrappers over the async calls, then one call into detail::launcher<Backend>.
#pragma once

#include <ccht/detail/launcher.hpp>
#include <ccht/detail/validate.hpp>
#include <ccht/error.hpp>

#include <string>
#include <utility>

namespace ccht {
namespace detail {

/// Backend words for one synchronous call; finish() waits and throws if the batch was rejected.
template <class Backend>
class sync_call {
 public:
  using launcher_type = launcher<Backend>;
  using stream_type = typename Backend::stream_type;

  sync_call(char const* op, stream_type stream)
      : op_(op),
        stream_(launcher_type::sync_stream(stream)),
        words_(launcher_type::acquire_words(stream_)) {}
  ~sync_call() {
    if (words_ != nullptr) {
      std::size_t host[2];
      try {
        launcher_type::release_words(words_, host, stream_);
      } catch (...) {  // already unwinding from another error
      }
    }
  }
  sync_call(sync_call const&) = delete;
  sync_call& operator=(sync_call const&) = delete;

  /// The stream the call runs on (launcher::sync_stream of the caller's).
  stream_type stream() const noexcept { return stream_; }
  std::size_t* count() const noexcept { return words_; }
  std::size_t* reject() const noexcept { return words_ + 1; }

  /// Waits for the call; returns the count or throws error_code::reserved_key.
  std::size_t finish(std::span<key_type const> keys_for_message) {
    std::size_t host[2];
    launcher_type::release_words(std::exchange(words_, nullptr), host, stream_);
    if (host[1] != no_reject) {
      key_type k = 0;
      Backend::copy_to_host(&k, keys_for_message.data() + host[1], sizeof(k), stream_);
      throw error(error_code::reserved_key, reserved_key_message(op_, host[1], k));
    }
    return host[0];
  }

 private:
  char const* op_;
  stream_type stream_;
  std::size_t* words_;
};

}  // namespace detail

template <class Backend, class Policy>
table<Backend, Policy>::table(std::size_t num_slots, table_options options) : options_(options) {
  std::uint32_t const nb = detail::buckets_for_slots(num_slots, bucket_size);
  std::size_t const slots = std::size_t{nb} * bucket_size;
  if (options.capacity > slots) {
    throw error(error_code::invalid_size, "capacity " + std::to_string(options.capacity) +
                                              " exceeds the table's " + std::to_string(slots) +
                                              " slots");
  }
  if (options.capacity != 0 && options.capacity < slots && Policy::global == global_layer::none) {
    throw error(error_code::invalid_argument,
                std::string("capacity below the slots needs a policy with a global capacity "
                            "layer (double_lru, coarse_lru), not ") + Policy::name);
  }
  if (options.global_samples > max_global_samples) {
    throw error(error_code::invalid_argument,
                "global_samples " + std::to_string(options.global_samples) + " exceeds " +
                    std::to_string(max_global_samples));
  }
  if (options.own_first_slack > 255) {
    throw error(error_code::invalid_argument,
                "own_first_slack " + std::to_string(options.own_first_slack) +
                    " exceeds 255 (it is in 256ths of the victim age)");
  }
  state_.cpu_threads = options.cpu_threads;
  if constexpr (Policy::global != global_layer::none) {
    state_.view.capacity = options.capacity ? options.capacity : slots;
    state_.tail_index = Policy::global == global_layer::entry_lru &&
                        options.global_search != victim_search::sampled;
    state_.upper_index = state_.tail_index && (options.global_search == victim_search::two_level ||
                                               options.global_search == victim_search::own_first);
    state_.own_first = state_.upper_index && !Policy::kick_out &&
                       options.global_search == victim_search::own_first;
    state_.view.own_slack = options.own_first_slack;
    state_.bulk_select = options.bulk_victim_select && Policy::global == global_layer::entry_lru &&
                         !Policy::kick_out;
    state_.view.samples = options.global_samples != 0 ? options.global_samples
                          : state_.upper_index       ? default_two_level_samples
                          : state_.tail_index        ? default_tail_samples
                                                     : default_sampled_buckets;
  }
  launcher::create(state_, nb, options.seed, options.count_accesses);
}

template <class Backend, class Policy>
table<Backend, Policy>::~table() {
  launcher::destroy(state_);
}

template <class Backend, class Policy>
table<Backend, Policy>::table(table&& other) noexcept
    : state_(std::exchange(other.state_, {})), options_(other.options_) {}

template <class Backend, class Policy>
table<Backend, Policy>& table<Backend, Policy>::operator=(table&& other) noexcept {
  if (this != &other) {
    launcher::destroy(state_);
    state_ = std::exchange(other.state_, {});
    options_ = other.options_;
  }
  return *this;
}

template <class Backend, class Policy>
std::size_t table<Backend, Policy>::size(stream_type stream) const {
  return launcher::size(state_, launcher::sync_stream(stream));
}

template <class Backend, class Policy>
void table<Backend, Policy>::clear(stream_type stream) {
  stream = launcher::sync_stream(stream);
  launcher::clear(state_, stream);
  Backend::synchronize(stream);
}

template <class Backend, class Policy>
void table<Backend, Policy>::find(std::span<key_type const> keys, std::span<value_type> values_out,
                                  std::span<bool> found_out, stream_type stream) {
  detail::sync_call<Backend> call("find", stream);
  stream = call.stream();
  detail::check_span(keys, keys.size(), "find", "keys");
  detail::check_span(values_out, keys.size(), "find", "values_out");
  detail::check_span(found_out, keys.size(), "find", "found_out");
  if (!keys.empty()) {
    launcher::template find<Policy>(state_, keys.data(), values_out.data(), found_out.data(),
                                    keys.size(), call.reject(), stream);
  }
  call.finish(keys);
}

template <class Backend, class Policy>
void table<Backend, Policy>::find_async(std::span<key_type const> keys,
                                        std::span<value_type> values_out,
                                        std::span<bool> found_out, stream_type stream) {
  detail::check_span(keys, keys.size(), "find", "keys");
  detail::check_span(values_out, keys.size(), "find", "values_out");
  detail::check_span(found_out, keys.size(), "find", "found_out");
  if (keys.empty()) { return; }
  launcher::template find<Policy>(state_, keys.data(), values_out.data(), found_out.data(),
                                  keys.size(), nullptr, stream);
}

template <class Backend, class Policy>
void table<Backend, Policy>::contains(std::span<key_type const> keys, std::span<bool> found_out,
                                      stream_type stream) const {
  detail::sync_call<Backend> call("contains", stream);
  stream = call.stream();
  detail::check_span(keys, keys.size(), "contains", "keys");
  detail::check_span(found_out, keys.size(), "contains", "found_out");
  if (!keys.empty()) {
    launcher::contains(state_, keys.data(), found_out.data(), keys.size(), call.reject(), stream);
  }
  call.finish(keys);
}

template <class Backend, class Policy>
void table<Backend, Policy>::contains_async(std::span<key_type const> keys,
                                            std::span<bool> found_out, stream_type stream) const {
  detail::check_span(keys, keys.size(), "contains", "keys");
  detail::check_span(found_out, keys.size(), "contains", "found_out");
  if (keys.empty()) { return; }
  launcher::contains(state_, keys.data(), found_out.data(), keys.size(), nullptr, stream);
}

namespace detail {
inline void check_upsert_args(std::span<key_type const> keys, std::span<value_type const> values,
                              std::span<key_type> evicted_keys,
                              std::span<value_type> evicted_values) {
  char const* const op = "insert_or_assign";
  check_span(keys, keys.size(), op, "keys");
  check_span(values, keys.size(), op, "values");
  check_span(evicted_keys, keys.size(), op, "evicted_keys", true);
  check_span(evicted_values, keys.size(), op, "evicted_values", true);
}

inline void check_execute_args(std::span<op_code const> ops, std::span<key_type const> keys,
                               std::span<value_type const> values,
                               std::span<value_type> values_out, std::span<op_status> status_out,
                               std::span<key_type> evicted_keys,
                               std::span<value_type> evicted_values) {
  char const* const op = "execute";
  std::size_t const n = keys.size();
  check_span(ops, n, op, "ops");
  check_span(keys, n, op, "keys");
  check_span(values, n, op, "values");
  check_span(values_out, n, op, "values_out");
  check_span(status_out, n, op, "status_out");
  check_span(evicted_keys, n, op, "evicted_keys", true);
  check_span(evicted_values, n, op, "evicted_values", true);
}
}  // namespace detail

template <class Backend, class Policy>
std::size_t table<Backend, Policy>::insert_or_assign(std::span<key_type const> keys,
                                                     std::span<value_type const> values,
                                                     std::span<key_type> evicted_keys,
                                                     std::span<value_type> evicted_values,
                                                     stream_type stream) {
  detail::sync_call<Backend> call("insert_or_assign", stream);
  stream = call.stream();
  detail::check_upsert_args(keys, values, evicted_keys, evicted_values);
  // Launched for an empty batch too: the launcher then zeroes the count word, which the CUDA
  // backend reuses per thread (it would read the last call's count).
  launcher::template insert_or_assign<Policy>(state_, keys.data(), values.data(), keys.size(),
                                              evicted_keys.data(), evicted_values.data(),
                                              call.count(), call.reject(), stream);
  return call.finish(keys);
}

template <class Backend, class Policy>
void table<Backend, Policy>::insert_or_assign_async(std::span<key_type const> keys,
                                                    std::span<value_type const> values,
                                                    std::span<key_type> evicted_keys,
                                                    std::span<value_type> evicted_values,
                                                    std::size_t* num_evicted, stream_type stream) {
  detail::check_upsert_args(keys, values, evicted_keys, evicted_values);
  if (num_evicted == nullptr) {
    throw error(error_code::null_pointer, "insert_or_assign_async: num_evicted is null");
  }
  launcher::template insert_or_assign<Policy>(state_, keys.data(), values.data(), keys.size(),
                                              evicted_keys.data(), evicted_values.data(),
                                              num_evicted, nullptr, stream);
}

template <class Backend, class Policy>
std::size_t table<Backend, Policy>::erase(std::span<key_type const> keys, stream_type stream) {
  detail::sync_call<Backend> call("erase", stream);
  stream = call.stream();
  detail::check_span(keys, keys.size(), "erase", "keys");
  launcher::erase(state_, keys.data(), keys.size(), call.count(), call.reject(), stream);  // n = 0 zeroes the count
  return call.finish(keys);
}

template <class Backend, class Policy>
void table<Backend, Policy>::erase_async(std::span<key_type const> keys, std::size_t* num_erased,
                                         stream_type stream) {
  detail::check_span(keys, keys.size(), "erase", "keys");
  launcher::erase(state_, keys.data(), keys.size(), num_erased, nullptr, stream);  // n = 0 zeroes the count
}

template <class Backend, class Policy>
std::size_t table<Backend, Policy>::execute(
    std::span<op_code const> ops, std::span<key_type const> keys,
    std::span<value_type const> values, std::span<value_type> values_out,
    std::span<op_status> status_out, std::span<key_type> evicted_keys,
    std::span<value_type> evicted_values, stream_type stream) {
  detail::sync_call<Backend> call("execute", stream);
  stream = call.stream();
  detail::check_execute_args(ops, keys, values, values_out, status_out, evicted_keys,
                             evicted_values);
  launcher::template execute<Policy>(state_, ops.data(), keys.data(), values.data(),
                                     values_out.data(), status_out.data(), keys.size(),
                                     evicted_keys.data(), evicted_values.data(), call.count(),
                                     call.reject(), stream);  // n = 0 zeroes the count
  return call.finish(keys);
}

template <class Backend, class Policy>
void table<Backend, Policy>::execute_async(
    std::span<op_code const> ops, std::span<key_type const> keys,
    std::span<value_type const> values, std::span<value_type> values_out,
    std::span<op_status> status_out, std::span<key_type> evicted_keys,
    std::span<value_type> evicted_values, std::size_t* num_evicted, stream_type stream) {
  detail::check_execute_args(ops, keys, values, values_out, status_out, evicted_keys,
                             evicted_values);
  if (num_evicted == nullptr) {
    throw error(error_code::null_pointer, "execute_async: num_evicted is null");
  }
  launcher::template execute<Policy>(state_, ops.data(), keys.data(), values.data(),
                                     values_out.data(), status_out.data(), keys.size(),
                                     evicted_keys.data(), evicted_values.data(), num_evicted,
                                     nullptr, stream);
}

template <class Backend, class Policy>
std::size_t table<Backend, Policy>::export_entries(std::span<key_type> keys_out,
                                                   std::span<value_type> values_out,
                                                   stream_type stream) const {
  detail::check_span(keys_out, keys_out.size(), "export_entries", "keys_out");
  detail::check_span(values_out, keys_out.size(), "export_entries", "values_out");
  return launcher::export_entries(state_, keys_out.data(), values_out.data(), keys_out.size(),
                                  launcher::sync_stream(stream));
}

template <class Backend, class Policy>
void table<Backend, Policy>::check_async_error(stream_type stream) {
  launcher::check_async_error(state_, stream);
}

}  // namespace ccht
