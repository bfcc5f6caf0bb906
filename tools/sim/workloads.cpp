#include "workloads.hpp"

#include <ccht/core/hash.hpp>
#include <ccht/core/types.hpp>

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

namespace ccht::sim {

std::string_view to_string(distribution d) noexcept {
  switch (d) {
    case distribution::zipfian: return "zipfian";
    case distribution::uniform: return "uniform";
    case distribution::latest: return "latest";
    case distribution::scan: return "scan";
    case distribution::scan_mix: return "scan-mix";
  }
  return "?";
}

distribution parse_distribution(std::string_view name) {
  for (auto d : {distribution::zipfian, distribution::uniform, distribution::latest,
                 distribution::scan, distribution::scan_mix}) {
    if (name == to_string(d)) { return d; }
  }
  throw std::invalid_argument("unknown distribution '" + std::string(name) +
                              "' (expected zipfian, uniform, latest, scan, scan-mix)");
}

zipfian_generator::zipfian_generator(std::uint64_t n, double theta)
    : n_(0), theta_(theta), zetan_(0), zeta2_(1.0 + std::pow(0.5, theta)) {
  if (n == 0) { throw std::invalid_argument("zipfian needs at least one item"); }
  if (!(theta >= 0.0 && theta < 1.0)) {
    throw std::invalid_argument("zipfian theta must be in [0, 1), got " + std::to_string(theta));
  }
  grow(n);
}

void zipfian_generator::grow(std::uint64_t n) {
  for (std::uint64_t i = n_ + 1; i <= n; ++i) { zetan_ += 1.0 / std::pow(double(i), theta_); }
  n_ = n > n_ ? n : n_;
  recompute();
}

void zipfian_generator::recompute() noexcept {
  alpha_ = 1.0 / (1.0 - theta_);
  eta_ = n_ < 2 ? 1.0 : (1.0 - std::pow(2.0 / double(n_), 1.0 - theta_)) / (1.0 - zeta2_ / zetan_);
}

std::uint64_t zipfian_generator::next(double u) const noexcept {
  double const uz = u * zetan_;
  if (uz < 1.0 || n_ == 1) { return 0; }
  if (uz < zeta2_) { return 1; }
  auto const r = static_cast<std::uint64_t>(double(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
  return r < n_ ? r : n_ - 1;
}

double zipfian_generator::probability(std::uint64_t r) const noexcept {
  return 1.0 / std::pow(double(r + 1), theta_) / zetan_;
}

std::uint64_t scramble(std::uint64_t rank, std::uint64_t seed) noexcept {
  std::uint64_t k = hash64(rank, seed);  // a bijection of the rank
  return is_reserved_key(k) ? rank : k;  // (probability 2^-63; rank itself is then unused)
}

void validate(workload_options const& o) {
  if (o.keys == 0) { throw std::invalid_argument("--keys must be at least 1"); }
  if (!(o.zipf_theta >= 0.0 && o.zipf_theta < 1.0)) {
    throw std::invalid_argument("--zipf must be in [0, 1)");
  }
  if (!(o.read_ratio >= 0.0 && o.read_ratio <= 1.0)) {
    throw std::invalid_argument("--read-ratio must be in [0, 1]");
  }
  if (!(o.scan_fraction >= 0.0 && o.scan_fraction <= 1.0)) {
    throw std::invalid_argument("--scan-fraction must be in [0, 1]");
  }
}

std::vector<request> generate(workload_options const& o) {
  validate(o);
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uint64_t const key_seed = hash64(o.seed, 0x5eedull);
  std::vector<request> out;
  out.reserve(o.requests);

  std::uint64_t inserted = o.keys;  // latest: items so far
  std::uint64_t scan_pos = 0;
  zipfian_generator zipf(o.keys, o.dist == distribution::uniform ? 0.0 : o.zipf_theta);
  for (std::uint64_t i = 0; i < o.requests; ++i) {
    bool const update = unit(rng) >= o.read_ratio;
    std::uint64_t rank = 0;
    switch (o.dist) {
      case distribution::zipfian: rank = zipf.next(unit(rng)); break;
      case distribution::uniform:
        rank = std::uniform_int_distribution<std::uint64_t>(0, o.keys - 1)(rng);
        break;
      case distribution::latest:
        if (update) {
          rank = inserted++;  // an update inserts the next new key
          zipf.grow(inserted);
        } else {
          rank = inserted - 1 - zipf.next(unit(rng));  // favour the newest
        }
        break;
      case distribution::scan: rank = i % o.keys; break;
      case distribution::scan_mix:
        if (unit(rng) < o.scan_fraction) {
          rank = o.keys + scan_pos++;  // cold keys, each touched once
        } else {
          rank = zipf.next(unit(rng));
        }
        break;
    }
    out.push_back({scramble(rank, key_seed), update});
  }
  return out;
}

std::string describe(workload_options const& o) {
  std::ostringstream s;
  s << to_string(o.dist);
  if (o.dist != distribution::uniform && o.dist != distribution::scan) {
    s << "(theta=" << o.zipf_theta << ")";
  }
  s << " keys=" << o.keys << " requests=" << o.requests << " read=" << o.read_ratio;
  if (o.dist == distribution::scan_mix) { s << " scan=" << o.scan_fraction; }
  s << " seed=" << o.seed;
  return s.str();
}

}  // namespace ccht::sim
